# frozen_string_literal: true

# The shared conformance vectors (tests/vectors/*.json and tests/vectors/check_all/) through the
# gem, so through the C ABI: every case builds its limiters with the gem's named constructors on
# a fresh backend driven by a ManualClock, and compares each decision and error with the one
# every other language gets. Each case runs on memory, on a real redis-server and on a real
# 3-master Redis Cluster (test/support: free loopback ports, stopped by pid); on Redis and
# Cluster each case has its own key prefix, so the cases share one server and one cluster, as
# the Python runner's do. One test per case and backend.
#
# The gem spells a few parameters as Sidekiq does (`count` for a bucket's, window's or
# concurrent limiter's limit; `count` and `interval` for a points limiter's capacity and
# refill): an expected error naming the shared spelling is compared under the Ruby one.
# Nothing is skipped: Ruby can say everything the vectors say (2^64 or more, a NUL, a Float
# count are InvalidArgument raised by the gem, naming the parameter, before any call).
require_relative "test_helper"
require "json"

class VectorsTest < Minitest::Test
  RUBY_NAMES = {
    "bucket" => { "limit" => "count" }, "window" => { "limit" => "count" },
    "concurrent" => { "limit" => "count" }, "points" => { "capacity" => "count", "refill" => "interval" }
  }.freeze
  SPECIALS = { "NaN" => Float::NAN, "Infinity" => Float::INFINITY, "-Infinity" => -Float::INFINITY }.freeze
  MIN_CASES = 120

  # A vector number: JSON numbers as they are (a whole Float stays a Float: the gem refuses it
  # as a count, as the vectors expect of 1.5 and as typed languages do), the special spellings.
  def self.num(value) = SPECIALS.fetch(value, value)

  # Shadow mode is an option of every kind: the gem's limiters take it by `with_shadow`.
  def self.build(backend, spec)
    limiter = build_kind(backend, spec)
    spec["shadow"] == true ? limiter.with_shadow(true) : limiter
  end

  def self.build_kind(backend, spec)
    kind = spec["kind"]
    name = spec["name"]
    n = ->(field) { num(spec[field]) }
    opts = { backend: backend }
    # A limiter option (`block_for`, `colocate`) is carried by the spec as data: build it from
    # the data; so is a kind without a named constructor here (`leased`).
    as_data = spec.key?("block_for") || spec.key?("colocate") || kind == "leased"
    return Ratekeeper::Limiter.from_spec(name, spec.reject { |k, _| k == "name" }, **opts) if as_data

    case kind
    when "concurrent" then Ratekeeper::Limiter.concurrent(name, n["limit"], lock_timeout: n["lock_timeout"], **opts)
    when "bucket" then Ratekeeper::Limiter.bucket(name, n["limit"], n["interval"], **opts)
    when "window"
      if spec.key?("windows")
        Ratekeeper::Limiter.window(name, spec["windows"].map { |w| [num(w["limit"]), num(w["interval"])] }, **opts)
      else
        Ratekeeper::Limiter.window(name, n["limit"], n["interval"], **opts)
      end
    when "sliding_window" then Ratekeeper::Limiter.sliding_window(name, spec["limits"].map { |l| l.map { |x| num(x) } }, **opts)
    when "token_bucket" then Ratekeeper::Limiter.token_bucket(name, n["rate"], n["capacity"], **opts)
    when "leaky" then Ratekeeper::Limiter.leaky(name, n["size"], n["drain"], **opts)
    when "points" then Ratekeeper::Limiter.points(name, n["capacity"], n["refill"], **opts)
    when "calendar"
      Ratekeeper::Limiter.calendar(name, n["limit"], spec["period"], tz: spec["tz"], anchor: spec["anchor"], **opts)
    when "unlimited" then Ratekeeper::Limiter.unlimited
    else raise "unknown limiter kind #{kind.inspect}"
    end
  end

  def self.key_of(step)
    key = step["key"]
    key.is_a?(Hash) ? key["repeat"].to_s * key["times"].to_i : key
  end

  def self.kind_of(error)
    case error
    when Ratekeeper::OverLimit then "over_limit"
    when Ratekeeper::Shed then "shed"
    when Ratekeeper::LeaseLost then "lease_lost"
    when Ratekeeper::InvalidArgument then "invalid_argument"
    when Ratekeeper::BackendUnavailable then "backend_unavailable"
    when Ratekeeper::TimeoutError then "timeout"
    else error.class.name
    end
  end

  def assert_error(expected, error, renames, where)
    refute_nil error, "#{where}: expected error #{expected}, got success"
    assert_equal expected["kind"], self.class.kind_of(error), "#{where}: #{error.message}"
    return unless expected["kind"] == "invalid_argument"

    want = renames.fetch(expected.fetch("parameter"), expected["parameter"])
    assert_equal want, error.parameter, "#{where}: the parameter named (#{error.message})"
  end

  def decision_h(d, with_token)
    h = { "allowed" => d.allowed, "limit" => d.limit, "remaining" => d.remaining,
          "retry_after_us" => d.retry_after_us, "reset_after_us" => d.reset_after_us }
    h["fencing_token"] = d.lease.fencing_token if with_token && d.lease
    h["shadow_refused"] = true if d.shadow_refused
    h
  end

  # A `check_all` step: `parts` (each {limiter, key, cost}), then `expect` (allowed,
  # retry_after_us and one decision per part) or `error`. Admitted concurrent parts hold leases,
  # saved (in order) under the names of `save_leases` when given.
  def check_all_step(backend, built, step, index, leases)
    parts = step.fetch("parts").map do |p|
      [built.fetch(p["limiter"]), self.class.key_of(p), p.key?("cost") ? self.class.num(p["cost"]) : 1]
    end
    where = "step #{index}: check_all"
    outcome =
      begin
        backend.check_all(parts)
      rescue Ratekeeper::Error => e
        e
      end
    if step.key?("error")
      assert_error(step["error"], outcome.is_a?(Ratekeeper::Error) ? outcome : nil, {}, where)
      return
    end
    flunk "#{where}: expected success, got #{outcome.message}" if outcome.is_a?(Ratekeeper::Error)
    expect = step.fetch("expect")
    assert_equal [expect["allowed"], expect["retry_after_us"]], [outcome.allowed, outcome.retry_after_us], where
    assert_equal expect["parts"].size, outcome.parts.size, "#{where}: one decision per part"
    saved = []
    expect["parts"].zip(outcome.parts, parts).each_with_index do |(expected, decision, (limiter, _, _)), i|
      wants_lease = outcome.allowed && limiter.kind == "concurrent"
      assert_equal wants_lease, !decision.lease.nil?, "#{where}: parts[#{i}]: lease present"
      expected = expected.dup
      expected.delete("limits") # per-limit details: the C ABI's decision has none
      assert_equal expected.sort.to_h, decision_h(decision, expected.key?("fencing_token")).sort.to_h, "#{where}: parts[#{i}]"
      saved << decision.lease if decision.lease
    end
    return unless step.key?("save_leases")

    assert_equal step["save_leases"].size, saved.size, "#{where}: leases to save"
    step["save_leases"].zip(saved).each { |name, lease| leases[name] = lease }
  end

  # Tests check behaviour, not latency: generous deadlines, so a loaded machine does not turn a
  # slow answer into a Timeout.
  REDIS_OPTIONS = { deadline: 5, connect_timeout: 5 }.freeze
  BACKENDS = %w[memory redis cluster].freeze

  # A fresh backend of `kind` on `clock` (Redis and Cluster: a key prefix of its own).
  def backend_for(kind, clock)
    case kind
    when "memory" then Ratekeeper::Backend.memory(clock: clock)
    when "redis" then Ratekeeper::Backend.redis(redis_url, prefix: unique_prefix, clock: clock, **REDIS_OPTIONS)
    when "cluster" then Ratekeeper::Backend.cluster(RedisCluster.shared.seeds, prefix: unique_prefix, clock: clock, **REDIS_OPTIONS)
    else raise "unknown backend #{kind}"
    end
  end

  def run_case(c, backend_kind)
    clock = Ratekeeper::ManualClock.new(c.fetch("start_us"))
    backend = backend_for(backend_kind, clock)
    built = {}
    build_error = nil
    c["limiters"].sort.each do |id, spec|
      built[id] = self.class.build(backend, spec)
    rescue Ratekeeper::Error => e
      # The multi-window form takes [limit, interval] pairs: no Sidekiq spelling there.
      build_error ||= [id, e, spec.key?("windows") ? {} : RUBY_NAMES.fetch(spec["kind"], {})]
    end
    if c.key?("limiter_error")
      refute_nil build_error, "expected limiter error #{c['limiter_error']}, but every limiter was built"
      assert_error(c["limiter_error"], build_error[1], build_error[2], "building #{build_error[0]}")
      return
    end
    flunk "building #{build_error[0]}: #{build_error[1].message}" if build_error

    leases = {}
    decisions = {} # saved by `save_decision`, for `settle`
    c["steps"].each_with_index do |step, index|
      op = step["op"]
      if op == "advance"
        clock.advance_us(step["us"])
        next
      end
      if op == "check_all"
        check_all_step(backend, built, step, index, leases)
        next
      end
      limiter = built.fetch(step["limiter"])
      key = self.class.key_of(step)
      num = ->(field) { self.class.num(step[field]) }
      outcome =
        begin
          case op
          when "check" then step.key?("cost") ? limiter.check(key, cost: num["cost"]) : limiter.check(key)
          when "peek" then limiter.peek(key)
          when "reset" then limiter.reset(key) && nil
          when "points_used" then limiter.points_used(num["estimate"], num["actual"], key: key)
          when "release" then limiter.release(leases.fetch(step["lease"]), key: key) && nil
          when "block" then limiter.block(num["seconds"], key: key) && nil
          when "unblock" then limiter.unblock(key: key) && nil
          when "settle" then limiter.settle(decisions.fetch(step["decision"]), num["actual"])
          else raise "step #{index}: unknown op #{op}"
          end
        rescue Ratekeeper::Error => e
          e
        end
      where = "step #{index}: #{op} on #{step['limiter']}"
      if step.key?("error")
        assert_error(step["error"], outcome.is_a?(Ratekeeper::Error) ? outcome : nil, {}, where)
        next
      end
      flunk "#{where}: expected success, got #{outcome.message}" if outcome.is_a?(Ratekeeper::Error)
      next unless step.key?("expect")

      expected = step["expect"].dup
      expected.delete("limits") # per-limit details: the C ABI's decision has none
      assert_equal expected.sort.to_h, decision_h(outcome, expected.key?("fencing_token")).sort.to_h, where
      decisions[step["save_decision"]] = outcome if step.key?("save_decision")
      if step.key?("save_lease")
        refute_nil outcome.lease, "#{where}: expected a lease to save"
        leases[step["save_lease"]] = outcome.lease
      end
    end
  end

  # Vectors of calls not every binding has yet live in subdirectories (check_all/).
  files = Dir[File.join(REPO_ROOT, "tests/vectors/*.json")].sort + Dir[File.join(REPO_ROOT, "tests/vectors/check_all/*.json")].sort
  cases = files.flat_map { |path| JSON.parse(File.read(path)).fetch("cases").map { |c| [File.basename(path, ".json"), c] } }

  define_method(:test_enough_cases_run) do
    assert_operator cases.size, :>=, MIN_CASES, "the vectors directory holds too few cases"
  end

  BACKENDS.each do |backend|
    cases.each_with_index do |(file, c), i|
      define_method("test_#{backend}_#{file}_#{i}_#{c['name'].gsub(/[^A-Za-z0-9]+/, '_')}") { run_case(c, backend) }
    end
  end
end
