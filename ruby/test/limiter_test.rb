# frozen_string_literal: true

# The gem's API against a real redis-server: Sidekiq Enterprise's calls as its page shows them,
# what ratekeeper adds, the error taxonomy, threads and fork.
require "json"
require_relative "test_helper"

class LimiterTest < Minitest::Test
  def setup
    @backend = redis_backend
  end

  def test_concurrent_within_limit_holds_a_lease_for_the_block_and_gives_it_back
    erp = Ratekeeper::Limiter.concurrent("erp", 1, wait_timeout: 0, lock_timeout: 30, backend: @backend)
    inner = erp.within_limit do |handle|
      assert_operator handle.lease.fencing_token, :>, 0
      assert_equal 0, erp.peek.remaining
      # Another thread is refused while the slot is held, and :ignore skips its block.
      Thread.new { erp.within_limit(policy: :ignore) { :ran } }.value
    end
    assert_nil inner
    assert_equal 1, erp.peek.remaining
    assert_equal :value, erp.within_limit { :value }
  end

  def test_the_lease_is_released_when_the_block_raises
    mutex = Ratekeeper::Limiter.concurrent("mutex", 1, wait_timeout: 0, backend: @backend)
    assert_raises(ZeroDivisionError) { mutex.within_limit { 1 / 0 } }
    assert_equal 1, mutex.peek.remaining
  end

  def test_over_limit_carries_retry_after_and_the_limiter
    bucket = Ratekeeper::Limiter.bucket("stripe-42", 2, :hour, wait_timeout: 5, reschedule: 3, backend: @backend)
    2.times { bucket.within_limit { nil } }
    error = assert_raises(Ratekeeper::Limiter::OverLimit) { bucket.within_limit { flunk "ran over the limit" } }
    assert_kind_of Ratekeeper::Error, error
    assert_operator error.retry_after, :>, 0
    assert_operator error.retry_after, :<=, 3600
    assert_same bucket, error.limiter
    assert_equal 3, error.limiter.reschedule
  end

  def test_a_waiting_thread_gets_the_slot_a_holder_releases
    mutex = Ratekeeper::Limiter.concurrent("handoff", 1, wait_timeout: 5, backend: @backend)
    held = Queue.new
    done = Queue.new
    holder = Thread.new { mutex.within_limit { held << 1; done.pop } }
    held.pop
    waiter = Thread.new { mutex.within_limit { :got_it } }
    done << 1
    assert_equal :got_it, waiter.value
    holder.join
  end

  def test_window_admits_exactly_count_from_many_threads
    window = Ratekeeper::Limiter.window("threads", 25, 3600, wait_timeout: 0, backend: @backend)
    ran = Queue.new
    8.times.map { Thread.new { 10.times { window.within_limit(policy: :ignore) { ran << 1 } } } }.each(&:join)
    assert_equal 25, ran.size
  end

  def test_points_within_limit_corrects_the_estimate
    lmt = Ratekeeper::Limiter.points("shopify", 1000, 20, backend: @backend)
    left = lmt.within_limit(estimate: 200) { |handle| handle.points_used(50).remaining }
    assert_equal 950, left
  end

  def test_leaky_window_and_seconds_intervals
    leaky = Ratekeeper::Limiter.leaky("shopify-7", 60, :minute, wait_timeout: 0, backend: @backend)
    assert_equal({ "kind" => "leaky", "size" => 60, "drain" => 60 }, leaky.spec.slice("kind", "size", "drain"))
    window = Ratekeeper::Limiter.window("stripe-7", 5, 30, backend: @backend)
    assert_equal 30, window.spec["interval"]
    multi = Ratekeeper::Limiter.window("api", [[25, 5], [300, 60]], backend: @backend)
    assert_equal "windows", multi.kind
  end

  def test_rate_strings_stand_for_a_count_and_an_interval
    login = Ratekeeper::Limiter.window("login", "5/minute", backend: @backend)
    assert_equal({ "kind" => "window", "limit" => 5, "interval" => 60 }, login.spec.slice("kind", "limit", "interval"))
    api = Ratekeeper::Limiter.bucket("api", "100 per hour", backend: @backend)
    assert_equal({ "kind" => "bucket", "limit" => 100, "interval" => 3600 }, api.spec.slice("kind", "limit", "interval"))
    both = Ratekeeper::Limiter.window("both", "25/5s; 300/minute", backend: @backend)
    assert_equal [[25, 5], [300, 60]], both.spec["windows"]
    error = assert_raises(Ratekeeper::InvalidArgument) { Ratekeeper::Limiter.window("w", "5/minte", backend: @backend) }
    assert_equal "rate", error.parameter
    assert_match(/unknown unit "minte"/, error.message)
  end

  def test_unlimited_always_runs
    assert_equal 3, Ratekeeper::Limiter.unlimited.within_limit { 3 }
  end

  def test_check_peek_reset_and_keys
    tb = Ratekeeper::Limiter.token_bucket("api", 1, 3, backend: @backend)
    assert tb.check("alice", cost: 3).allowed?
    refute tb.check("alice").allowed?
    assert tb.check("bob").allowed?
    assert_equal 0, tb.peek("alice").remaining
    tb.reset("alice")
    assert_equal 3, tb.peek("alice").remaining
  end

  def test_from_spec_sliding_window_calendar_and_leased
    spec = Ratekeeper::Limiter.from_spec("spec", { kind: "token_bucket", rate: 10, capacity: 20 }, backend: @backend)
    assert_equal({ "kind" => "token_bucket", "rate" => 10, "capacity" => 20 }, spec.spec.slice("kind", "rate", "capacity"))
    sliding = Ratekeeper::Limiter.sliding_window("sw", [[60, 10, 1], [3600, 100]], backend: @backend)
    assert_equal "sliding_window", sliding.kind
    cal = Ratekeeper::Limiter.calendar("cal", 1000, :month, tz: "Europe/Berlin", anchor: 15, backend: @backend)
    assert_equal 15, cal.spec["anchor"]
    leased = Ratekeeper::Limiter.leased("leased", 100, 10, chunk: 2, backend: @backend)
    assert leased.check.allowed?
    leased.close
  end

  def test_live_limits_apply_to_a_running_limiter
    window = Ratekeeper::Limiter.window("live", 2, 3600, wait_timeout: 0, backend: @backend)
    @backend.set_limit("live", { kind: "window", limit: 5, interval: 3600 })
    assert_equal 5, window.peek.limit
    @backend.clear_limit("live")
    assert_equal 2, window.peek.limit
  end

  def test_observe_pauses_every_process_for_retry_after
    upstream = Ratekeeper::Limiter.bucket("upstream", 100, :minute, wait_timeout: 0, backend: @backend)
    assert_equal 0.0, upstream.observe(200, { "Retry-After" => "30" })
    assert_equal 30.0, upstream.observe(429, { "retry-after" => "30" })
    error = assert_raises(Ratekeeper::OverLimit) { upstream.within_limit { flunk "ran while paused" } }
    assert_operator error.retry_after, :>, 29
    assert_operator upstream.pause(60), :>=, 60
  end

  def test_max_pause_bounds_a_hostile_retry_after_and_resume_ends_a_pause
    upstream = Ratekeeper::Limiter.bucket("hostile", 100, :minute, wait_timeout: 0, backend: @backend)
    assert_equal 3600.0, upstream.observe(429, { "Retry-After" => "2200000000" }), "the default max_pause is one hour"
    assert upstream.resume, "a pause was in effect"
    refute upstream.resume, "no pause is left"
    assert upstream.check.allowed?
    bounded = upstream.with_max_pause(2)
    assert_equal 2.0, bounded.pause(600)
    refute bounded.check.allowed?
    assert upstream.resume, "the bounded copy paused the same key"
  end

  def test_block_unblock_and_block_for_keep_pauses_apart
    lim = Ratekeeper::Limiter.bucket("blocked", 100, :minute, wait_timeout: 0, backend: @backend)
    refute lim.unblock(key: "k"), "nothing to unblock yet"
    assert_equal 600.0, lim.block(600, key: "k")
    error = assert_raises(Ratekeeper::OverLimit) { lim.within_limit(key: "k") { flunk "ran while blocked" } }
    assert_operator error.retry_after, :>, 599
    refute lim.resume(key: "k"), "a block is not a pause"
    assert_equal 2.0, lim.block(2, key: "k"), "a block by hand replaces the one in effect"
    assert lim.unblock(key: "k")
    assert lim.check("k").allowed?
    assert_raises(Ratekeeper::InvalidArgument) { lim.block(0, key: "k") }
    assert_raises(Ratekeeper::InvalidArgument) { lim.with_block_for(-1) }
    strict = Ratekeeper::Limiter.bucket("strict", 1, :minute, wait_timeout: 0, backend: @backend).with_block_for(300)
    assert strict.check("u").allowed?
    assert_operator strict.check("u").retry_after, :>=, 299
    from_spec = Ratekeeper::Limiter.from_spec("strict", { kind: "bucket", limit: 1, interval: 60 }, backend: @backend)
    assert_operator from_spec.check("u").retry_after, :>, 290, "the block is the key's, whoever asks"
    cached = strict.with_deny_cache(true)
    assert_operator cached.check("u").retry_after, :>, 290, "a blocked key, remembered in process"
    assert_operator cached.check("u").retry_after, :>, 290
    assert_raises(Ratekeeper::InvalidArgument) { strict.with_deny_cache("yes") }
  end

  def test_the_registry_lists_the_limiters_used
    lim = Ratekeeper::Limiter.window("registered", 3, 60, backend: @backend)
    lim.check
    @backend.flush
    info = @backend.limiters.find { |l| l["name"] == "registered" }
    refute_nil info
    assert_equal "window", info["kind"]
    # The gem names Ruby (and its version) to the registry through rk_backend_new_from_json.
    assert(info["users"].any? { |u| u.start_with?("ruby #{RUBY_VERSION} ratekeeper/#{Ratekeeper.library_version}") }, info["users"].inspect)
  end

  def test_configure_sets_the_default_backend_backoff_and_errors
    slow_down = Class.new(StandardError)
    config = Ratekeeper::Limiter.configure do |c|
      c.redis = { url: redis_url, prefix: unique_prefix }
      c.backoff = ->(_limiter, job, _ex) { 10 * job["overrated"] }
      c.errors << slow_down
    end
    assert_equal :redis, Ratekeeper::Limiter.backend.kind
    assert_includes config.errors, slow_down
    assert_equal 30, config.backoff.call(nil, { "overrated" => 3 }, nil)
  ensure
    Ratekeeper::Limiter.config.backend = Ratekeeper::Backend.memory
    Ratekeeper::Limiter.config.backoff = Ratekeeper::Configuration::DEFAULT_BACKOFF
    Ratekeeper::Limiter.config.errors.delete(slow_down)
  end

  def test_the_default_backoff_is_sidekiqs
    config = Ratekeeper::Configuration.new
    delays = 200.times.map { config.backoff.call(nil, { "overrated" => 2 }, Ratekeeper::OverLimit.new(retry_after: 1.5)) }
    assert(delays.all? { |d| d.between?(601, 900) }, delays.minmax.inspect)
    long = config.backoff.call(nil, { "overrated" => 0 }, Ratekeeper::OverLimit.new(retry_after: 5000.2))
    assert_equal 5001, long
  end

  def test_errors_map_to_the_taxonomy
    error = assert_raises(Ratekeeper::InvalidArgument) { Ratekeeper::Limiter.bucket("not a name", 1, 1, backend: @backend) }
    assert_equal "name", error.parameter
    assert_equal "RK_INVALID_ARGUMENT", error.status
    error = assert_raises(Ratekeeper::InvalidArgument) { Ratekeeper::Limiter.concurrent("c", 0, backend: @backend) }
    assert_equal "count", error.parameter
    error = assert_raises(Ratekeeper::InvalidArgument) { Ratekeeper::Limiter.bucket("b", 1, :fortnight, backend: @backend) }
    assert_equal "interval", error.parameter
    error = assert_raises(Ratekeeper::InvalidArgument) { Ratekeeper::Limiter.bucket("b", 1, 1, policy: :maybe, backend: @backend) }
    assert_equal "policy", error.parameter
    error = assert_raises(Ratekeeper::InvalidArgument) { Ratekeeper::Limiter.window("w", 1, 1, backend: @backend).check("a\0b") }
    assert_equal "key", error.parameter
    error = assert_raises(Ratekeeper::InvalidArgument) { Ratekeeper::Backend.redis("http://127.0.0.1:1") }
    assert_equal "url", error.parameter
    lost = Ratekeeper::Limiter.concurrent("lost", 1, backend: @backend)
    lease = lost.acquire.lease
    lost.reset
    assert_raises(Ratekeeper::LeaseLost) { lost.release(lease) }
  end

  def test_an_unreachable_redis_fails_closed_or_open_as_configured
    port = RedisServer.free_port
    closed = Ratekeeper::Backend.redis("redis://127.0.0.1:#{port}", deadline: 0.2)
    error = assert_raises(Ratekeeper::Error) { closed.window("down", 1, 1).check }
    assert_includes [Ratekeeper::BackendUnavailable, Ratekeeper::TimeoutError], error.class
    open = Ratekeeper::Backend.redis("redis://127.0.0.1:#{port}", deadline: 0.2, failure_policy: :fail_open)
    assert open.window("down", 1, 1).check.allowed?
  end

  def test_a_redis_backend_on_a_manual_clock_takes_its_time_from_the_clock
    # The start of an hour (fixed windows are aligned to the epoch).
    clock = Ratekeeper::ManualClock.new(1_699_999_200_000_000)
    limiter = Ratekeeper::Limiter.bucket("clocked", 1, 3600, backend: redis_backend(clock: clock))
    assert limiter.check.allowed?
    refused = limiter.check
    refute refused.allowed?
    # The window ends when the clock says, not when the server's would.
    assert_equal 3600 * 1_000_000, refused.retry_after_us
    clock.advance(3600)
    assert limiter.check.allowed?
    [-> { redis_backend(clock: 5) }, -> { Ratekeeper::Backend.cluster([redis_url], clock: Object.new) }].each do |bad|
      assert_equal "clock", assert_raises(Ratekeeper::InvalidArgument) { bad.call }.parameter
    end
  end

  def test_backend_options_beyond_the_positional_constructor
    # connect_timeout and TLS material reach the library through rk_backend_new_from_json.
    timed = redis_backend(connect_timeout: 2, deadline: 1)
    assert Ratekeeper::Limiter.window("opts", 1, 60, backend: timed).check.allowed?
    Dir.mktmpdir do |dir|
      key = File.join(dir, "ca.key")
      pem = File.join(dir, "ca.pem")
      assert system("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=rk-test",
                    "-keyout", key, "-out", pem, out: File::NULL, err: File::NULL), "openssl could not make a certificate"
      assert_equal :redis, Ratekeeper::Backend.redis("rediss://127.0.0.1:1", tls_ca_file: pem).kind
      assert_equal :redis, Ratekeeper::Backend.redis("rediss://127.0.0.1:1", tls_ca_data: File.read(pem)).kind
      error = assert_raises(Ratekeeper::InvalidArgument) { Ratekeeper::Backend.redis("rediss://127.0.0.1:1", tls_ca_data: "not a certificate") }
      assert_equal "tls_ca_data", error.parameter
      error = assert_raises(Ratekeeper::InvalidArgument) { Ratekeeper::Backend.redis("rediss://127.0.0.1:1", tls_cert_file: pem) }
      assert_equal "tls_key_file", error.parameter
    end
  end

  def test_ruby_and_a_rust_process_share_one_bucket
    rust = ENV.fetch("RK_SHARED_BUCKET_BIN") { flunk "RK_SHARED_BUCKET_BIN (ffi-c/examples/shared_bucket) is required: run scripts/test-ruby" }
    century = 100.0 * 365 * 86_400 # windows aligned to 100 years: none ends during the test
    prefix = unique_prefix
    bucket = Ratekeeper::Limiter.bucket("shared-bucket", 10, century, backend: Ratekeeper::Backend.redis(redis_url, prefix: prefix, deadline: 5))
    4.times { bucket.within_limit { nil } }
    # A Rust process using the core directly sees what Ruby left, and takes it.
    out = IO.popen([rust, redis_url, prefix, "shared-bucket", "10", century.to_s], &:read)
    assert $?.success?, out
    assert_equal "remaining=6\nadmitted=6\n", out
    # And Ruby sees what Rust took.
    assert_equal 0, bucket.peek.remaining
    assert_nil bucket.within_limit(wait_timeout: 0, policy: :ignore) { flunk "ran over the limit" }
  end

  def test_a_limiter_built_before_fork_works_in_the_child_and_the_parent
    window = Ratekeeper::Limiter.window("forked", 10, 3600, wait_timeout: 0, backend: @backend)
    assert window.check.allowed? # the parent's connections exist before the fork
    reader, writer = IO.pipe
    pids = 3.times.map do
      fork do
        reader.close
        admitted = 5.times.count { window.check.allowed? }
        writer.puts admitted
        writer.close
        exit!(0)
      end
    end
    writer.close
    pids.each { |pid| Process.wait(pid) }
    admitted = reader.read.split.map(&:to_i)
    assert_equal 3, admitted.size
    assert_equal 9, admitted.sum, "the children share the parent's limit exactly"
    refute window.check.allowed?, "the parent still talks to Redis after its children"
    assert_equal 0, window.peek.remaining
  end

  # A decision stored outside the process (a job's arguments: its fields as JSON, and its seal)
  # is settled by another backend on the same Redis and prefix, and only unchanged: another key,
  # cost or id, or no matching seal, raises InvalidArgument naming `decision` and writes nothing.
  def test_a_stored_decision_settles_with_its_seal_and_only_unchanged
    prefix = unique_prefix
    mine = Ratekeeper::Backend.redis(redis_url, prefix: prefix, deadline: 5).token_bucket("llm", 0.001, 10)
    theirs = Ratekeeper::Backend.redis(redis_url, prefix: prefix, deadline: 5).token_bucket("llm", 0.001, 10)
    mine.check("victim", cost: 9)
    decision = mine.check("attacker", cost: 5)
    job = JSON.parse(JSON.generate(decision: decision.to_h.merge(settle: decision.settle.to_h), seal: mine.seal(decision)))
    rebuild = lambda do |**changes|
      fields = job["decision"].transform_keys(&:to_sym)
      ticket = Ratekeeper::SettleTicket.new(**fields[:settle].transform_keys(&:to_sym).merge(changes))
      Ratekeeper::Decision.new(**fields.merge(settle: ticket))
    end
    [rebuild.call(key: "victim"), rebuild.call(cost: 9), rebuild.call(id: job["decision"]["settle"]["id"] + 1)].each do |forged|
      error = assert_raises(Ratekeeper::InvalidArgument) { theirs.settle(forged, 0, seal: job["seal"]) }
      assert_equal "decision", error.parameter
    end
    error = assert_raises(Ratekeeper::InvalidArgument) { theirs.settle(rebuild.call, 0, seal: "00" * 32) }
    assert_equal "decision", error.parameter
    error = assert_raises(Ratekeeper::InvalidArgument) { theirs.settle(rebuild.call(key: "victim", cost: 9), 0) }
    assert_equal "decision", error.parameter, "a rebuilt ticket without its seal"
    assert_equal [1, 5], [mine.peek("victim").remaining, mine.peek("attacker").remaining], "nothing was written"
    assert_equal 10, theirs.settle(rebuild.call, 0, seal: job["seal"]).remaining
  end
end
