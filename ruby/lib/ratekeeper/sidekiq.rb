# frozen_string_literal: true

require "ratekeeper"
require "sidekiq"

module Ratekeeper
  # Sidekiq integration, as Sidekiq Enterprise's limiter has it: `require "ratekeeper/sidekiq"`
  # adds `ServerMiddleware` to every Sidekiq server (`Sidekiq.configure_server`).
  module Sidekiq
    # Reschedules a job whose `perform` raised `OverLimit` (or an error listed in
    # `Ratekeeper::Limiter.config.errors`) instead of failing it: the job runs again after
    # `config.backoff.call(limiter, job, error)` seconds (Sidekiq's `300 * overrated + rand(300)
    # + 1` by default), with `job["overrated"]` counting its reschedules. Past the limiter's
    # `reschedule:` (20; `config.reschedule` for errors that name no limiter) the error is raised
    # again, so Sidekiq's own retry takes over.
    #
    # Thread-safe: it keeps no state of its own (the count travels in the job hash).
    class ServerMiddleware
      def initialize(config = Ratekeeper::Limiter.config)
        @config = config
      end

      # Sidekiq 6's server middleware call.
      def call(_worker, job, _queue)
        yield
      rescue Exception => e # rubocop:disable Lint/RescueException -- filtered by the configured classes
        raise unless reschedule?(e)

        limiter = e.respond_to?(:limiter) ? e.limiter : nil
        most = limiter.respond_to?(:reschedule) && limiter.reschedule ? limiter.reschedule : @config.reschedule
        overrated = job["overrated"].to_i
        raise if overrated >= most

        job["overrated"] = overrated + 1
        delay = @config.backoff.call(limiter, job, e).to_f
        ::Sidekiq.logger.info("ratekeeper: #{job['class']} #{job['jid']} over limit, rescheduled in #{delay.round(2)} s " \
                              "(#{job['overrated']} of #{most})")
        ::Sidekiq::Client.push(job.merge("at" => Time.now.to_f + delay))
        nil
      end

      private

      def reschedule?(error)
        @config.errors.any? { |klass| error.is_a?(klass) }
      end
    end

    # Adds the middleware to this Sidekiq server (done on `require`; idempotent).
    def self.install
      ::Sidekiq.configure_server do |config|
        config.server_middleware do |chain|
          chain.add ServerMiddleware unless chain.exists?(ServerMiddleware)
        end
      end
    end
  end
end

Ratekeeper::Sidekiq.install
