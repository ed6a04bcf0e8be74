# frozen_string_literal: true

# A client cannot choose its own rate-limit key behind a trusted proxy (issue #41, items 1-3):
# the Rack middleware behind a real Puma. The test plays a trusted proxy on 127.0.0.1 in front
# of one client, which sends 10 requests against 2 a minute, varying a header the proxy does
# not strip: `Forwarded: for=<random>` beside the proxy's constant `X-Forwarded-For` (nginx, ALB
# and HAProxy append to X-Forwarded-For and pass Forwarded through), or its own
# `X-Forwarded-For` line followed by the one the proxy adds (HAProxy). Requests are written on a
# raw socket, so each header line reaches Puma as sent. At most 2 may pass (per minute the run
# touched), counted under the address the proxy gave.
require_relative "test_helper"
require_relative "support/puma_server"
require "json"
require "socket"

class RackProxyTest < Minitest::Test
  LIMIT = 2
  REQUESTS = 10
  APP = File.expand_path("support/proxy_app.ru", __dir__)

  def setup
    @redis = RedisServer.shared
    @prefix = unique_prefix
  end

  def spoofed = "198.18.#{rand(256)}.#{rand(1..254)}"

  # GET / with these header lines, as they are; the response's status.
  def raw_get(port, lines)
    TCPSocket.open("127.0.0.1", port) do |socket|
      socket.write((["GET / HTTP/1.1", "Host: 127.0.0.1", *lines, "Connection: close", "", ""]).join("\r\n"))
      Integer(socket.read[%r{\AHTTP/1\.1 (\d{3})}, 1] || flunk("no status line"))
    end
  end

  # Runs the block with a Puma serving `rackup` with `env`, stopped after it.
  def with_puma(rackup, env)
    puma = PumaServer.new(rackup, env)
    yield puma.port
  ensure
    puma&.stop(keep_log: !passed?)
  end

  # Sends the requests and judges what passed, and under which key.
  def judge(port, client, limiter_name: "proxied", backend: Ratekeeper::Backend.redis(@redis.url, prefix: @prefix))
    started = Time.now.to_i
    statuses = Array.new(REQUESTS) { raw_get(port, yield) }
    minutes = Time.now.to_i / 60 - started / 60 + 1
    admitted = statuses.count(200)
    assert_equal [], statuses - [200, 429]
    assert_operator admitted, :>=, 1, statuses.inspect
    assert_operator admitted, :<=, LIMIT * minutes, "#{admitted} of #{REQUESTS} admitted: #{statuses.inspect}"
    limiter = Ratekeeper::Limiter.window(limiter_name, LIMIT, :minute, backend: backend)
    assert_operator limiter.peek(client).remaining, :<, LIMIT, "counted under the address the proxy gave"
  end

  # The client's address as the proxy reports it (one key per scenario), the app's proxy header,
  # and one request's header lines as the app receives them, in order.
  SCENARIOS = {
    "varying_forwarded" => ["203.0.113.7", {}, ->(spoof) { ["Forwarded: for=#{spoof}", "X-Forwarded-For: 203.0.113.7"] }],
    "writing_its_own_first_x_forwarded_for_line" =>
      ["203.0.113.8", {}, ->(spoof) { ["X-Forwarded-For: #{spoof}", "X-Forwarded-For: 203.0.113.8"] }],
    # A proxy that sets Forwarded: the client varies X-Forwarded-For and writes a Forwarded line of
    # its own before the proxy's.
    "before_a_proxy_that_sets_forwarded" =>
      ["203.0.113.9", { "PROXY_HEADER" => "Forwarded" },
       ->(spoof) { ["X-Forwarded-For: #{spoof}", "Forwarded: for=#{spoof}", "Forwarded: for=\"203.0.113.9:4711\";proto=http"] }]
  }.freeze

  SCENARIOS.each do |name, (client, env, lines)|
    define_method("test_a_client_#{name}_is_one_client") do
      env = { "REDIS_URL" => @redis.url, "RK_PREFIX" => @prefix, "API_LIMIT" => LIMIT.to_s, "TRUSTED_PROXIES" => '["127.0.0.1"]' }.merge(env)
      with_puma(APP, env) { |port| judge(port, client) { lines.call(spoofed) } }
    end
  end

  # The documented example (examples/ruby/behind_proxy.ru) for each deployment it names: what
  # each sends the app when the client forges a Forwarded header and X-Forwarded-For entries of
  # its own, each proxy appending the address it was connected from. Cloudflare appends the
  # client, then nginx appends Cloudflare's edge (173.245.48.5). The ALB's VPC is the loopback
  # network here: the test connects from 127.0.0.1.
  DEPLOYMENTS = {
    "nginx" => ->(spoof) { ["Forwarded: for=#{spoof}", "X-Forwarded-For: #{spoof}, 203.0.113.7"] },
    "alb" => ->(spoof) { ["Forwarded: for=#{spoof}", "X-Forwarded-For: #{spoof}, 203.0.113.7"] },
    "cloudflare" => ->(spoof) { ["Forwarded: for=#{spoof}", "X-Forwarded-For: #{spoof}, 203.0.113.7, 173.245.48.5"] }
  }.freeze

  DEPLOYMENTS.each do |deployment, lines|
    define_method("test_the_behind_a_proxy_example_behind_#{deployment}") do
      redis = RedisServer.new
      env = { "REDIS_URL" => redis.url, "API_LIMIT" => LIMIT.to_s, "PROXY" => deployment, "VPC_CIDR" => "127.0.0.0/8" }
      with_puma(File.join(REPO_ROOT, "examples/ruby/behind_proxy.ru"), env) do |port|
        judge(port, "203.0.113.7", limiter_name: "api", backend: Ratekeeper::Backend.redis(redis.url)) { lines.call(spoofed) }
      end
    ensure
      redis&.stop
    end
  end
end
