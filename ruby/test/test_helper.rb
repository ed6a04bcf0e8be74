# frozen_string_literal: true

# The gem's minitest suite. RATEKEEPER_LIB points at the library under test (scripts/test-ruby
# sets it to the debug build); the tests start their own redis-server (test/support).
$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "minitest/autorun"
require "ratekeeper"
require_relative "support/redis_server"

REPO_ROOT = File.expand_path("../..", __dir__)

module TestHelpers
  # This run's mark (a server reused across runs), and a count that tells this run's prefixes
  # apart: random draws for every test could collide (the vectors alone draw hundreds).
  RUN = rand(1 << 30)
  PREFIXES = (0..).each

  # A key prefix no other test (or run) shares.
  def unique_prefix = "rkrb#{Process.pid}x#{RUN}x#{PREFIXES.next}"

  def redis_url = RedisServer.shared.url

  # A generous deadline: the test machine may be loaded (the default is 0.2 s).
  def redis_backend(**options) = Ratekeeper::Backend.redis(redis_url, prefix: unique_prefix, **{ deadline: 5 }.merge(options))
end

Minitest::Test.include(TestHelpers)
