# The Rack app of ruby/test/rack_proxy_test.rb: Ratekeeper::Rack with the trusted proxies (and,
# when set, the proxy header) of the environment, API_LIMIT requests a minute per client.
require "json"
require "ratekeeper/rack"

Ratekeeper::Limiter.configure { |c| c.redis = { url: ENV.fetch("REDIS_URL"), prefix: ENV.fetch("RK_PREFIX") } }

options = { trusted_proxies: JSON.parse(ENV.fetch("TRUSTED_PROXIES")) }
options[:proxy_header] = ENV["PROXY_HEADER"] if ENV["PROXY_HEADER"]
use Ratekeeper::Rack, limiter: Ratekeeper::Limiter.window("proxied", Integer(ENV.fetch("API_LIMIT")), :minute),
                     skip: ->(env) { env["PATH_INFO"] == "/health" }, **options

run ->(_env) { [200, { "content-type" => "text/plain" }, ["hello\n"]] }
