# frozen_string_literal: true

# The jobs the real-Sidekiq test runs (loaded by each `sidekiq -r` process): each calls the
# test's HTTP server under one window limit shared by every process through Redis.
#
# Environment: REDIS_URL (the broker, and the limiter's Redis), RK_PREFIX, RK_API_URL (the
# HTTP server), RK_LIMIT / RK_INTERVAL (the window), RK_BACKOFF_STEP (seconds per reschedule).
require "net/http"
require "json"
require "ratekeeper/sidekiq"
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

Sidekiq.options[:poll_interval_average] = 0.2 # move scheduled jobs quickly (Sidekiq's default: 5 s x processes)

Ratekeeper::Limiter.configure do |c|
  # A generous deadline: the test machine may be loaded (the default is 0.2 s).
  c.redis = { url: ENV.fetch("REDIS_URL"), prefix: ENV.fetch("RK_PREFIX"), deadline: 5 }
  step = Float(ENV.fetch("RK_BACKOFF_STEP"))
  # Sidekiq's shape (a step per reschedule, plus jitter), scaled down to fit a test.
  c.backoff = ->(_limiter, job, _ex) { step * job["overrated"] + rand * step }
end

API_LIMIT = Ratekeeper::Limiter.window("test-api", Integer(ENV.fetch("RK_LIMIT")), Float(ENV.fetch("RK_INTERVAL")),
                                       wait_timeout: 0)
# Spent before the test starts and never refilled within it: its jobs always go over the limit.
NEVER = Ratekeeper::Limiter.bucket("test-never", 1, :day, wait_timeout: 0, reschedule: 2)

# Records one attempt (when it started, how many reschedules it had made) in Redis.
def record(kind, job_id, overrated)
  Sidekiq.redis do |r|
    r.rpush("rk-test:attempts", JSON.generate(kind: kind, jid: job_id, overrated: overrated.to_i, at: Time.now.to_f))
  end
end

class CallApiJob
  include Sidekiq::Worker
  sidekiq_options retry: 0

  def perform(n)
    record("api", jid, overrated)
    API_LIMIT.within_limit do |handle|
      uri = URI("#{ENV.fetch('RK_API_URL')}/call?n=#{n}&admitted_us=#{handle.decision.decided_at_us}")
      response = Net::HTTP.get_response(uri)
      raise "the API answered #{response.code}" unless response.code == "200"
    end
  end

  # The count the middleware keeps in the job hash (Sidekiq passes the hash to middleware
  # only; the job reads it back from the hash its processor holds).
  def overrated = Thread.current[:rk_test_job]&.fetch("overrated", 0)
end

class NeverJob
  include Sidekiq::Worker
  sidekiq_options retry: 1

  def perform
    record("never", jid, Thread.current[:rk_test_job]&.fetch("overrated", 0))
    NEVER.within_limit { raise "ran over the limit" }
  end
end

# Lets the jobs see their own hash (for the attempt log only).
class JobHashMiddleware
  def call(_worker, job, _queue)
    Thread.current[:rk_test_job] = job
    yield
  ensure
    Thread.current[:rk_test_job] = nil
  end
end

Sidekiq.configure_server do |config|
  config.server_middleware { |chain| chain.add JobHashMiddleware }
end
