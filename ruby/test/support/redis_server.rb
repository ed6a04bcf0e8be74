# frozen_string_literal: true

require "socket"
require "tmpdir"
require "fileutils"

# A real redis-server on a free loopback port (never 6379), started for the tests and stopped
# by pid. `RK_TEST_REDIS_URL` reuses one the caller started (scripts/test-c does).
class RedisServer
  attr_reader :url, :port, :pid

  def self.free_port
    loop do
      port = Addrinfo.tcp("127.0.0.1", 0).bind { |s| s.local_address.ip_port }
      return port unless port == 6379
    end
  end

  # The suite's shared server (started once, stopped at exit).
  def self.shared
    @shared ||=
      if ENV["RK_TEST_REDIS_URL"]
        Struct.new(:url).new(ENV["RK_TEST_REDIS_URL"])
      else
        server = new
        at_exit { server.stop }
        server
      end
  end

  def initialize
    @port = self.class.free_port
    @dir = Dir.mktmpdir("rk-redis")
    @pid = Process.spawn("redis-server", "--port", @port.to_s, "--bind", "127.0.0.1", "--dir", @dir,
                         "--save", "", "--appendonly", "no", "--logfile", File.join(@dir, "log"),
                         out: File::NULL, err: File::NULL)
    @url = "redis://127.0.0.1:#{@port}"
    200.times do
      return if ping

      sleep 0.025
    end
    raise "redis-server did not start: #{File.read(File.join(@dir, 'log')) rescue 'no log'}"
  end

  def ping
    TCPSocket.open("127.0.0.1", @port) do |s|
      s.write("PING\r\n")
      s.gets&.start_with?("+PONG")
    end
  rescue SystemCallError
    false
  end

  def stop
    return unless @pid

    Process.kill("TERM", @pid)
    Process.wait(@pid)
    @pid = nil
    FileUtils.rm_rf(@dir)
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  end
end
