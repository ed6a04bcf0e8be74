# A Rack app limited per client address by ratekeeper, shared by every Puma worker (and every
# process in any language) on the same Redis. Run by ruby/test/rack_test.rb under Puma:
#   REDIS_URL=redis://127.0.0.1:6379 puma -w 2 examples/ruby/config.ru
# --8<-- [start:rack]
require "ratekeeper/rack"

Ratekeeper::Limiter.configure { |c| c.redis = { url: ENV.fetch("REDIS_URL", "redis://localhost:6379") } }

API_LIMIT = Ratekeeper::Limiter.window("api", Integer(ENV.fetch("API_LIMIT", "100")), :minute)

use Ratekeeper::Rack,
    limiter: API_LIMIT,
    skip: ->(env) { env["PATH_INFO"] == "/health" },   # not limited, no header
    headers: "draft-11",                                # RateLimit-Policy + RateLimit
    partition_key_secret: ENV["RATEKEEPER_PK_SECRET"]   # RateLimit's pk: a keyed hash of the client

run ->(env) { [200, { "content-type" => "text/plain" }, ["hello\n"]] }
# --8<-- [end:rack]
