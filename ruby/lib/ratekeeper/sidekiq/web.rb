# frozen_string_literal: true

require "ratekeeper"
require "sidekiq/web"

module Ratekeeper
  module Sidekiq
    # `require "ratekeeper/sidekiq/web"` adds a "Limits" tab to Sidekiq's Web UI, as Sidekiq
    # Enterprise's limiter does: every limiter in the registry of the backend
    # `Ratekeeper::Limiter.configure` set (every limiter any process in any language used on
    # that Redis or Redis Cluster in the last 90 days), with its spec, live overrides, users
    # and the fleet's allowed / refused counts.
    module Web
      VIEW = File.read(File.expand_path("views/limits.erb", __dir__))

      # The rows of the page: the registry joined with the fleet's metrics, by name and kind.
      def self.rows(backend = Ratekeeper::Limiter.backend)
        metrics = backend.metrics(fleet: true).to_h { |m| [[m["name"], m["kind"]], m["metrics"]] }
        backend.limiters.sort_by { |l| l["name"] }.map do |l|
          l.merge("metrics" => metrics.fetch([l["name"], l["kind"]], {}))
        end
      end

      # Sidekiq::Web's extension hook.
      def self.registered(app)
        app.get "/limits" do
          begin
            @limiters = Ratekeeper::Sidekiq::Web.rows
          rescue Ratekeeper::Error => e
            @limits_error = e.message
            @limiters = []
          end
          erb(Ratekeeper::Sidekiq::Web::VIEW)
        end
      end
    end
  end
end

Sidekiq::Web.register(Ratekeeper::Sidekiq::Web)
Sidekiq::Web.tabs["Limits"] = "limits"
