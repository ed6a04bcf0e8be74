# frozen_string_literal: true

require "json"

module Ratekeeper
  # A place where limiter state lives: an in-process memory backend, a Redis server or a Redis
  # Cluster. Every process pointing at the same Redis and prefix, in any language, shares the
  # same limits.
  #
  # Thread-safe and fork-safe: the handle may be shared by every thread; after `fork` (Puma's
  # workers, Sidekiq swarm, Resque) the library notices the new pid and the child opens its own
  # connections on first use, so a backend built before forking is fine to keep.
  class Backend
    attr_reader :kind, :ptr # :nodoc:

    # The C parameter names Ruby spells differently.
    SPEC_NAMES = { "spec_json" => "spec" }.freeze

    # A new in-process memory backend holding at most `max_keys` keys (default 1,000,000);
    # `clock`: a `ManualClock` for tests.
    def self.memory(max_keys: nil, clock: nil)
      ptr =
        if clock
          Ratekeeper.invalid!("clock", "must be a Ratekeeper::ManualClock") unless clock.is_a?(ManualClock)
          Native.handle(:rk_backend_free) { |out| Native.rk_backend_new_memory_with_clock(clock.ptr, out) }
        else
          keys = Args.count(max_keys.nil? ? 1_000_000 : max_keys, "max_keys")
          Native.handle(:rk_backend_free) { |out| Native.rk_backend_new_memory_with(keys, out) }
        end
      new(ptr, :memory)
    end

    # A standalone Redis server: `redis://[user:password@]host:port[/db]` or `rediss://` (TLS).
    # `prefix` namespaces every key (default "rk"); `failure_policy` is :fail_closed (default),
    # :fail_open or :fallback (an in-process limiter with `1/fallback_divisor` of every limit
    # takes over); every call returns within `deadline` seconds (default 0.2).
    def self.redis(url, prefix: nil, failure_policy: :fail_closed, fallback_divisor: nil, deadline: nil)
      url = Args.string(url, "url", allow_nil: false)
      policy, divisor, deadline_s, prefix = redis_options(prefix, failure_policy, fallback_divisor, deadline)
      new(Native.handle(:rk_backend_free) do |out|
        Native.rk_backend_new_redis(url, prefix, policy, divisor, deadline_s, out)
      end, :redis)
    end

    # A Redis Cluster reached through any of `seeds` (`redis://host:port` URLs); the other
    # options are those of `Backend.redis`.
    def self.cluster(seeds, prefix: nil, failure_policy: :fail_closed, fallback_divisor: nil, deadline: nil)
      Ratekeeper.invalid!("seeds", "must be an Array of URLs, got #{seeds.inspect}") unless seeds.is_a?(Array)
      seeds = seeds.each_with_index.map { |s, i| Args.string(s, "seeds[#{i}]", allow_nil: false) }
      policy, divisor, deadline_s, prefix = redis_options(prefix, failure_policy, fallback_divisor, deadline)
      strings = seeds.map { |s| FFI::MemoryPointer.from_string(s) }
      array = FFI::MemoryPointer.new(:pointer, [strings.size, 1].max)
      array.write_array_of_pointer(strings) unless strings.empty?
      new(Native.handle(:rk_backend_free) do |out|
        Native.rk_backend_new_redis_cluster(strings.empty? ? nil : array, strings.size, prefix, policy, divisor, deadline_s, out)
      end, :cluster)
    end

    def self.redis_options(prefix, failure_policy, fallback_divisor, deadline) # :nodoc:
      policy = Native::FAILURE_POLICIES.fetch(failure_policy.is_a?(String) ? failure_policy.to_sym : failure_policy) do
        Ratekeeper.invalid!("failure_policy", "must be :fail_closed, :fail_open or :fallback, got #{failure_policy.inspect}")
      end
      if !fallback_divisor.nil? && policy != 2
        Ratekeeper.invalid!("fallback_divisor", "is only for failure_policy: :fallback")
      end
      divisor = fallback_divisor.nil? ? (policy == 2 ? 1 : 0) : Args.count(fallback_divisor, "fallback_divisor", Args::U32_MAX)
      deadline_s = deadline.nil? ? 0.0 : Args.seconds(deadline, "deadline")
      Ratekeeper.invalid!("deadline", "must be above 0, got #{deadline}") if !deadline.nil? && !(deadline_s.positive? && deadline_s.finite?)
      [policy, divisor, deadline_s, Args.string(prefix, "prefix")]
    end
    private_class_method :redis_options

    def initialize(ptr, kind) # :nodoc:
      @ptr = ptr
      @kind = kind
    end

    def inspect = "#<Ratekeeper::Backend #{@kind}>"

    # `count` holders at once (`count` 1 is a distributed mutex); a lease older than
    # `lock_timeout` seconds may be reclaimed by a waiter; acquire waits `wait_timeout`.
    def concurrent(name, count, lock_timeout: 30, wait_timeout: 5, **options)
      Limiter.concurrent(name, count, lock_timeout: lock_timeout, wait_timeout: wait_timeout, backend: self, **options)
    end

    # `count` per fixed window of `interval` (seconds or :second, :minute, :hour, :day).
    def bucket(name, count, interval, **options) = Limiter.bucket(name, count, interval, backend: self, **options)

    # `count` in any span of `interval` (exact sliding window).
    def window(name, count, interval = nil, **options) = Limiter.window(name, count, interval, backend: self, **options)

    # A burst of `size`, then one call per `drain / size` seconds.
    def leaky(name, size, drain, **options) = Limiter.leaky(name, size, drain, backend: self, **options)

    # A leaky bucket of `count` points refilled completely in `interval` seconds.
    def points(name, count, interval, **options) = Limiter.points(name, count, interval, backend: self, **options)

    # `rate` tokens per second up to `capacity`.
    def token_bucket(name, rate, capacity, **options) = Limiter.token_bucket(name, rate, capacity, backend: self, **options)

    # Several `[duration, limit, precision]` limits over sub-buckets, checked together.
    def sliding_window(name, limits, **options) = Limiter.sliding_window(name, limits, backend: self, **options)

    # `limit` per calendar :day, :week, :month or :year in time zone `tz`.
    def calendar(name, limit, period, **options) = Limiter.calendar(name, limit, period, backend: self, **options)

    # A token bucket whose tokens this process leases from Redis in chunks.
    def leased(name, rate, capacity, **options) = Limiter.leased(name, rate, capacity, backend: self, **options)

    # A limiter built from its spec as data (a Hash or JSON text, durations in seconds).
    def limiter(name, spec, **options) = Limiter.from_spec(name, spec, backend: self, **options)

    # Overrides the spec of limiter `name` (or of one `key` of it) in every process sharing
    # this backend, within a second, keeping its state.
    def set_limit(name, spec, key: nil)
      spec = Limiter.spec_text(spec)
      Ratekeeper.check_status!(Native.rk_backend_set_limit(@ptr, Args.name(name), spec, Args.key(key)), SPEC_NAMES)
    end

    # Removes the override of `name` (or of one `key` of it).
    def clear_limit(name, key: nil)
      Ratekeeper.check_status!(Native.rk_backend_clear_limit(@ptr, Args.name(name), Args.key(key)))
    end

    # Sends this process's pending metrics and registrations to Redis now.
    def flush
      Ratekeeper.check_status!(Native.rk_backend_flush(@ptr))
    end

    # Every limiter the backend knows: on Redis the registry (every process, every language,
    # the last 90 days), each a Hash with "name", "kind", "spec", "overrides", "users",
    # "processes", "first_seen_ms", "last_seen_ms".
    def limiters
      JSON.parse(Native.take_string { |out| Native.rk_backend_limiters_json(@ptr, out) })
    end

    # Every limiter's metrics (`[{"name", "kind", "metrics"}]`): this process's, or with
    # `fleet: true` every process's.
    def metrics(fleet: false)
      JSON.parse(Native.take_string { |out| Native.rk_backend_metrics_json(@ptr, fleet, out) })
    end

    # Every limiter's metrics in the Prometheus text format.
    def prometheus(fleet: false)
      Native.take_string { |out| Native.rk_backend_prometheus(@ptr, fleet, out) }
    end
  end
end
