# frozen_string_literal: true

# Real Sidekiq: several `sidekiq` processes on a Redis broker run jobs (test/sidekiq/jobs.rb)
# that call a real local HTTP server under one window limit. Checks that the server never
# sees more than the limit in any window, that every job completes, that the middleware's
# reschedules are counted in the job (`overrated` 0, 1, 2, ...) and wait at least the
# configured backoff, and that a job past its limiter's `reschedule:` reaches Sidekiq's retry
# set with the OverLimit error.
#
# Lean by default (2 processes, 12 jobs, 3 per second); RATEKEEPER_LONG_TESTS=1 runs 4
# processes x 5 threads, 60 jobs, 5 per second.
require_relative "test_helper"
require "webrick"
require "json"
require "sidekiq"
require "sidekiq/api"
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

class SidekiqTest < Minitest::Test
  LONG = ENV["RATEKEEPER_LONG_TESTS"] == "1"
  PROCESSES = LONG ? 4 : 2
  THREADS = LONG ? 5 : 3
  JOBS = LONG ? 60 : 12
  LIMIT = LONG ? 5 : 3
  INTERVAL = 1.0
  STEP = 0.3 # backoff seconds per reschedule
  LATENCY = 0.1 # arrival-time slack: a request reaches the server a little after its admission

  def setup
    @redis = RedisServer.new
    @prefix = unique_prefix
    @calls = Queue.new
    @http = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: 0, Logger: WEBrick::Log.new(File::NULL),
                                    AccessLog: [])
    @http.mount_proc("/call") do |req, res|
      @calls << { n: Integer(req.query["n"]), admitted_us: Integer(req.query["admitted_us"]),
                  arrived: Process.clock_gettime(Process::CLOCK_MONOTONIC) }
      res.body = "ok"
    end
    @http_thread = Thread.new { @http.start }
    @pids = []
    @logs = Dir.mktmpdir("rk-sidekiq")
  end

  def teardown
    @pids.each { |pid| Process.kill("TERM", pid) rescue nil } # rubocop:disable Style/RescueModifier
    @pids.each { |pid| Process.wait(pid) rescue nil } # rubocop:disable Style/RescueModifier
    @http&.shutdown
    @http_thread&.join
    @redis&.stop
    FileUtils.rm_rf(@logs) if passed?
  end

  def start_sidekiq(index)
    env = {
      "REDIS_URL" => @redis.url, "RK_PREFIX" => @prefix, "RK_API_URL" => "http://127.0.0.1:#{@http.config[:Port]}",
      "RK_LIMIT" => LIMIT.to_s, "RK_INTERVAL" => INTERVAL.to_s, "RK_BACKOFF_STEP" => STEP.to_s,
      "RUBYLIB" => [File.expand_path("../lib", __dir__), ENV["RUBYLIB"]].compact.join(":")
    }
    log = File.join(@logs, "sidekiq-#{index}.log")
    Process.spawn(env, "sidekiq", "-r", File.expand_path("sidekiq/jobs.rb", __dir__), "-c", THREADS.to_s,
                  "-t", "2", out: log, err: log)
  end

  def logs = Dir[File.join(@logs, "*.log")].map { |f| "#{f}:\n#{File.read(f).lines.last(15).join}" }.join("\n")

  def test_sidekiq_processes_share_one_window_and_reschedule_with_backoff
    Sidekiq.configure_client { |c| c.redis = { url: @redis.url } }
    # The poison limiter is spent before any job runs.
    never = Ratekeeper::Limiter.bucket("test-never", 1, :day, backend: Ratekeeper::Backend.redis(@redis.url, prefix: @prefix, deadline: 5))
    assert never.check.allowed?
    # The jobs' own retry options (this process does not load their classes): an error other
    # than the limit's fails the test instead of being retried quietly.
    jids = JOBS.times.map { |n| Sidekiq::Client.push("class" => "CallApiJob", "args" => [n], "retry" => 0) }
    never_jid = Sidekiq::Client.push("class" => "NeverJob", "args" => [], "retry" => 1)
    @pids = PROCESSES.times.map { |i| start_sidekiq(i) }

    calls = []
    retried = nil
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + (LONG ? 240 : 120)
    until calls.size >= JOBS && retried
      dead = Sidekiq::DeadSet.new.map { |j| "#{j['class']} #{j['jid']}: #{j['error_class']}: #{j['error_message']}" }
      flunk "jobs failed: #{dead.join('; ')}" unless dead.empty?
      flunk "timed out: #{calls.size} of #{JOBS} calls, retried: #{retried.inspect}\n#{logs}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      calls << @calls.pop until @calls.empty?
      retried ||= Sidekiq::RetrySet.new.find_job(never_jid)&.item
      sleep 0.1
    end
    sleep 2 * INTERVAL # anything still running would show up as an extra call
    calls << @calls.pop until @calls.empty?

    # Every job completed exactly once.
    assert_equal (0...JOBS).to_a, calls.map { |c| c[:n] }.sort

    # Never more than LIMIT in any window: by the limiter's own (Redis) clock, exactly; by the
    # server's arrival clock, allowing each request LATENCY to arrive.
    admitted = calls.map { |c| c[:admitted_us] }.sort
    admitted.each_cons(LIMIT + 1) do |span|
      assert_operator span.last - span.first, :>=, (INTERVAL * 1_000_000).to_i, "#{LIMIT + 1} admissions within #{INTERVAL} s"
    end
    arrived = calls.map { |c| c[:arrived] }.sort
    arrived.each_cons(LIMIT + 1) do |span|
      assert_operator span.last - span.first, :>=, INTERVAL - LATENCY, "#{LIMIT + 1} calls reached the server within #{INTERVAL - LATENCY} s"
    end

    attempts = Sidekiq.redis { |r| r.lrange("rk-test:attempts", 0, -1) }.map { |a| JSON.parse(a) }
    by_job = attempts.group_by { |a| a["jid"] }.transform_values { |list| list.sort_by { |a| a["at"] } }

    # Reschedules are counted in the job, one by one, and each waits at least the backoff.
    rescheduled = 0
    jids.each do |jid|
      tries = by_job.fetch(jid)
      assert_equal (0...tries.size).to_a, tries.map { |a| a["overrated"] }, "job #{jid}'s overrated counts"
      tries.each_cons(2) do |a, b|
        assert_operator b["at"] - a["at"], :>=, STEP * b["overrated"], "reschedule #{b['overrated']} of #{jid} came early"
      end
      rescheduled += tries.size - 1
    end
    assert_operator rescheduled, :>, 0, "the limit never made a job wait: the test proves nothing"

    # The poison job: rescheduled `reschedule:` (2) times, then Sidekiq's retry took over.
    assert_equal [0, 1, 2], by_job.fetch(never_jid).map { |a| a["overrated"] }.first(3)
    assert_equal "Ratekeeper::OverLimit", retried["error_class"]
    assert_equal 2, retried["overrated"]
    puts "\n  sidekiq: #{JOBS} jobs on #{PROCESSES} processes, #{rescheduled} reschedules" if ENV["VERBOSE"]
  end
end
