# frozen_string_literal: true

# The shared bad-input table (tests/bad_input/cases.json) through the gem: each case is one call
# with one bad argument, which must raise Ratekeeper::InvalidArgument naming the parameter as
# Ruby spells it, before any state is written (limiter calls: a peek of the shared key and of
# "k" is the same before and after). Ruby spells a parameter as Python does, except where the
# Sidekiq-style constructors name it differently (RUBY_NAMES). A case the gem cannot express is
# skipped here, saying why (SKIP); the count of cases run is checked.
require_relative "test_helper"
require "json"
require "ratekeeper/rack"

class BadInputTest < Minitest::Test
  TABLE = JSON.parse(File.read(File.join(REPO_ROOT, "tests/bad_input/cases.json")))
  # Ruby's spelling where it is not Python's, per call.
  RUBY_NAMES = {
    "bucket" => { "limit" => "count" }, "window" => { "limit" => "count" }, "concurrent" => { "limit" => "count" },
    "points" => { "capacity" => "count", "refill" => "interval" }
  }.freeze
  NO_BACKOFF = "the gem has no Backoff object: the Sidekiq middleware's backoff is a Ruby lambda (Configuration#backoff)"
  SKIP = {
    "unlimited name with a bang" => "Limiter.unlimited takes no name (as in Sidekiq)",
    "with_wait_timeout -1" => "Ruby passes the wait to acquire / within_limit; there is no with_wait_timeout",
    "backoff base -1" => NO_BACKOFF, "backoff jitter NaN" => NO_BACKOFF, "backoff base above 100 years" => NO_BACKOFF,
    "backoff max_reschedules -1" => NO_BACKOFF, "reschedule_in attempt 0" => NO_BACKOFF,
    "reschedule_in attempt 1.5" => NO_BACKOFF, "reschedule_in retry_after -1" => NO_BACKOFF,
    "reschedule_in retry_after above 100 years" => NO_BACKOFF
  }.freeze
  # The table's http_middleware cases run through the Rack middleware, whose options are
  # Python's (the table spells them as Node does unless `args_python` is given).
  RACK_OPTION = { "keyGenerator" => "key", "standardHeaders" => "headers", "handler" => "on_refused",
                  "trustedProxies" => "trusted_proxies", "proxyHeader" => "proxy_header", "windowMs" => "window_ms",
                  "partitionKeySecret" => "partition_key_secret" }.freeze
  NO_PER_CALL_MAX_PAUSE = "the C ABI has no per-call max_pause (rk_limiter_with_max_pause bounds the limiter)"
  MIN_RUN = 100

  # The table's special values (its `conventions.values`); a lone surrogate becomes its WTF-8
  # bytes, which are not UTF-8 (what a Ruby String from the wire may hold).
  def self.value(v)
    case v
    when Hash
      return { "NaN" => Float::NAN, "Infinity" => Float::INFINITY, "-Infinity" => -Float::INFINITY }.fetch(v["number"]) if v.key?("number")
      return v["repeat"] * v["times"] if v.key?("repeat")
      return (v["lone_surrogate"].b + "\xED\xA0\x80".b).force_encoding(Encoding::UTF_8) if v.key?("lone_surrogate")

      v.transform_values { |x| value(x) }
    when Array then v.map { |x| value(x) }
    else v
    end
  end

  def limiter_of(spec, backend)
    Ratekeeper::Limiter.from_spec("bad", spec, backend: backend)
  end

  # Makes the case's call. Returns the limiter it was made on (for the no-write check), if any.
  def call(c, backend)
    a = self.class.value(c.fetch("args"))
    o = ->(*keys) { keys.select { |k| a.key?(k) }.to_h { |k| [k.to_sym, a[k]] } }
    case c["call"]
    when "memory" then Ratekeeper::Backend.memory(max_keys: a["max_keys"])
    when "redis"
      Ratekeeper::Backend.redis(a["url"], **o["prefix", "failure_policy", "fallback_divisor", "deadline", "connect_timeout",
                                              "tls_ca_file", "tls_ca_data", "tls_cert_file", "tls_key_file",
                                              "deny_cache", "deny_cache_max_entries", "replica_acks"])
    when "cluster"
      Ratekeeper::Backend.cluster(a["seeds"], **o["prefix", "failure_policy", "fallback_divisor", "deadline", "replica_acks"])
    when "sentinel"
      Ratekeeper::Backend.sentinel(a["sentinels"], a["service"], **o["db", "prefix", "deadline", "replica_acks"])
    when "bucket", "window"
      if a.key?("rate")
        Ratekeeper::Limiter.public_send(c["call"], a["name"], a["rate"], backend: backend)
      else
        Ratekeeper::Limiter.public_send(c["call"], a["name"], a["limit"], a["interval"], backend: backend)
      end
    when "windows" then Ratekeeper::Limiter.window(a["name"], a["windows"], backend: backend)
    when "sliding_window" then Ratekeeper::Limiter.sliding_window(a["name"], a["limits"], backend: backend)
    when "token_bucket" then Ratekeeper::Limiter.token_bucket(a["name"], a["rate"], a["capacity"], backend: backend)
    when "leaky" then Ratekeeper::Limiter.leaky(a["name"], a["size"], a["drain"], backend: backend)
    when "points" then Ratekeeper::Limiter.points(a["name"], a["capacity"], a["refill"], backend: backend)
    when "concurrent"
      Ratekeeper::Limiter.concurrent(a["name"], a["limit"], backend: backend, **o["lock_timeout", "wait_timeout", "allow_fallback"])
    when "calendar" then Ratekeeper::Limiter.calendar(a["name"], a["limit"], a["period"], backend: backend, **o["tz", "anchor"])
    when "limiter" then Ratekeeper::Limiter.from_spec(a["name"], a["spec"], backend: backend)
    when "check_all" then check_all(a["parts"], backend)
    when "set_limit" then backend.set_limit(a["name"], a["spec"], key: a["key"])
    when "clear_limit" then backend.clear_limit(a["name"], key: a["key"])
    when "http_middleware" then rack_middleware(c, backend)
    when "manual_clock" then Ratekeeper::ManualClock.new(a["start_us"])
    when "advance" then Ratekeeper::ManualClock.new(0).advance(a["seconds"])
    else call_on_limiter(c, a, backend)
    end
  end

  # Backend#check_all with each part's limiter built from its spec on `backend` (or, with
  # `other_backend`, on another); no part's state may change.
  def check_all(parts, backend)
    other = Ratekeeper::Backend.memory
    built = parts.each_with_index.map do |p, i|
      Ratekeeper::Limiter.from_spec("part#{i}", p["limiter"], backend: p["other_backend"] ? other : backend)
    end
    before = built.map { |l| l.peek("t1").to_h.except(:decided_at_us) }
    begin
      backend.check_all(parts.zip(built).map { |p, l| [l, p["key"], p.fetch("cost", 1)] })
    ensure
      assert_equal before, built.map { |l| l.peek("t1").to_h.except(:decided_at_us) }, "a refused check_all changed a part"
    end
  end

  # Ratekeeper::Rack built with the case's options (a `limiter` given as an object is a spec,
  # built on the case's backend).
  def rack_middleware(c, backend)
    options = self.class.value(c.fetch("args_python", c["args"]))["options"]
    options = options.to_h { |k, v| [RACK_OPTION.fetch(k, k).to_sym, v] }
    options[:limiter] = limiter_of(options[:limiter], backend) if options[:limiter].is_a?(Hash)
    Ratekeeper::Rack.new(->(_env) { [200, {}, []] }, logger: Logger.new(File::NULL), **options)
  end

  # The decision a settle case passes (see the table's `conventions.settle`).
  def settle_decision(c, limiter, which)
    case which
    when "check" then limiter.check(nil, cost: 0)
    when "peek" then limiter.peek
    when "other_limiter" then Ratekeeper::Limiter.from_spec("bad-other", c.fetch("limiter"), backend: Ratekeeper::Backend.memory).check(nil, cost: 0)
    when Hash then which["value"]
    else which
    end
  end

  def call_on_limiter(c, a, backend)
    limiter = limiter_of(c.fetch("limiter"), backend)
    before = [limiter.peek.to_h, limiter.peek("k").to_h]
    begin
      case c["call"]
      when "check" then a.key?("cost") ? limiter.check(a["key"], cost: a["cost"]) : limiter.check(a["key"])
      when "peek" then limiter.peek(a["key"])
      when "acquire" then limiter.acquire(a["key"], cost: a["cost"], wait_timeout: a["wait_timeout"])
      when "reset" then limiter.reset(a["key"])
      when "points_used" then limiter.points_used(a["estimate"], a["actual"], key: a["key"])
      when "pause" then limiter.pause(a["duration"], key: a["key"])
      when "observe" then limiter.observe(a["status"], a["headers"], key: a["key"])
      when "with_max_pause" then limiter.with_max_pause(a["max_pause"])
      when "with_shadow" then limiter.with_shadow(a["shadow"])
      when "resume" then limiter.resume(key: a["key"])
      when "block" then limiter.block(a["duration"], key: a["key"])
      when "unblock" then limiter.unblock(key: a["key"])
      when "with_block_for" then limiter.with_block_for(a["block_for"])
      when "with_shadow" then limiter.with_shadow(a["shadow"])
      when "with_deny_cache" then limiter.with_deny_cache(a["on"])
      when "within_limit"
        limiter.within_limit(key: a["key"], cost: a["cost"], wait_timeout: a["wait_timeout"], policy: a["policy"]&.to_sym) { flunk "the block ran" }
      when "settle" then limiter.settle(settle_decision(c, limiter, a["decision"]), a["actual"])
      else raise "unknown call #{c['call']}"
      end
    ensure
      after = [limiter.peek.to_h, limiter.peek("k").to_h]
      strip = ->(hs) { hs.map { |h| h.except(:decided_at_us) } }
      assert_equal strip[before], strip[after], "#{c['name']}: the refused call wrote state"
    end
  end

  cases = TABLE.fetch("cases")
  define_method(:test_enough_cases_run) do
    assert_operator cases.count { |c| !SKIP.key?(c["name"]) }, :>=, MIN_RUN
  end

  cases.each_with_index do |c, i|
    define_method("test_#{i}_#{c['name'].gsub(/[^A-Za-z0-9]+/, '_')}") do
      skip SKIP[c["name"]] if SKIP.key?(c["name"])
      skip NO_PER_CALL_MAX_PAUSE if c["call"] == "observe" && c["args"].key?("max_pause")
      backend = Ratekeeper::Backend.memory(clock: Ratekeeper::ManualClock.new(1_700_000_000_000_000))
      error = assert_raises(Ratekeeper::InvalidArgument, c["name"]) { call(c, backend) }
      python = c.fetch("parameter").fetch("python")
      want = RUBY_NAMES.fetch(c["call"], {}).fetch(python, python)
      assert_equal want, error.parameter, "#{c['name']}: #{error.message}"
      assert_empty backend.limiters.flat_map { |l| l["overrides"] }, "#{c['name']}: an override was written" if c["call"].end_with?("_limit")
    end
  end
end
