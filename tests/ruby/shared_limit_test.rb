# Ruby through the C ABI only: loads libratekeeper with ruby-ffi, wraps a limiter in a
# Sidekiq-style `within_limit` block, and shares one Redis limit with a Rust process
# (ffi-c/examples/shared_bucket.rs), proving the data model is the same in every language.
#
# Run by scripts/test-c with RK_LIB (path to libratekeeper.so), RK_TEST_REDIS_URL and
# RK_SHARED_BUCKET_BIN (the Rust example). Prints "N passed, N failed"; exits 1 on failure.
require "ffi"
require_relative "rk_types"
require "open3"

module Ratekeeper
  module C
    extend FFI::Library
    ffi_lib ENV.fetch("RK_LIB")

    WAIT_DEFAULT = -1.0
    FAIL_CLOSED = 0
    OK = 0
    OVER_LIMIT = 1

    Lease = RkTypes::Lease
    Decision = RkTypes::Decision

    attach_function :rk_status_name, [:uint32], :string
    attach_function :rk_last_error_message, [:pointer, :size_t, :pointer], :int
    attach_function :rk_backend_new_redis, [:string, :string, :uint32, :uint32, :double, :pointer], :int
    attach_function :rk_backend_free, [:pointer], :void
    attach_function :rk_limiter_new_bucket, [:pointer, :string, :uint64, :double, :pointer], :int
    attach_function :rk_limiter_new_concurrent, [:pointer, :string, :uint64, :double, :double, :pointer], :int
    attach_function :rk_limiter_free, [:pointer], :void
    # blocking: true releases Ruby's global VM lock while the call waits.
    attach_function :rk_limiter_acquire, [:pointer, :string, :uint64, :double, Decision.by_ref], :int, blocking: true
    attach_function :rk_limiter_release, [:pointer, :string, Lease.by_ref], :int, blocking: true
    attach_function :rk_limiter_peek, [:pointer, :string, Decision.by_ref], :int, blocking: true
  end

  class Error < StandardError
    attr_reader :status

    def initialize(status)
      @status = C.rk_status_name(status)
      buf = FFI::MemoryPointer.new(:char, 512)
      len = FFI::MemoryPointer.new(:size_t)
      C.rk_last_error_message(buf, buf.size, len)
      super("#{@status}: #{buf.read_string.force_encoding(Encoding::UTF_8)}")
    end
  end

  class OverLimit < Error
    attr_reader :retry_after

    def initialize(status, retry_after)
      super(status)
      @retry_after = retry_after
    end
  end

  def self.call!(status)
    raise Error.new(status) unless status == C::OK
  end

  # The pointer written to a `T **out` param, freed by `free` when Ruby collects the owner.
  def self.handle(free)
    out = FFI::MemoryPointer.new(:pointer)
    call!(yield(out))
    FFI::AutoPointer.new(out.read_pointer, C.method(free))
  end

  class Backend
    attr_reader :ptr

    def self.redis(url, prefix:)
      new(Ratekeeper.handle(:rk_backend_free) { |out| C.rk_backend_new_redis(url, prefix, C::FAIL_CLOSED, 0, 5.0, out) })
    end

    def initialize(ptr)
      @ptr = ptr
    end

    def bucket(name, limit, interval)
      Limiter.new(Ratekeeper.handle(:rk_limiter_free) { |out| C.rk_limiter_new_bucket(@ptr, name, limit, interval, out) })
    end

    def concurrent(name, limit, lock_timeout: 30.0, wait_timeout: 5.0)
      Limiter.new(Ratekeeper.handle(:rk_limiter_free) do |out|
        C.rk_limiter_new_concurrent(@ptr, name, limit, lock_timeout, wait_timeout, out)
      end)
    end
  end

  class Limiter
    def initialize(ptr)
      @ptr = ptr
    end

    def peek(key = nil)
      decision = C::Decision.new
      Ratekeeper.call!(C.rk_limiter_peek(@ptr, key, decision))
      decision
    end

    # Sidekiq's `within_limit`: acquire (waiting up to `wait` seconds), run the block, release.
    # Over the limit: raise OverLimit (policy :raise), or skip the block and return :over_limit
    # (policy :ignore).
    def within_limit(key = nil, cost: 1, wait: C::WAIT_DEFAULT, policy: :raise)
      decision = C::Decision.new
      status = C.rk_limiter_acquire(@ptr, key, cost, wait, decision)
      if status == C::OVER_LIMIT
        return :over_limit if policy == :ignore
        raise OverLimit.new(status, decision[:retry_after_us] / 1e6)
      end
      Ratekeeper.call!(status)
      begin
        yield decision
      ensure
        Ratekeeper.call!(C.rk_limiter_release(@ptr, key, decision[:lease])) if decision[:has_lease]
      end
    end
  end
