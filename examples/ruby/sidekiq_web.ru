# Sidekiq's Web UI with ratekeeper's "Limits" tab. Run by ruby/test/sidekiq_web_test.rb (in
# headless Chromium):   REDIS_URL=redis://127.0.0.1:6379 puma examples/ruby/sidekiq_web.ru
# --8<-- [start:web]
require "sidekiq/web"
require "ratekeeper/sidekiq/web" # adds the "Limits" tab

Sidekiq.configure_client { |config| config.redis = { url: ENV.fetch("REDIS_URL", "redis://localhost:6379") } }
Ratekeeper::Limiter.configure { |config| config.redis = { url: ENV.fetch("REDIS_URL", "redis://localhost:6379") } }

use Rack::Session::Cookie, secret: ENV.fetch("SESSION_SECRET") { SecureRandom.hex(32) }, same_site: true, max_age: 86_400
run Sidekiq::Web
# --8<-- [end:web]
