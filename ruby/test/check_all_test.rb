# frozen_string_literal: true

# Backend#check_all / #acquire_all (several limits, all or nothing) against a real redis-server
# and on the memory backend.
require_relative "test_helper"

class CheckAllTest < Minitest::Test
  def backends = [redis_backend, Ratekeeper::Backend.memory]

  def colocated(backend, name, spec) = backend.limiter(name, spec.merge("colocate" => "tenant"))

  def test_all_or_nothing
    backends.each do |backend|
      rate = colocated(backend, "rb-rate", { "kind" => "token_bucket", "rate" => 0.001, "capacity" => 5 })
      quota = colocated(backend, "rb-quota", { "kind" => "bucket", "limit" => 3, "interval" => 3600 })
      slots = colocated(backend, "rb-slots", { "kind" => "concurrent", "limit" => 2, "lock_timeout" => 3600 })
      parts = [[rate, "t1:u", 2], [quota, "t1", 2], [slots, "t1"]]

      admitted = backend.check_all(parts)
      assert admitted.allowed?
      assert_equal 0.0, admitted.retry_after
      assert_equal [3, 1, 1], admitted.parts.map(&:remaining)
      assert_operator admitted.parts[2].lease.fencing_token, :>, 0

      refused = backend.check_all(parts)
      refute refused.allowed?
      assert_equal [true, false, true], refused.parts.map(&:allowed)
      assert_equal refused.parts[1].retry_after_us, refused.retry_after_us
      assert(refused.parts.all? { |d| d.lease.nil? })
      assert_equal 3, rate.peek("t1:u").remaining
      assert_equal 1, quota.peek("t1").remaining

      admitted.release
      assert_equal 2, slots.peek("t1").remaining

      error = assert_raises(Ratekeeper::OverLimit) { backend.acquire_all(parts, wait_timeout: 1) }
      assert_operator error.retry_after, :>, 1
    end
  end

  # A part's decision carries its own key: settling it settles that part's key. (Before, part
  # decisions carried no key, so a settle applied to the limiter's shared key "".)
  def test_a_part_settles_its_own_key
    backends.each do |backend|
      rate = colocated(backend, "rb-settle", { "kind" => "token_bucket", "rate" => 0.001, "capacity" => 10 })
      quota = colocated(backend, "rb-settle-quota", { "kind" => "bucket", "limit" => 100, "interval" => 3600 })
      admitted = backend.check_all([[rate, "t1:u", 5], [quota, "t1", 5]])
      assert admitted.allowed?
      assert_equal "t1:u", admitted.parts[0].settle.key
      settled = rate.settle(admitted.parts[0], 1)
      assert_equal 9, settled.remaining
      assert_equal 9, rate.peek("t1:u").remaining, "the part's key was refunded"
      assert_equal 10, rate.peek.remaining, "the shared key was not touched"
      quota.settle(admitted.parts[1], 2)
      assert_equal 98, quota.peek("t1").remaining
    end
  end

  # The parts' key strings stay alive while the C call reads them, with the GVL released: under
  # GC.stress (a collection at every allocation) every part still consumes its own key. (Before,
  # each key's MemoryPointer was referenced only by a temporary struct, so a collection during
  # the call could free it: the call read freed memory.)
  def test_keys_outlive_the_call_under_gc_stress
    backend = redis_backend
    limiters = (0...8).map do |i|
      colocated(backend, "rb-gc#{i}", { "kind" => "bucket", "limit" => 10, "interval" => 3600 })
    end
    keys = (0...8).map { |i| "t7:user-#{i}-#{'x' * 40}" }
    3.times do
      decided = begin
        GC.stress = true
        backend.check_all(limiters.zip(keys).map { |l, k| [l, k.dup, 1] })
      ensure
        GC.stress = false
      end
      assert decided.allowed?
    end
    limiters.zip(keys).each { |l, k| assert_equal 7, l.peek(k).remaining, "#{l.name} #{k}" }
  end

  def test_bad_parts_are_named_and_write_nothing
    backend = Ratekeeper::Backend.memory
    bucket = colocated(backend, "rb-bad", { "kind" => "bucket", "limit" => 5, "interval" => 60 })
    {
      [] => "parts",
      "t1" => "parts",
      [[bucket, "t1", 1], [bucket, "t1", 0]] => "parts[1].cost",
      [[bucket, "t1", -1]] => "parts[0].cost",
      [[bucket, 7, 1]] => "parts[0].key",
      [[bucket]] => "parts[0]",
      [["no", "t1", 1]] => "parts[0]",
      [[bucket, "t1", 6]] => "parts[0].cost"
    }.each do |parts, parameter|
      error = assert_raises(Ratekeeper::InvalidArgument) { backend.check_all(parts) }
      assert_equal parameter, error.parameter, "#{parts.inspect}: #{error.message}"
    end
    assert_equal 5, bucket.peek("t1").remaining
  end
end
