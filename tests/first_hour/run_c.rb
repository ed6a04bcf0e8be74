# The first-hour table (tests/first_hour/cases.json) through the C ABI: sets up the table's
# places (a loopback port nobody listens on, an HTTP server, the Redis of RK_TEST_REDIS_URL),
# fills them in, and feeds the cases C runs to tests/first_hour/run_c.c (the binary given as
# the first argument), one tab-separated line each: id, call, error, url, name, spec,
# other_spec, then the words ("-" for an empty field). Run by scripts/test-c.
require "json"
require "socket"

binary = ARGV.fetch(0)
redis_url = ENV.fetch("RK_TEST_REDIS_URL")
table = JSON.parse(File.read(File.join(__dir__, "cases.json")))

closed_port = Addrinfo.tcp("127.0.0.1", 0).bind { |s| s.local_address.ip_port }
# A web server's answer to anything: what a Redis client meets at an HTTP port.
http = TCPServer.new("127.0.0.1", 0)
Thread.new do
  loop do
    client = http.accept
    begin
      client.readpartial(4096)
      client.write("HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n<html><body>400</body></html>")
    rescue IOError, SystemCallError
      nil
    ensure
      client.close
    end
  end
end
places = { "closed_port" => closed_port.to_s, "http_port" => http.addr[1].to_s, "redis_url" => redis_url }
fill = lambda do |v|
  case v
  when String then places.reduce(v) { |s, (k, x)| s.gsub("{#{k}}", x) }
  when Array then v.map { |x| fill.call(x) }
  when Hash then v.transform_values { |x| fill.call(x) }
  else v
  end
end

lines = []
skipped = 0
table["cases"].each do |raw|
  unless raw.fetch("languages", ["c"]).include?("c")
    skipped += 1
    next
  end
  c = fill.call(raw)
  fields = [c["id"], c["call"], c["error"], c["url"], c["name"], c["spec"]&.to_json, c["other_spec"]&.to_json, *c["words"]]
  fields.each { |f| raise "#{c["id"]}: a field holds a tab or a newline" if f.to_s =~ /[\t\n]/ }
  lines << fields.map { |f| f.nil? || f == "" ? "-" : f }.join("\t")
end
puts "first-hour table: #{lines.size} cases through C, #{skipped} for other languages only"
IO.popen([binary], "r+") do |io|
  io.puts(lines)
  io.close_write
  $stdout.write(io.read)
end
exit($?.exitstatus || 1)
