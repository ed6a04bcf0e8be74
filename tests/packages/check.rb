# One real check against the Redis at $REDIS_URL through the installed platform gem
# (scripts/test-packages installs it with `gem install --local` with no Rust toolchain reachable)
# and proof that the library loaded is the one the gem carries.
require "ratekeeper"

native = Ratekeeper::Native.library_path
raise "the gem loaded #{native}, not the library it carries" unless native == Ratekeeper::Native::BUNDLED && File.exist?(native)

backend = Ratekeeper::Backend.redis(ENV.fetch("REDIS_URL"), prefix: "packages-rb")
limiter = Ratekeeper::Limiter.token_bucket("installed", 1, 1, backend: backend)
first = limiter.check
second = limiter.check
puts "ruby: allowed=#{first.allowed?} then allowed=#{second.allowed?} retry_after=#{format('%.3f', second.retry_after)} (#{native})"
# A bucket of one: the first check is allowed, the second refused.
raise "unexpected decisions" unless first.allowed? && !second.allowed? && second.retry_after.positive?
