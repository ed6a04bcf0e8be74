# frozen_string_literal: true

# The "Limits" tab of Sidekiq's Web UI in a real headless Chromium: the example
# (examples/ruby/sidekiq_web.ru) served by Puma, limiters registered on its Redis by this Ruby
# process and by a Python, a Node and a C process (tests/web/load.*, the CLI page's load), and
# tests/web/sidekiq_limits.test.mjs driving Chromium through playwright-core.
#
# Needs what scripts/test-ruby provides: RK_PYTHON (a Python with the ratekeeper module),
# node/ratekeeper.node, RK_C_LOAD (tests/web/load.c compiled), chromium and tests/web's
# node_modules.
require_relative "test_helper"
require "net/http"
require "json"

class SidekiqWebTest < Minitest::Test
  def setup
    @redis = RedisServer.new
    @pids = []
  end

  def teardown
    @pids.each { |pid| Process.kill("TERM", pid) rescue nil } # rubocop:disable Style/RescueModifier
    @pids.each { |pid| Process.wait(pid) rescue nil } # rubocop:disable Style/RescueModifier
    @redis.stop
  end

  # Starts a load process and waits for its "running" line.
  def start_load(*command)
    reader, writer = IO.pipe
    pid = Process.spawn(*command, @redis.url, out: writer, err: writer)
    writer.close
    @pids << pid
    line = reader.gets
    assert_match(/running/, line.to_s, "#{command.join(' ')} did not start: #{line}#{reader.read_nonblock(10_000, exception: false)}")
  end

  def test_the_limits_tab_lists_every_language_s_limiters
    python = ENV.fetch("RK_PYTHON") { flunk "RK_PYTHON (a Python with ratekeeper) is required: run scripts/test-ruby" }
    c_load = ENV.fetch("RK_C_LOAD") { flunk "RK_C_LOAD (tests/web/load.c compiled) is required: run scripts/test-ruby" }
    start_load(python, File.join(REPO_ROOT, "tests/web/load.py"))
    start_load("node", File.join(REPO_ROOT, "tests/web/load.cjs"))
    start_load(c_load)
    backend = Ratekeeper::Backend.redis(@redis.url)
    erp = backend.concurrent("rb-erp", 50)
    3.times { erp.within_limit { nil } }
    backend.set_limit("rb-erp", { kind: "concurrent", limit: 60, lock_timeout: 30 }, key: "tenant-9")
    backend.flush

    port = RedisServer.free_port
    log = File.join(Dir.tmpdir, "rk-sidekiq-web-#{port}.log")
    env = { "REDIS_URL" => @redis.url, "SESSION_SECRET" => "s" * 64,
            "RUBYLIB" => [File.expand_path("../lib", __dir__), ENV["RUBYLIB"]].compact.join(":") }
    @pids << Process.spawn(env, "puma", "-b", "tcp://127.0.0.1:#{port}", File.join(REPO_ROOT, "examples/ruby/sidekiq_web.ru"),
                           out: log, err: log)
    wait_for_http(port, log)

    expect = [
      { name: "rb-erp", kind: "concurrent", user: "ruby #{RUBY_VERSION}", override: "tenant-9: limit=60" },
      { name: "py-uploads", kind: "token_bucket", user: "python" },
      { name: "node-api", kind: "window", user: "node" },
      { name: "c-reports", kind: "concurrent", user: "c ratekeeper/" }
    ]
    screenshot = ENV["RK_SCREENSHOT"] || File.join(Dir.tmpdir, "rk-sidekiq-limits-#{port}.png")
    out = IO.popen({ "RK_BASE_URL" => "http://127.0.0.1:#{port}/", "RK_EXPECT" => JSON.generate(expect), "RK_SCREENSHOT" => screenshot },
                   ["node", File.join(REPO_ROOT, "tests/web/sidekiq_limits.test.mjs")], err: %i[child out], &:read)
    assert $?.success?, "#{out}\npuma log:\n#{File.read(log).lines.last(30).join}"
    assert_match(/1 passed, 0 failed/, out)
    assert File.size(screenshot).positive?
    [log, (screenshot unless ENV["RK_SCREENSHOT"])].compact.each { |f| File.delete(f) }
  end

  def wait_for_http(port, log)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
    loop do
      begin
        return if Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/limits")).code == "200"
      rescue SystemCallError, EOFError
        nil # not listening yet
      end
      flunk "puma did not serve /limits:\n#{File.read(log)}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.2
    end
  end
end
