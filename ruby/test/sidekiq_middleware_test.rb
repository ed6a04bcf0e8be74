# frozen_string_literal: true

# Ratekeeper::Sidekiq::ServerMiddleware called as Sidekiq calls it, on a real Redis: what it
# reschedules (into Sidekiq's scheduled set, with `overrated` and the backoff's delay), what it
# lets through, and when it gives the error back to Sidekiq's retry.
require_relative "test_helper"
require "ratekeeper/sidekiq"
require "sidekiq/api"
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

class SidekiqMiddlewareTest < Minitest::Test
  SlowDown = Class.new(StandardError)

  def setup
    @redis = RedisServer.new
    Sidekiq.configure_client { |c| c.redis = { url: @redis.url } }
    Sidekiq.logger.level = Logger::WARN # the middleware's "rescheduled" lines
    @config = Ratekeeper::Configuration.new
    @config.backoff = ->(_limiter, job, _ex) { 100 * job["overrated"] }
    @config.errors << SlowDown
    @middleware = Ratekeeper::Sidekiq::ServerMiddleware.new(@config)
    @limiter = Ratekeeper::Limiter.bucket("mw", 1, :day, wait_timeout: 0, reschedule: 3, backend: Ratekeeper::Backend.memory)
  end

  def teardown = @redis.stop

  def job(overrated = nil)
    { "class" => "SomeJob", "args" => [1], "jid" => "j#{rand(1 << 40)}", "queue" => "default", "retry" => true }
      .merge(overrated ? { "overrated" => overrated } : {})
  end

  def scheduled = Sidekiq::ScheduledSet.new.to_a

  def test_over_limit_reschedules_with_the_backoff_and_counts
    @limiter.check # spent
    j = job
    before = Time.now.to_f
    assert_nil(@middleware.call(nil, j, "default") { @limiter.within_limit { flunk "ran over the limit" } })
    entry = scheduled.fetch(0)
    assert_equal j["jid"], entry.jid
    assert_equal 1, entry.item["overrated"]
    assert_in_delta before + 100, entry.at.to_f, 5
  end

  def test_a_configured_error_reschedules_up_to_config_reschedule
    assert_nil(@middleware.call(nil, job(19), "default") { raise SlowDown })
    assert_equal 20, scheduled.fetch(0).item["overrated"]
    assert_raises(SlowDown) { @middleware.call(nil, job(20), "default") { raise SlowDown } }
    assert_equal 1, scheduled.size
  end

  def test_past_the_limiters_reschedule_the_error_goes_to_sidekiqs_retry
    @limiter.check
    error = assert_raises(Ratekeeper::OverLimit) { @middleware.call(nil, job(3), "default") { @limiter.within_limit { nil } } }
    assert_same @limiter, error.limiter
    assert_empty scheduled
  end

  def test_other_errors_and_successes_pass_through
    assert_raises(ArgumentError) { @middleware.call(nil, job, "default") { raise ArgumentError } }
    assert_equal :done, @middleware.call(nil, job, "default") { :done }
    assert_empty scheduled
  end
end
