# frozen_string_literal: true

require "json"
require "open3"
require "socket"

# A real redis-server on a free loopback port (never 6379), started for the tests and stopped
# by pid: the fixture every suite shares (`rk-test-redis`, the binary of the workspace's
# `test-support` crate), with the Ruby API over it. `RK_TEST_REDIS_URL` reuses one the caller
# started (scripts/test-c does).
class RedisServer
  REPO = File.expand_path("../../..", __dir__)

  attr_reader :url, :port, :pid

  def self.free_port
    loop do
      port = Addrinfo.tcp("127.0.0.1", 0).bind { |s| s.local_address.ip_port }
      return port unless port == 6379
    end
  end

  # The shared fixture's binary: `RK_TEST_REDIS` (the test scripts set it), else the debug build
  # in the workspace's target directory, built on first use.
  def self.tool
    return ENV["RK_TEST_REDIS"] if ENV["RK_TEST_REDIS"]

    built = File.join(REPO, "target", "debug", "rk-test-redis")
    unless File.exist?(built)
      system("cargo", "build", "--quiet", "-p", "ratekeeper-test-support", "--bin", "rk-test-redis",
             chdir: REPO, exception: true)
    end
    built
  end

  def self.run(*args)
    out, err, status = Open3.capture3(tool, *args)
    raise "rk-test-redis #{args.join(' ')} failed: #{err.strip}" unless status.success?

    out
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
    info = JSON.parse(self.class.run("start", "--json")).fetch("servers").first
    @port = info.fetch("port")
    @pid = info.fetch("pid")
    @url = info.fetch("url")
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

    pid = @pid
    @pid = nil
    self.class.run("stop", pid.to_s)
  end
end

# A real 3-master Redis Cluster on free loopback ports (never 6379), started by the shared
# fixture (`rk-test-redis start --cluster`) and stopped by pid. `RK_TEST_REDIS_CLUSTER_SEEDS`
# (comma-separated URLs) reuses one the caller started.
class RedisCluster
  attr_reader :seeds, :pids

  # The suite's shared cluster (started on first use, stopped at exit).
  def self.shared
    @shared ||=
      if ENV["RK_TEST_REDIS_CLUSTER_SEEDS"]
        Struct.new(:seeds).new(ENV["RK_TEST_REDIS_CLUSTER_SEEDS"].split(","))
      else
        cluster = new
        at_exit { cluster.stop }
        cluster
      end
  end

  def initialize
    servers = JSON.parse(RedisServer.run("start", "--cluster", "--json")).fetch("servers")
    @pids = servers.map { |s| s.fetch("pid") }
    @seeds = servers.map { |s| s.fetch("url") }
  end

  def stop
    return if @pids.empty?

    pids = @pids
    @pids = []
    RedisServer.run("stop", *pids.map(&:to_s))
  end
end
