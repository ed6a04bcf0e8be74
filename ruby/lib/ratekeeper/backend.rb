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
      if clock
        Ratekeeper.invalid!("clock", "must be a Ratekeeper::ManualClock") unless clock.is_a?(ManualClock)
        return new(Native.handle(:rk_backend_free) { |out| Native.rk_backend_new_memory_with_clock(clock.ptr, out) }, :memory)
      end
      config = { kind: "memory" }
      config[:max_keys] = Args.count(max_keys, "max_keys") unless max_keys.nil?
      from_config(config, :memory)
    end

    # A standalone Redis server: `redis://[user:password@]host:port[/db]` or `rediss://` (TLS).
    # `prefix` namespaces every key (default "rk"); `failure_policy` is :fail_closed (default),
    # :fail_open or :fallback (an in-process limiter with `1/fallback_divisor` of every limit
    # takes over); every call returns within `deadline` seconds (default 0.2); a connection is
    # given `connect_timeout` seconds (default 1). TLS: `tls_ca_file` or `tls_ca_data` (PEM) for
    # the server's CA, `tls_cert_file` with `tls_key_file` for mutual TLS, read and checked now.
    # `deny_cache: true` remembers refusals in this process until their retry_after (at most
    # `deny_cache_max_entries` of them, default 10,000): see Limiter#with_deny_cache.
    # `replica_acks`: how many replicas must acknowledge each call's writes (`WAIT`) before it
    # admits (default 0); too few within `deadline` fail the call as unavailable, and the failure
    # policy decides (:fail_open then admits).
    # `on_conflict: :raise` refuses to build a limiter whose spec differs from the one live
    # processes use under its name (default :warn: build it, say so once on stderr, count it).
    # `clock`: a `ManualClock` for tests; the scripts then take their time from it instead of the
    # server's, so a test on a real Redis is exact (every process sharing the keys must use it).
    def self.redis(url, clock: nil, **options)
      config = { kind: "redis", url: Args.string(url, "url", allow_nil: false) }.merge(redis_options(**options))
      from_config(config, :redis, clock: clock)
    end

    # A Redis Cluster reached through any of `seeds` (`redis://host:port` URLs); the other
    # options (`clock:` included) are those of `Backend.redis`.
    def self.cluster(seeds, clock: nil, **options)
      Ratekeeper.invalid!("seeds", "must be an Array of URLs, got #{seeds.inspect}") unless seeds.is_a?(Array)
      seeds = seeds.each_with_index.map { |s, i| Args.string(s, "seeds[#{i}]", allow_nil: false) }
      from_config({ kind: "cluster", seeds: seeds }.merge(redis_options(**options)), :cluster, clock: clock)
    end

    # A Sentinel-managed primary named `service` (the name in the sentinels' `sentinel monitor`
    # line), found through any of `sentinels` ("host:port", port 26379 when left out): every
    # connection asks the sentinels where the primary is and confirms its role first, so a
    # failover is followed and no call goes to a replica. `username`, `password`, `db` and `tls`
    # (true: TLS with the `tls_*` certificates) are the data nodes'; `sentinel_username`,
    # `sentinel_password` and `sentinel_tls` (true: TLS, trusting the same certificates) the
    # sentinels' own. The other options are those of `Backend.redis`. A
    # `redis+sentinel://[user:password@]host:port[,host:port]/service[/db]` URL given to
    # `Backend.redis` (or `REDIS_URL`) does the same.
    def self.sentinel(sentinels, service, username: nil, password: nil, db: nil, tls: nil, sentinel_username: nil,
                      sentinel_password: nil, sentinel_tls: nil, clock: nil, **options)
      Ratekeeper.invalid!("sentinels", "must be an Array of \"host:port\", got #{sentinels.inspect}") unless sentinels.is_a?(Array)
      place = {
        addresses: sentinels.each_with_index.map { |s, i| Args.string(s, "sentinels[#{i}]", allow_nil: false) },
        service: Args.string(service, "service", allow_nil: false),
        username: Args.string(username, "username"), password: Args.string(password, "password"),
        sentinel_username: Args.string(sentinel_username, "sentinel_username"),
        sentinel_password: Args.string(sentinel_password, "sentinel_password")
      }
      place[:db] = Args.count(db, "db", Args::U32_MAX) unless db.nil?
      { tls: tls, sentinel_tls: sentinel_tls }.each do |name, on|
        next if on.nil?

        Ratekeeper.invalid!(name.to_s, "must be true or false, got #{on.inspect}") unless [true, false].include?(on)
        place[name] = on
      end
      config = { kind: "sentinel", sentinel: place.compact }.merge(redis_options(**options))
      from_config(config, :sentinel, clock: clock)
    rescue InvalidArgument => e
      # The C ABI names the fields of its `sentinel` object; Ruby's are the arguments.
      raise e unless e.parameter.to_s.start_with?("sentinel.")

      parameter = e.parameter.sub("sentinel.addresses", "sentinels").sub("sentinel.", "")
      raise InvalidArgument.new(e.message.sub(e.parameter, parameter), parameter: parameter)
    end

    def self.redis_options(prefix: nil, failure_policy: nil, fallback_divisor: nil, deadline: nil, connect_timeout: nil,
                           tls_ca_file: nil, tls_ca_data: nil, tls_cert_file: nil, tls_key_file: nil,
                           deny_cache: nil, deny_cache_max_entries: nil, replica_acks: nil,
                           on_conflict: nil) # :nodoc:
      options = { prefix: Args.string(prefix, "prefix") }
      unless failure_policy.nil?
        policy = failure_policy.to_s
        unless Native::FAILURE_POLICIES.key?(policy.to_sym) && [String, Symbol].include?(failure_policy.class)
          Ratekeeper.invalid!("failure_policy", "must be :fail_closed, :fail_open or :fallback, got #{failure_policy.inspect}")
        end
        options[:failure_policy] = policy
      end
      options[:fallback_divisor] = Args.count(fallback_divisor, "fallback_divisor", Args::U32_MAX) unless fallback_divisor.nil?
      { deadline: deadline, connect_timeout: connect_timeout }.each do |name, value|
        next if value.nil?

        seconds = Args.seconds(value, name.to_s)
        Ratekeeper.invalid!(name.to_s, "must be a finite number of seconds, got #{value}") unless seconds.finite?
        options[name] = seconds
      end
      { tls_ca_file: tls_ca_file, tls_cert_file: tls_cert_file, tls_key_file: tls_key_file }.each do |name, path|
        options[name] = Args.string(path.respond_to?(:to_path) ? path.to_path : path, name.to_s)
      end
      options[:tls_ca_data] = Args.string(tls_ca_data, "tls_ca_data")
      unless deny_cache.nil? || [true, false].include?(deny_cache)
        Ratekeeper.invalid!("deny_cache", "must be true or false, got #{deny_cache.inspect}")
      end
      options[:deny_cache] = deny_cache
      unless deny_cache_max_entries.nil?
        options[:deny_cache_max_entries] = Args.count(deny_cache_max_entries, "deny_cache_max_entries")
      end
      options[:replica_acks] = Args.count(replica_acks, "replica_acks", Args::U32_MAX) unless replica_acks.nil?
      options[:on_conflict] = on_conflict.to_s unless on_conflict.nil? # checked by the library
      options.compact
    end
    private_class_method :redis_options

    # Builds a backend through `rk_backend_new_from_json` (`_with_clock` given a clock), naming
    # Ruby to the registry.
    def self.from_config(config, kind, clock: nil) # :nodoc:
      Ratekeeper.invalid!("clock", "must be a Ratekeeper::ManualClock") unless clock.nil? || clock.is_a?(ManualClock)
      config.each do |field, value|
        Array(value).each do |v|
          Ratekeeper.invalid!(field.to_s, "is not valid UTF-8") if v.is_a?(String) && !v.valid_encoding?
        end
      end
      json = JSON.generate(config.merge(client: "ruby #{RUBY_VERSION}"))
      new(Native.handle(:rk_backend_free) do |out|
        clock ? Native.rk_backend_new_from_json_with_clock(json, clock.ptr, out) : Native.rk_backend_new_from_json(json, out)
      end, kind)
    end
    private_class_method :from_config

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

    # Several limits at once, all or nothing: decides every part `[limiter, key, cost]` (cost
    # defaults to 1) in one atomic step at one instant; all are admitted and consume, or none
    # consumes anything. Never waits. On a Redis Cluster the parts' keys must share one slot
    # (limiters whose spec says "colocate" => "tenant", keys of one tenant). A bad part raises
    # InvalidArgument naming it ("parts[1].cost") before anything is written.
    def check_all(parts) = run_all(parts, nil)

    # Like `check_all`, waiting up to `wait_timeout` seconds (default: the shortest of the
    # parts' limiters' default wait timeouts) for a step that admits every part; raises
    # OverLimit with the combination's `retry_after` when waiting cannot succeed in time.
    def acquire_all(parts, wait_timeout: nil)
      run_all(parts, wait_timeout.nil? ? Native::WAIT_DEFAULT : Args.seconds(wait_timeout, "wait_timeout"))
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

    private

    # The C array of parts, then the call. The keys' C strings are held in `strings` until the
    # call has returned: the struct that points at one does not keep it alive, and the call
    # runs without the GVL, so a collection during it would free them.
    def run_all(parts, wait)
      Ratekeeper.invalid!("parts", "must be an Array of [limiter, key, cost]") unless parts.is_a?(Array)
      limiters = []
      keys = []
      native = FFI::MemoryPointer.new(Native::CheckAllPart, [parts.size, 1].max)
      strings = parts.each_with_index.map do |part, i|
        unless part.is_a?(Array) && (2..3).cover?(part.size) && part[0].is_a?(Limiter)
          Ratekeeper.invalid!("parts[#{i}]", "must be [limiter, key, cost] with a Ratekeeper::Limiter")
        end
        key = Args.string(part[1], "parts[#{i}].key")
        cost = Args.count(part.fetch(2, 1), "parts[#{i}].cost")
        limiters << part[0]
        keys << key
        entry = Native::CheckAllPart.new(native + (i * Native::CheckAllPart.size))
        string = key.nil? ? nil : FFI::MemoryPointer.from_string(key)
        entry[:limiter] = part[0].ptr
        entry[:key] = string
        entry[:cost] = cost
        string
      end
      decisions = FFI::MemoryPointer.new(Native::Decision, [parts.size, 1].max)
      allowed = FFI::MemoryPointer.new(:bool)
      retry_us = FFI::MemoryPointer.new(:uint64)
      status = if wait.nil?
                 Native.rk_backend_check_all(@ptr, native, parts.size, decisions, allowed, retry_us)
               else
                 Native.rk_backend_acquire_all(@ptr, native, parts.size, wait, decisions, allowed, retry_us)
               end
      # Referenced after the call, so that the strings are alive until it returned.
      strings.clear
      if status == Native::OVER_LIMIT
        retry_after = retry_us.read(:uint64) / 1_000_000.0
        raise OverLimit.new("the combination is over its limits; retry in #{retry_after.round(3)} s",
                            retry_after: retry_after)
      end
      Ratekeeper.check_status!(status)
      # Each part's decision keeps its key, so that `limiter.settle(part, actual)` settles it.
      results = Array.new(parts.size) do |i|
        Decision.from_native(Native::Decision.new(decisions + (i * Native::Decision.size)), keys[i])
      end
      CombinedDecision.new(allowed: allowed.read(:bool), retry_after_us: retry_us.read(:uint64), parts: results,
                           limiters: limiters, keys: keys)
    end
  end
end
