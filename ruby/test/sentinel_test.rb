# frozen_string_literal: true

# A Sentinel-managed primary through the gem, on real processes (`rk-test-redis start
# --sentinel`: a primary, two replicas, three `redis-server --sentinel`): `Backend.sentinel`,
# the `redis+sentinel://` URL and the configure block's `sentinels:` reach the same primary, and
# `replica_acks` beyond the replicas there are fails the call as unavailable.

require_relative "test_helper"

class SentinelTest < Minitest::Test
  SERVICE = "rkprimary"

  def setup
    servers = JSON.parse(RedisServer.run("start", "--sentinel", "--json")).fetch("servers")
    @pids = servers.map { |s| s.fetch("pid") }
    @sentinels = servers.select { |s| s.fetch("args").include?("--sentinel") }.map { |s| "127.0.0.1:#{s.fetch('port')}" }
  end

  def teardown
    RedisServer.run("stop", *@pids.map(&:to_s))
  end

  def test_every_form_reaches_the_primary_and_replica_acks_waits
    prefix = "rbsentinel#{Process.pid}"
    backend = Ratekeeper::Backend.sentinel(@sentinels, SERVICE, prefix: prefix, deadline: 5)
    assert_equal :sentinel, backend.kind
    limiter = Ratekeeper::Limiter.window("w", 10, 60, backend: backend)
    assert limiter.check("k").allowed

    url = Ratekeeper::Backend.redis("redis+sentinel://#{@sentinels.join(',')}/#{SERVICE}", prefix: prefix, deadline: 5)
    assert_equal 9, Ratekeeper::Limiter.window("w", 10, 60, backend: url).peek("k").remaining

    config = Ratekeeper::Configuration.new
    config.redis = { sentinels: @sentinels, service: SERVICE, prefix: prefix, deadline: 5, replica_acks: 2 }
    assert Ratekeeper::Limiter.window("w", 10, 60, backend: config.backend).check("k").allowed

    three = Ratekeeper::Backend.sentinel(@sentinels, SERVICE, prefix: prefix, deadline: 1, replica_acks: 3)
    error = assert_raises(Ratekeeper::BackendUnavailable) { Ratekeeper::Limiter.window("w", 10, 60, backend: three).check("k") }
    assert_match(/2 of the 3 replicas/, error.message)
  end
end
