# frozen_string_literal: true

require "json"

module Ratekeeper
  # A rate limiter bound to a backend, with Sidekiq Enterprise's API:
  #
  #   ERP_LIMIT = Ratekeeper::Limiter.concurrent("erp", 50, wait_timeout: 5, lock_timeout: 30)
  #   ERP_LIMIT.within_limit { call_erp }
  #
  # Build limiters once and share them: a limiter is thread-safe (the C handle is; its Ruby
  # state is frozen after construction) and fork-safe (see `Backend`). Limiters with the same
  # kind and name on the same Redis share state, from any process and any language.
  class Limiter
    OverLimit = Ratekeeper::OverLimit

    # Options every constructor takes, with Sidekiq's defaults.
    #   wait_timeout: seconds `within_limit` waits for the limit (5; 0 never waits)
    #   policy:       :raise (OverLimit when over the limit) or :ignore (skip the block)
    #   reschedule:   how many times the Sidekiq middleware reschedules a job it refused (20)
    #   ttl:          Sidekiq's metadata lifetime in seconds; accepted for compatibility
    #                 (ratekeeper's keys expire when idle and the registry keeps 90 days)
    #   backend:      a `Ratekeeper::Backend` (default: `Limiter.configure`'s)
    #   allow_fallback: whether the backend's fail_open / fallback policy applies (concurrent
    #                 limiters fail closed unless true)
    DEFAULTS = { wait_timeout: 5, policy: :raise, reschedule: 20, ttl: nil, backend: nil, allow_fallback: nil }.freeze
    # The C parameter names the Sidekiq-style constructors spell differently.
    SIDEKIQ_NAMES = { "limit" => "count" }.freeze
    POINTS_NAMES = { "capacity" => "count", "refill" => "interval" }.freeze

    class << self
      # The configuration (`configure`'s block argument).
      def config = @config ||= Configuration.new

      # Sets the Redis connection, backoff and rescheduling errors (see `Configuration`).
      def configure
        yield config
        config
      end

      # The backend limiters use when built without `backend:`.
      def backend = config.backend

      # At most `count` holders at once; a lease older than `lock_timeout` seconds may be
      # reclaimed by a waiter.
      def concurrent(name, count, lock_timeout: 30, **options)
        build(name, options, SIDEKIQ_NAMES) do |b, n, out, wait|
          lock = Args.seconds(lock_timeout, "lock_timeout")
          Native.rk_limiter_new_concurrent(b, n, Args.count(count, "count"), lock, wait, out)
        end
      end

      # `count` per fixed window of `interval` (:second, :minute, :hour, :day or seconds),
      # windows aligned to the epoch; or a rate string in place of both
      # (`bucket("api", "100/minute")`).
      def bucket(name, count, interval = nil, **options)
        return from_rate(name, count, interval, :rk_limiter_new_bucket, options) if count.is_a?(String)

        build(name, options, SIDEKIQ_NAMES) do |b, n, out|
          Native.rk_limiter_new_bucket(b, n, Args.count(count, "count"), Args.seconds(interval, "interval"), out)
        end
      end

      # Never more than `count` in any span of `interval` (exact sliding window). `count` may
      # instead be several `[count, interval]` pairs checked together
      # (`window("api", [[25, 5], [300, 60]])`), or a rate string: `window("login", "5/minute")`,
      # `window("api", "25/5s; 300/minute")`.
      def window(name, count, interval = nil, **options)
        return from_rate(name, count, interval, :rk_limiter_new_windows, options) if count.is_a?(String)
        # No interval: the multi-window form (whose argument is checked as `windows`).
        return windows(name, count, **options) if count.is_a?(Array) || (interval.nil? && !count.is_a?(Integer))

        build(name, options, SIDEKIQ_NAMES) do |b, n, out|
          Native.rk_limiter_new_window(b, n, Args.count(count, "count"), Args.seconds(interval, "interval"), out)
        end
      end

      # A burst of `size`, then one call per `drain / size` seconds (`drain` may be :minute...).
      def leaky(name, size, drain, **options)
        build(name, options) do |b, n, out|
          Native.rk_limiter_new_leaky(b, n, Args.count(size, "size"), Args.seconds(drain, "drain"), out)
        end
      end

      # A leaky bucket of `count` points refilled completely in `interval` seconds; call
      # `within_limit(estimate:) { |handle| handle.points_used(actual) }`.
      def points(name, count, interval, **options)
        build(name, options, POINTS_NAMES) do |b, n, out|
          Native.rk_limiter_new_points(b, n, Args.count(count, "count"), Args.seconds(interval, "interval"), out)
        end
      end

      # `rate` tokens per second up to `capacity`; a call takes `cost` tokens.
      def token_bucket(name, rate, capacity, **options)
        build(name, options) do |b, n, out|
          Ratekeeper.invalid!("rate", "must be a number, got #{rate.inspect}") unless rate.is_a?(Numeric)
          Native.rk_limiter_new_token_bucket(b, n, rate.to_f, Args.count(capacity, "capacity"), out)
        end
      end

      # Several `[duration, limit, precision]` limits (precision optional: sub-bucket seconds)
      # checked atomically; only admitted calls count.
      def sliding_window(name, limits, **options)
        Ratekeeper.invalid!("limits", "must be an Array of [duration, limit, precision]") unless limits.is_a?(Array)
        array = FFI::MemoryPointer.new(Native::SlidingLimit, [limits.size, 1].max)
        limits.each_with_index do |limit, i|
          unless limit.is_a?(Array) && limit.size.between?(2, 3)
            Ratekeeper.invalid!("limits", "element #{i} must be [duration, limit] or [duration, limit, precision], got #{limit.inspect}")
          end
          s = Native::SlidingLimit.new(array + i * Native::SlidingLimit.size)
          s[:duration_secs] = Args.seconds(limit[0], "duration")
          s[:limit] = Args.count(limit[1], "limit")
          # C's 0 means "no sub-buckets", which Ruby says by leaving precision out.
          Ratekeeper.invalid!("precision", "must be above 0 (leave it out for none)") if limit[2] == 0
          s[:precision_secs] = limit[2].nil? ? 0.0 : Args.seconds(limit[2], "precision")
        end
        build(name, options) { |b, n, out| Native.rk_limiter_new_sliding_window(b, n, array, limits.size, out) }
      end

      # `limit` per calendar :day, :week (ISO, from Monday), :month or :year in IANA time zone
      # `tz` (default UTC); months start on day `anchor` (1-31).
      def calendar(name, limit, period, tz: nil, anchor: nil, **options)
        build(name, options) do |b, n, out|
          anchor_n = anchor.nil? ? 0 : Args.count(anchor, "anchor", Args::U32_MAX)
          Ratekeeper.invalid!("anchor", "must be 1 to 31, got 0") if anchor == 0
          Native.rk_limiter_new_calendar(b, n, Args.count(limit, "limit"), Args.string(period, "period", allow_nil: false),
                                         Args.string(tz, "tz"), anchor_n, out)
        end
      end

      # A token bucket (`rate` per second up to `capacity`) whose tokens this process leases
      # from Redis `chunk` at a time (default capacity / 16) for `lease_ttl` seconds.
      def leased(name, rate, capacity, chunk: nil, lease_ttl: nil, **options)
        build(name, options) do |b, n, out|
          Ratekeeper.invalid!("rate", "must be a number, got #{rate.inspect}") unless rate.is_a?(Numeric)
          Native.rk_limiter_new_leased(b, n, rate.to_f, Args.count(capacity, "capacity"),
                                       chunk.nil? ? 0 : Args.count(chunk, "chunk"),
                                       lease_ttl.nil? ? 0.0 : Args.seconds(lease_ttl, "lease_ttl"), out)
        end
      end

      # A limiter from its spec as data: a Hash or JSON text, durations in seconds, the same in
      # every language (`{ kind: "token_bucket", rate: 10, capacity: 20 }`).
      def from_spec(name, spec, **options)
        json = spec_text(spec)
        options = { wait_timeout: nil }.merge(options) # the spec's own wait_timeout, if any
        build(name, options) { |b, n, out| Native.rk_limiter_new_from_json(b, n, json, out) }
      end

      # A limiter that always allows and touches no backend (admins, tests).
      def unlimited(**options)
        options = DEFAULTS.merge(options)
        ptr = Native.handle(:rk_limiter_free) { |out| Native.rk_limiter_new_unlimited(out) }
        new(ptr, "unlimited", options)
      end

      # A spec as JSON text (a Hash is generated, a String passed as it is).
      def spec_text(spec)
        case spec
        when String then Args.string(spec, "spec", allow_nil: false)
        when Hash then JSON.generate(spec)
        else Ratekeeper.invalid!("spec", "must be a Hash or JSON text, got #{spec.inspect}")
        end
      end

      private

      def windows(name, pairs, **options)
        Ratekeeper.invalid!("windows", "must be an Array of [count, interval], got #{pairs.inspect}") unless pairs.is_a?(Array)
        array = FFI::MemoryPointer.new(Native::WindowLimit, [pairs.size, 1].max)
        pairs.each_with_index do |pair, i|
          Ratekeeper.invalid!("windows", "element #{i} must be [count, interval], got #{pair.inspect}") unless pair.is_a?(Array) && pair.size == 2
          w = Native::WindowLimit.new(array + i * Native::WindowLimit.size)
          w[:limit] = Args.count(pair[0], "limit")
          w[:interval_secs] = Args.seconds(pair[1], "interval")
        end
        build(name, options) { |b, n, out| Native.rk_limiter_new_windows(b, n, array, pairs.size, out) }
      end

      # A bucket or window from a rate string, which carries its own interval.
      def from_rate(name, text, interval, constructor, options)
        Ratekeeper.invalid!("count", "must be a whole number, got #{text.inspect} (a rate string such as '5/minute' takes no interval)") unless interval.nil?
        array, len = Args.rates(text, "rate")
        if constructor == :rk_limiter_new_windows
          return build(name, options) { |b, n, out| Native.rk_limiter_new_windows(b, n, array, len, out) }
        end

        Ratekeeper.invalid!("rate", "must be one rate such as '5/minute' for a bucket, got #{text.inspect}") unless len == 1
        w = Native::WindowLimit.new(array)
        build(name, options) { |b, n, out| Native.rk_limiter_new_bucket(b, n, w[:limit], w[:interval_secs], out) }
      end

      # Checks the shared options, then builds the C limiter with the block.
      def build(name, options, rename = nil)
        unknown = options.keys - DEFAULTS.keys
        raise ArgumentError, "unknown option#{'s' if unknown.size > 1}: #{unknown.join(', ')}" unless unknown.empty?

        options = DEFAULTS.merge(options)
        name = Args.name(name)
        wait = options[:wait_timeout].nil? ? Native::WAIT_DEFAULT : Args.seconds(options[:wait_timeout], "wait_timeout")
        if !options[:wait_timeout].nil? && !(wait >= 0 && wait.finite?)
          Ratekeeper.invalid!("wait_timeout", "must be a finite number of seconds, not negative, got #{options[:wait_timeout]}")
        end
        unless %i[raise ignore].include?(options[:policy])
          Ratekeeper.invalid!("policy", "must be :raise or :ignore, got #{options[:policy].inspect}")
        end
        Args.count(options[:reschedule], "reschedule", Args::U32_MAX)
        Ratekeeper.invalid!("ttl", "must be a positive number of seconds") unless options[:ttl].nil? || (options[:ttl].is_a?(Numeric) && options[:ttl].positive?)
        unless [nil, true, false].include?(options[:allow_fallback])
          Ratekeeper.invalid!("allow_fallback", "must be true or false, got #{options[:allow_fallback].inspect}")
        end
        backend = options[:backend] || Limiter.backend
        Ratekeeper.invalid!("backend", "must be a Ratekeeper::Backend") unless backend.is_a?(Backend)
        ptr = Native.handle(:rk_limiter_free, rename) { |out| yield backend.ptr, name, out, wait }
        unless options[:allow_fallback].nil?
          ptr = Native.handle(:rk_limiter_free) { |out| Native.rk_limiter_with_allow_fallback(ptr, options[:allow_fallback], out) }
        end
        new(ptr, name, options.merge(backend: backend, wait_timeout: options[:wait_timeout] && wait))
      end
    end

    # What `within_limit` yields: the decision, and for points limiters `points_used`.
    class Handle
      attr_reader :decision

      def initialize(limiter, key, cost, decision) # :nodoc:
        @limiter = limiter
        @key = key
        @cost = cost
        @decision = decision
      end

      # Corrects the charge from the estimate to what the call really cost (points, token
      # bucket and leaky limiters): the difference is charged or refunded.
      def points_used(actual)
        @decision = @limiter.points_used(@cost, actual, key: @key)
        @cost = actual
        @decision
      end

      # Renews a concurrent lease for another `lock_timeout`, so a long block keeps its slot.
      def extend_lease = @limiter.extend_lease(@decision.lease, key: @key)

      # The concurrent lease held for the block (nil for other limiters).
      def lease = @decision.lease
    end

    attr_reader :name, :policy, :reschedule, :ttl, :wait_timeout, :backend

    def initialize(ptr, name, options) # :nodoc:
      @ptr = ptr
      @name = name
      @policy = options[:policy]
      @reschedule = options[:reschedule]
      @ttl = options[:ttl]
      @wait_timeout = options[:wait_timeout]
      @backend = options[:backend]
      freeze
    end

    def inspect = "#<Ratekeeper::Limiter #{@name} #{spec_json}>"

    def ptr = @ptr # :nodoc:

    # The limiter's spec as canonical JSON text (the same in every language).
    def spec_json = Native.text { |buf, len, out_n| Native.rk_limiter_spec_json(@ptr, buf, len, out_n) }

    # The limiter's spec as a Hash ("kind" and its fields).
    def spec = JSON.parse(spec_json)

    # "concurrent", "bucket", "window", ...
    def kind = spec["kind"]

    # The most one call may cost (the burst, the smallest limit, the slot count; 2^53 for an
    # unlimited limiter): a larger cost is refused on every call.
    def capacity = read_native(:uint64) { |out| Native.rk_limiter_capacity(@ptr, out) }

    # Whether a charge can be given back (`points_used(cost, 0)`): token bucket, leaky, points.
    def refundable? = read_native(:bool) { |out| Native.rk_limiter_refundable(@ptr, out) }

    # The span the quota covers in seconds, where the kind has one window (the HTTP fields' `w`);
    # nil otherwise.
    def window
      us = read_native(:uint64) { |out| Native.rk_limiter_window(@ptr, out) }
      us.zero? ? nil : us / 1_000_000.0
    end

    # Consumes `cost` for `key` if the limit allows, never waiting. A refused call consumes
    # nothing: test `decision.allowed?`. On a concurrent limiter, release the decision's lease.
    def check(key = nil, cost: 1)
      decision = Native::Decision.new
      Ratekeeper.check_status!(Native.rk_limiter_check(@ptr, Args.key(key), Args.count(cost, "cost"), decision))
      Decision.from_native(decision, key)
    end

    # What a call of cost 1 would get, consuming nothing.
    def peek(key = nil)
      decision = Native::Decision.new
      Ratekeeper.check_status!(Native.rk_limiter_peek(@ptr, Args.key(key), decision))
      Decision.from_native(decision)
    end

    # Consumes `cost`, waiting up to `wait_timeout` seconds (default: the limiter's) for the
    # limit to allow it; raises OverLimit (with `retry_after`) when it does not.
    def acquire(key = nil, cost: 1, wait_timeout: nil)
      decision = Native::Decision.new
      wait = wait_seconds(wait_timeout)
      status = Native.rk_limiter_acquire(@ptr, Args.key(key), Args.count(cost, "cost"), wait, decision)
      if status == Native::OVER_LIMIT
        retry_after = decision[:retry_after_us] / 1_000_000.0
        raise OverLimit.new("#{@name} is over its limit; retry in #{retry_after.round(3)} s",
                            retry_after: retry_after, limiter: self)
      end
      Ratekeeper.check_status!(status)
      Decision.from_native(decision, key)
    end

    # Gives back a concurrent limiter's lease (raises LeaseLost if it was reclaimed).
    def release(lease, key: nil)
      Ratekeeper.invalid!("lease", "must be a Ratekeeper::Lease") unless lease.is_a?(Lease)
      Ratekeeper.check_status!(Native.rk_limiter_release(@ptr, Args.key(key), lease.to_native))
    end

    # Renews a concurrent lease for another `lock_timeout` from now.
    def extend_lease(lease, key: nil)
      Ratekeeper.invalid!("lease", "must be a Ratekeeper::Lease") unless lease.is_a?(Lease)
      Ratekeeper.check_status!(Native.rk_limiter_extend(@ptr, Args.key(key), lease.to_native))
    end

    # Forgets the state of `key`: the next call starts from a full limit.
    def reset(key = nil)
      Ratekeeper.check_status!(Native.rk_limiter_reset(@ptr, Args.key(key)))
    end

    # Corrects an admitted call's charge from `estimate` to `actual`.
    def points_used(estimate, actual, key: nil)
      decision = Native::Decision.new
      Ratekeeper.check_status!(Native.rk_limiter_points_used(@ptr, Args.key(key), Args.count(estimate, "estimate"),
                                                             Args.count(actual, "actual"), decision))
      Decision.from_native(decision)
    end

    # Settles `decision` (an admitted call of this limiter, checked with an estimated cost) to
    # its `actual` cost: the difference is charged or refunded exactly once, however often the
    # same decision is settled (a retry after a timeout is safe). Returns the state after it.
    # A decision that cannot be settled raises InvalidArgument naming `decision`. A decision
    # rebuilt from data stored outside the process (a job's arguments) passes the `seal:` that
    # #seal gave for it: it is settled only if no field of its ticket was changed.
    def settle(decision, actual, seal: nil)
      Ratekeeper.invalid!("decision", "must be a Ratekeeper::Decision") unless decision.is_a?(Decision)
      out = Native::Decision.new
      key = decision.settle&.key
      actual = Args.count(actual, "actual")
      status = if seal.nil?
                 if decision.settle && !decision.settle.issued?
                   Ratekeeper.invalid!("decision", "its settle ticket was not issued in this process and comes without " \
                                                   "its seal: pass seal: (Limiter#seal) with a decision rebuilt from data")
                 end
                 Native.rk_limiter_settle(@ptr, Args.key(key), decision.to_native, actual, out)
               else
                 Ratekeeper.invalid!("seal", "must be a String, got #{seal.class}") unless seal.is_a?(String)
                 Native.rk_limiter_settle_sealed(@ptr, Args.key(key), decision.to_native, actual, seal, out)
               end
      Ratekeeper.check_status!(status)
      Decision.from_native(out, key)
    end

    # The seal of `decision`'s settle ticket (64 hex digits): store it with a decision that
    # leaves the process and pass it to #settle as `seal:` (any process on the same Redis and
    # key prefix settles it; a ticket changed on the way is refused).
    def seal(decision)
      Ratekeeper.invalid!("decision", "must be a Ratekeeper::Decision") unless decision.is_a?(Decision)
      out = Native::SettleSeal.new
      Ratekeeper.check_status!(Native.rk_limiter_seal_ticket(@ptr, Args.key(decision.settle&.key), decision.to_native,
                                                             out))
      out[:hex].to_s
    end

    # Refuses every call of `key` in every process for `duration` seconds (a third party said
    # to stop); returns the pause in effect, in seconds.
    def pause(duration, key: nil)
      Ratekeeper.invalid!("duration", "must be a number of seconds, got #{duration.inspect}") unless duration.is_a?(Numeric)
      out = FFI::MemoryPointer.new(:uint64)
      Ratekeeper.check_status!(Native.rk_limiter_pause(@ptr, Args.key(key), duration.to_f, out))
      out.read(:uint64) / 1_000_000.0
    end

    # Ends a pause of `key` early, in every process; true when one was in effect. The key's other
    # state is kept.
    def resume(key: nil)
      out = FFI::MemoryPointer.new(:bool)
      Ratekeeper.check_status!(Native.rk_limiter_resume(@ptr, Args.key(key), out))
      out.read(:bool)
    end

    # Refuses every call of `key` in every process for `duration` seconds from now (replacing a
    # block in effect); returns the block in effect, in seconds. A block is not a pause: `resume`
    # leaves it alone, `unblock` ends it, `reset` forgets it.
    def block(duration, key: nil)
      Ratekeeper.invalid!("duration", "must be a number of seconds, got #{duration.inspect}") unless duration.is_a?(Numeric)
      out = FFI::MemoryPointer.new(:uint64)
      Ratekeeper.check_status!(Native.rk_limiter_block(@ptr, Args.key(key), duration.to_f, out))
      out.read(:uint64) / 1_000_000.0
    end

    # Ends a block of `key` early, in every process; true when one was in effect. The key's other
    # state, and a pause, are kept.
    def unblock(key: nil)
      out = FFI::MemoryPointer.new(:bool)
      Ratekeeper.check_status!(Native.rk_limiter_unblock(@ptr, Args.key(key), out))
      out.read(:bool)
    end

    # A copy of this limiter (same state) whose refusals block the key for `seconds`: after a
    # refused check, every call of that key in every process is refused until the block ends
    # (`"block_for"` in a spec says the same).
    def with_block_for(seconds)
      Ratekeeper.invalid!("block_for", "must be a number of seconds, got #{seconds.inspect}") unless seconds.is_a?(Numeric)
      ptr = Native.handle(:rk_limiter_free) { |out| Native.rk_limiter_with_block_for(@ptr, seconds.to_f, out) }
      self.class.new(ptr, @name, { policy: @policy, reschedule: @reschedule, ttl: @ttl, wait_timeout: @wait_timeout, backend: @backend })
    end

    # A copy of this limiter (same state and metrics) in shadow mode (`true`) or enforcing
    # (`false`): a call the limit would refuse is admitted with `shadow_refused` set, consuming
    # nothing; `acquire` never waits. A live override's `shadow` decides instead.
    def with_shadow(shadow)
      Ratekeeper.invalid!("shadow", "must be true or false, got #{shadow.inspect}") unless [true, false].include?(shadow)
      ptr = Native.handle(:rk_limiter_free) { |out| Native.rk_limiter_with_shadow(@ptr, shadow, out) }
      self.class.new(ptr, @name, { policy: @policy, reschedule: @reschedule, ttl: @ttl, wait_timeout: @wait_timeout, backend: @backend })
    end

    # A copy of this limiter (same state) with the deny cache on or off: on, a refusal is
    # remembered in this process and later checks of the same key (at least as costly) are
    # refused from memory until its retry_after, with no round trip to Redis.
    def with_deny_cache(on)
      Ratekeeper.invalid!("deny_cache", "must be true or false, got #{on.inspect}") unless [true, false].include?(on)
      ptr = Native.handle(:rk_limiter_free) { |out| Native.rk_limiter_with_deny_cache(@ptr, on, out) }
      self.class.new(ptr, @name, { policy: @policy, reschedule: @reschedule, ttl: @ttl, wait_timeout: @wait_timeout, backend: @backend })
    end

    # A copy of this limiter (same state) whose pauses, from `pause` or `observe`, last at most
    # `seconds` (default one hour): a longer one asked for is shortened and counted in the
    # metrics' `pauses_clamped`.
    def with_max_pause(seconds)
      Ratekeeper.invalid!("max_pause", "must be a number of seconds, got #{seconds.inspect}") unless seconds.is_a?(Numeric)
      ptr = Native.handle(:rk_limiter_free) { |out| Native.rk_limiter_with_max_pause(@ptr, seconds.to_f, out) }
      self.class.new(ptr, @name, { policy: @policy, reschedule: @reschedule, ttl: @ttl, wait_timeout: @wait_timeout, backend: @backend })
    end

    # Reads an upstream response (`status`, `headers` as a Hash or pairs) and pauses `key` as
    # long as a 429 or 503 asks (Retry-After, RateLimit-Reset, X-RateLimit-Reset); returns the
    # pause in seconds (0.0 when none was asked).
    def observe(status, headers = {}, key: nil)
      Ratekeeper.invalid!("status", "must be a whole number, got #{status.inspect}") unless status.is_a?(Integer)
      Ratekeeper.invalid!("status", "must be 100 to 999, got #{status}") unless status.between?(100, 999)
      Ratekeeper.invalid!("headers", "must be a Hash or pairs, got #{headers.inspect}") unless headers.respond_to?(:each)
      pairs = headers.map { |k, v| [Args.string(k.to_s, "headers"), Args.string(Array(v).join(", "), "headers")] }
      names = pairs.map { |k, _| FFI::MemoryPointer.from_string(k) }
      values = pairs.map { |_, v| FFI::MemoryPointer.from_string(v) }
      name_array = FFI::MemoryPointer.new(:pointer, [pairs.size, 1].max).write_array_of_pointer(names)
      value_array = FFI::MemoryPointer.new(:pointer, [pairs.size, 1].max).write_array_of_pointer(values)
      out = FFI::MemoryPointer.new(:uint64)
      Ratekeeper.check_status!(Native.rk_limiter_observe(@ptr, Args.key(key), status, pairs.empty? ? nil : name_array,
                                                         pairs.empty? ? nil : value_array, pairs.size, out))
      out.read(:uint64) / 1_000_000.0
    end

    # Gives back what this process holds (a leased limiter's unspent tokens).
    def close
      Ratekeeper.check_status!(Native.rk_limiter_close(@ptr))
    end

    # Sidekiq's `within_limit`: waits up to `wait_timeout` for the limit, runs the block with a
    # `Handle`, and gives a concurrent lease back when the block ends (however it ends). Over
    # the limit, raises OverLimit (`policy: :raise`) or skips the block and returns nil
    # (`policy: :ignore`). `estimate:` is a points limiter's cost (correct it in the block with
    # `handle.points_used(actual)`); `key:` limits one identity of this limiter.
    def within_limit(key: nil, cost: nil, estimate: nil, wait_timeout: nil, policy: nil)
      raise ArgumentError, "within_limit needs a block" unless block_given?

      cost = estimate || cost || 1
      policy ||= @policy
      Ratekeeper.invalid!("policy", "must be :raise or :ignore, got #{policy.inspect}") unless %i[raise ignore].include?(policy)
      decision =
        begin
          acquire(key, cost: cost, wait_timeout: wait_timeout)
        rescue OverLimit
          return nil if policy == :ignore

          raise
        end
      return yield(Handle.new(self, key, cost, decision)) unless decision.lease

      begin
        result = yield(Handle.new(self, key, cost, decision))
      rescue Exception # rubocop:disable Lint/RescueException -- release, then re-raise as is
        begin
          release(decision.lease, key: key)
        rescue Error
          nil # the block's error is the one to see
        end
        raise
      end
      release(decision.lease, key: key)
      result
    end

    private

    def wait_seconds(wait_timeout)
      wait_timeout = @wait_timeout if wait_timeout.nil?
      return Native::WAIT_DEFAULT if wait_timeout.nil?

      Args.seconds(wait_timeout, "wait_timeout")
    end

    # The value a call writes through one out-param of `type`.
    def read_native(type)
      out = FFI::MemoryPointer.new(type)
      Ratekeeper.check_status!(yield(out))
      type == :bool ? out.read(:uchar) != 0 : out.read(type)
    end
  end
end