end

$passed = 0
$failed = 0

def test(name)
  yield
  $passed += 1
  puts "  ok   #{name}"
rescue StandardError => e
  $failed += 1
  puts "  FAIL #{name}: #{e.class}: #{e.message}"
  puts e.backtrace.first(3).map { |l| "         #{l}" }
end

def assert_equal(want, got, what)
  raise "#{what}: expected #{want.inspect}, got #{got.inspect}" unless want == got
end

CENTURY = 100.0 * 365 * 86_400 # windows aligned to 100 years: none ends during the test
url = ENV.fetch("RK_TEST_REDIS_URL")
prefix = "rkrb#{Process.pid}"
backend = Ratekeeper::Backend.redis(url, prefix: prefix)

test "Ruby and Rust share one bucket on Redis" do
  bucket = backend.bucket("shared-bucket", 10, CENTURY)
  ran = 0
  4.times { bucket.within_limit { ran += 1 } }
  assert_equal 4, ran, "blocks run by Ruby"
  assert_equal 6, bucket.peek[:remaining], "remaining seen by Ruby"

  # A Rust process using the core directly sees what Ruby left, and takes it.
  out, status = Open3.capture2(ENV.fetch("RK_SHARED_BUCKET_BIN"), url, prefix, "shared-bucket", "10", CENTURY.to_s)
  raise "shared_bucket failed: #{out}" unless status.success?
  assert_equal "remaining=6\nadmitted=6\n", out, "the Rust process's view"

  # And Ruby sees what Rust took.
  assert_equal 0, bucket.peek[:remaining], "remaining seen by Ruby after Rust"
  assert_equal :over_limit, bucket.within_limit(wait: 0, policy: :ignore) { ran += 1 }, "policy :ignore"
  error = begin
    bucket.within_limit(wait: 0) { ran += 1 }
    nil
  rescue Ratekeeper::OverLimit => e
    e
  end
  raise "within_limit did not raise OverLimit" unless error
  raise "retry_after #{error.retry_after} is not positive" unless error.retry_after.positive?
  assert_equal 4, ran, "blocks run by Ruby in the end"
end

test "within_limit holds a concurrent lease for the block and releases it" do
  mutex = backend.concurrent("shared-mutex", 1, wait_timeout: 0.0)
  inside = mutex.within_limit do |decision|
    raise "no lease" unless decision[:has_lease] && decision[:lease][:fencing_token].positive?
    assert_equal 0, mutex.peek[:remaining], "slots while held"
    # Another Ruby thread is refused while the slot is held.
    Thread.new { mutex.within_limit(policy: :ignore) { :ran } }.value
  end
  assert_equal :over_limit, inside, "a second holder"
  assert_equal 1, mutex.peek[:remaining], "slots after the block"
  assert_equal :ran, mutex.within_limit { :ran }, "the block's value"
end

$erp_calls = 0
def call_erp
  $erp_calls += 1
end

test "the README's within_limit runs as shown" do
  ENV["REDIS_URL"] ||= ENV.fetch("RK_TEST_REDIS_URL")
  # --8<-- [start:readme]
  erp = Ratekeeper::Backend.redis(ENV["REDIS_URL"], prefix: "app").concurrent("erp", 50)
  erp.within_limit(policy: :raise) { call_erp }   # :ignore skips the block when over the limit
  # --8<-- [end:readme]
  assert_equal 1, $erp_calls, "blocks run"
  assert_equal 50, erp.peek[:remaining], "slots after the block"
end

test "errors carry the status and the core's message" do
  backend.bucket("not a name", 1, 1.0)
  raise "no error raised"
rescue Ratekeeper::Error => e
  assert_equal "RK_INVALID_ARGUMENT", e.status, "status"
  raise "message #{e.message.inspect} does not name the parameter" unless e.message.include?("`name`")
end

puts "#{$passed} passed, #{$failed} failed"
exit($failed.zero? ? 0 : 1)
