# frozen_string_literal: true

module Ratekeeper
  # A slot held in a concurrent limiter, given back by `Limiter#release`. A plain value: it may
  # be stored or sent to another process (`to_h`, `Lease.from_h`).
  Lease = Struct.new(:id, :fencing_token, :granted_at_us, keyword_init: true) do
    # The C struct for this lease.
    def to_native
      native = Native::Lease.new
      native[:id_hi] = id >> 64
      native[:id_lo] = id & ((1 << 64) - 1)
      native[:fencing_token] = fencing_token
      native[:granted_at_us] = granted_at_us
      native
    end

    # A lease read from the C struct.
    def self.from_native(native)
      new(id: (native[:id_hi] << 64) | native[:id_lo], fencing_token: native[:fencing_token],
          granted_at_us: native[:granted_at_us])
    end
  end

  # The result of a check, peek or acquire: one shape for every limiter. Durations are exact
  # microseconds (`*_us`) with float-second readers (`retry_after`, `reset_after`); a refused
  # call consumed nothing.
  #
  # `shadow_refused` is true only in shadow mode, on a call the limit would have refused and
  # admitted instead (nothing consumed, no lease; `remaining` and `retry_after_us` say what
  # enforcement would have said).
  Decision = Struct.new(:allowed, :limit, :remaining, :retry_after_us, :reset_after_us,
                        :decided_at_us, :lease, :settle, :shadow_refused, keyword_init: true) do
    alias_method :allowed?, :allowed
    alias_method :shadow_refused?, :shadow_refused

    # Seconds until the same call could succeed (0.0 when allowed).
    def retry_after = retry_after_us / 1_000_000.0

    # Seconds until the limiter is back to full for this key.
    def reset_after = reset_after_us / 1_000_000.0

    # A decision read from the C struct; `key` is the call's (its settle ticket keeps it).
    def self.from_native(d, key = nil)
      t = d[:settle]
      settle = if t[:settleable]
                 SettleTicket.new(id: t[:id], cost: t[:cost], charged_at_us: t[:charged_at_us],
                                  limiter: t[:limiter], key: key).tap(&:issued!)
               end
      new(allowed: d[:allowed], limit: d[:limit], remaining: d[:remaining],
          retry_after_us: d[:retry_after_us], reset_after_us: d[:reset_after_us],
          decided_at_us: d[:decided_at_us], lease: d[:has_lease] ? Lease.from_native(d[:lease]) : nil,
          settle: settle, shadow_refused: d[:shadow_refused])
    end

    # The C struct for this decision (what `rk_limiter_settle` reads).
    def to_native
      native = Native::Decision.new
      native[:allowed] = allowed
      %i[limit remaining retry_after_us reset_after_us decided_at_us].each { |f| native[f] = self[f] }
      if settle
        t = native[:settle]
        t[:settleable] = true
        %i[id cost charged_at_us limiter].each { |f| t[f] = settle[f] }
      end
      native
    end
  end

  # What `Limiter#settle` needs to settle an admitted call of a counting limiter with its actual
  # cost, exactly once: the settle id, the cost charged, when, the limiter, and the call's key.
  #
  # A ticket this process issued is settled as it is; one rebuilt from data (a job's arguments)
  # only with the seal `Limiter#seal` gave for it (`settle(decision, actual, seal:)`), which
  # refuses a ticket changed on the way.
  SettleTicket = Struct.new(:id, :cost, :charged_at_us, :limiter, :key, keyword_init: true) do
    # Marks the ticket as issued by this process (Decision.from_native).
    def issued! = @issued = true

    # Whether this process issued the ticket (not rebuilt from data).
    def issued? = @issued == true
  end

  # What `Backend#check_all` decided: every part admitted (and consumed), or none consumed
  # anything. `parts` holds each part's Decision, in order (in a refused combination a part may
  # say allowed, alone it would have passed, but it consumed nothing and holds no lease);
  # `retry_after` is the longest of the refused parts'.
  CombinedDecision = Struct.new(:allowed, :retry_after_us, :parts, :limiters, :keys, keyword_init: true) do
    alias_method :allowed?, :allowed

    # Seconds until the combination may be admitted (0.0 when allowed).
    def retry_after = retry_after_us / 1_000_000.0

    # Releases the lease of every admitted concurrent part.
    def release
      parts.each_with_index { |decision, i| limiters[i].release(decision.lease, key: keys[i]) if decision.lease }
      nil
    end
  end

  # A clock that moves only when told (tests): a memory backend built on it
  # (`Backend.memory(clock:)`) reads time from it, a Redis or Cluster one (`Backend.redis(url,
  # clock:)`, `Backend.cluster(seeds, clock:)`) sends its time with every call instead of the
  # server's, and waits wake when it passes their deadline.
  class ManualClock
    attr_reader :ptr # :nodoc:

    # A clock reading `start_us` microseconds since the Unix epoch.
    def initialize(start_us = 0)
      start_us = Args.count(start_us, "start_us")
      @ptr = Native.handle(:rk_manual_clock_free) { |out| Native.rk_manual_clock_new(start_us, out) }
    end

    # Moves the clock forward by `seconds` (fractions allowed, down to a microsecond).
    def advance(seconds)
      Ratekeeper.invalid!("seconds", "must be a number, got #{seconds.inspect}") unless seconds.is_a?(Numeric)
      Ratekeeper.invalid!("seconds", "must be finite and not negative, got #{seconds}") unless seconds.to_f.finite? && seconds >= 0
      advance_us((seconds * 1_000_000).round)
    end

    # Moves the clock forward by `us` microseconds.
    def advance_us(us)
      Ratekeeper.check_status!(Native.rk_manual_clock_advance(@ptr, Args.count(us, "us")))
      self
    end

    # The clock's reading in microseconds since the Unix epoch.
    def now_us
      out = FFI::MemoryPointer.new(:uint64)
      Ratekeeper.check_status!(Native.rk_manual_clock_now_us(@ptr, out))
      out.read(:uint64)
    end
  end
end
