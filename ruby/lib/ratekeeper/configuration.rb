# frozen_string_literal: true

module Ratekeeper
  # What `Ratekeeper::Limiter.configure { |c| ... }` sets, as in Sidekiq Enterprise:
  #
  #   Ratekeeper::Limiter.configure do |c|
  #     c.redis = { url: ENV["REDIS_URL"] }                 # where every limiter's state lives
  #     c.backoff = ->(limiter, job, ex) { 60 * job["overrated"] }  # seconds until the job runs again
  #     c.errors << SomeLib::SlowDownPlease                   # more errors that reschedule a job
  #   end
  class Configuration
    # Sidekiq's default: 300 s per reschedule already made, plus up to 5 minutes of jitter, and
    # never sooner than the limiter said the call could succeed.
    DEFAULT_BACKOFF = lambda do |_limiter, job, ex|
      delay = 300 * job["overrated"].to_i + rand(300) + 1
      ex.respond_to?(:retry_after) ? [delay, ex.retry_after.to_f.ceil].max : delay
    end

    # `->(limiter, job, exception) { seconds }`: when a rescheduled job runs again.
    attr_accessor :backoff
    # Exception classes that reschedule a job like `OverLimit` does (e.g. a client library's
    # "slow down" error); `OverLimit` always does.
    attr_reader :errors
    # How many times a job is rescheduled when the error names no limiter (Sidekiq's 20).
    attr_accessor :reschedule
    # The Redis options given to `redis=` (nil: none).
    attr_reader :redis

    def initialize
      @backoff = DEFAULT_BACKOFF
      @errors = [OverLimit]
      @reschedule = 20
      @redis = nil
      @backend = nil
      @lock = Mutex.new
    end

    # Where limiters built by `Ratekeeper::Limiter.concurrent` and friends keep their state: a
    # URL String (`redis+sentinel://` included), or a Hash with `url:` (or `cluster:`, an Array of
    # seed URLs, or `sentinels:` with `service:`, a Sentinel-managed primary) and the options of
    # `Backend.redis` (`prefix:`, `failure_policy:`, `fallback_divisor:`, `deadline:`, ...).
    def redis=(options)
      options = { url: options } if options.is_a?(String)
      Ratekeeper.invalid!("redis", "must be a URL or a Hash with url:, cluster: or sentinels:, got #{options.inspect}") unless options.is_a?(Hash)
      options = options.transform_keys(&:to_sym)
      @lock.synchronize do
        @redis = options
        @backend = build(options)
      end
    end

    # Uses `backend` (a `Ratekeeper::Backend`) for every limiter built without one.
    def backend=(backend)
      Ratekeeper.invalid!("backend", "must be a Ratekeeper::Backend, got #{backend.inspect}") unless backend.is_a?(Backend)
      @lock.synchronize { @backend = backend }
    end

    # The backend of limiters built without one: what `redis=` or `backend=` set, else Redis at
    # `REDIS_URL` when it is set (as Sidekiq does), else one in-process memory backend.
    def backend
      @backend || @lock.synchronize do
        @backend ||= ENV["REDIS_URL"] ? build(url: ENV["REDIS_URL"]) : Backend.memory
      end
    end

    private

    def build(options)
      options = options.dup
      if (seeds = options.delete(:cluster))
        Backend.cluster(seeds, **options)
      elsif (sentinels = options.delete(:sentinels))
        Backend.sentinel(sentinels, options.delete(:service), **options)
      else
        url = options.delete(:url) { Ratekeeper.invalid!("redis", "needs url:, cluster: or sentinels: with service:") }
        Backend.redis(url, **options)
      end
    end
  end
end
