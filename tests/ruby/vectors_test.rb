# The shared conformance vectors (tests/vectors/*.json) through the C ABI only: Ruby loads
# libratekeeper with ruby-ffi and runs every case on a memory backend driven by a manual clock
# (rk_manual_clock) — the same cases the Rust, Python and Node runners run. A port of
# py/tests/test_vectors.py.
#
# What C cannot express is skipped and counted, never guessed: a non-whole or NaN count (C
# takes uint64_t) or one of 2^64 or more, a name or key with a NUL inside, `precision` 0 given
# explicitly (C's 0 means "none"), a calendar `anchor` of 0 (C's 0 means the default). A
# negative count is passed as C's conversion to uint64_t would make it. Decisions are
# compared on the fields rk_decision has (not the per-limit `limits` details).
#
# Run by scripts/test-c with RK_LIB (path to libratekeeper.so) and RK_VECTORS (the vectors'
# directory). Prints "N passed, N failed"; exits 1 on any failure.
require "ffi"
require_relative "rk_types"
require "json"

module C
  extend FFI::Library
  ffi_lib ENV.fetch("RK_LIB")

  Lease = RkTypes::Lease
  Decision = RkTypes::Decision

  class WindowLimit < FFI::Struct
    layout :limit, :uint64, :interval_secs, :double
  end

  class SlidingLimit < FFI::Struct
    layout :duration_secs, :double, :limit, :uint64, :precision_secs, :double
  end

  attach_function :rk_status_name, [:uint32], :string
  attach_function :rk_last_error_message, [:pointer, :size_t, :pointer], :int
  attach_function :rk_manual_clock_new, [:uint64, :pointer], :int
  attach_function :rk_manual_clock_advance, [:pointer, :uint64], :int
  attach_function :rk_manual_clock_free, [:pointer], :void
  attach_function :rk_backend_new_memory_with_clock, [:pointer, :pointer], :int
  attach_function :rk_backend_free, [:pointer], :void
  attach_function :rk_limiter_new_concurrent, [:pointer, :pointer, :uint64, :double, :double, :pointer], :int
  attach_function :rk_limiter_new_bucket, [:pointer, :pointer, :uint64, :double, :pointer], :int
  attach_function :rk_limiter_new_window, [:pointer, :pointer, :uint64, :double, :pointer], :int
  attach_function :rk_limiter_new_windows, [:pointer, :pointer, :pointer, :size_t, :pointer], :int
  attach_function :rk_limiter_new_sliding_window, [:pointer, :pointer, :pointer, :size_t, :pointer], :int
  attach_function :rk_limiter_new_token_bucket, [:pointer, :pointer, :double, :uint64, :pointer], :int
  attach_function :rk_limiter_new_leaky, [:pointer, :pointer, :uint64, :double, :pointer], :int
  attach_function :rk_limiter_new_points, [:pointer, :pointer, :uint64, :double, :pointer], :int
  attach_function :rk_limiter_new_calendar, [:pointer, :pointer, :uint64, :pointer, :pointer, :uint32, :pointer], :int
  attach_function :rk_limiter_new_unlimited, [:pointer], :int
  attach_function :rk_limiter_free, [:pointer], :void
  attach_function :rk_limiter_check, [:pointer, :pointer, :uint64, Decision.by_ref], :int
  attach_function :rk_limiter_peek, [:pointer, :pointer, Decision.by_ref], :int
  attach_function :rk_limiter_release, [:pointer, :pointer, Lease.by_ref], :int
  attach_function :rk_limiter_reset, [:pointer, :pointer], :int
  attach_function :rk_limiter_points_used, [:pointer, :pointer, :uint64, :uint64, Decision.by_ref], :int
end

OK = 0
ERROR_KINDS = {
  "RK_OVER_LIMIT" => "over_limit", "RK_SHED" => "shed", "RK_LEASE_LOST" => "lease_lost",
  "RK_INVALID_ARGUMENT" => "invalid_argument", "RK_NULL_PARAMETER" => "invalid_argument",
  "RK_INVALID_UTF8" => "invalid_argument", "RK_BACKEND_UNAVAILABLE" => "backend_unavailable",
  "RK_TIMEOUT" => "timeout"
}.freeze
NAMED_INTERVALS = { "second" => 1.0, "minute" => 60.0, "hour" => 3600.0, "day" => 86_400.0 }.freeze
MIN_TOTAL = 120

class Inexpressible < StandardError; end
class Malformed < StandardError; end

# A failed C call: its status, kind and the parameter its message names (`limit`).
class CError < StandardError
  attr_reader :status, :kind, :parameter

  def initialize(status)
    @status = C.rk_status_name(status)
    @kind = ERROR_KINDS.fetch(@status, @status)
    buf = FFI::MemoryPointer.new(:char, 1024)
    C.rk_last_error_message(buf, buf.size, FFI::MemoryPointer.new(:size_t))
    message = buf.read_string.force_encoding(Encoding::UTF_8)
    @parameter = message[/`([^`]+)`/, 1]
    super("#{@status}: #{message}")
  end

  def to_h
    kind == "invalid_argument" ? { "kind" => kind, "parameter" => parameter } : { "kind" => kind }
  end
end

def call!(status)
  raise CError.new(status) unless status == OK
end

# A C string (NUL-terminated bytes, as given: invalid UTF-8 reaches the library), or NULL.
def cstr(value)
  return nil if value.nil?
  bytes = value.b
  raise Inexpressible, "a string with a NUL inside" if bytes.include?("\0")
  FFI::MemoryPointer.from_string(bytes)
end

def count(value)
  case value
  when Integer
    raise Inexpressible, "count #{value} (outside 64 bits)" if value >= 2**64 || value < -2**63
    # ruby-ffi takes a uint64_t at or above 2^63 in its signed form; a negative count reaches
    # the library as C's conversion to uint64_t makes it (-1 is 2^64 - 1).
    value >= 2**63 ? value - 2**64 : value
  when Float
    raise Inexpressible, "count #{value}" unless value.finite? && value == value.floor && value >= 0
    count(value.to_i)
  when String then raise Inexpressible, "count #{value}"
  else raise Malformed, "expected a number, got #{value.inspect}"
  end
end

def seconds(value)
  case value
  when Integer, Float then value.to_f
  when "NaN" then Float::NAN
  when "Infinity" then Float::INFINITY
  when "-Infinity" then -Float::INFINITY
  when String then NAMED_INTERVALS.fetch(value) { raise Inexpressible, "interval #{value.inspect} (C takes seconds)" }
  else raise Malformed, "expected a number, got #{value.inspect}"
  end
end

def key_of(step)
  key = step["key"]
  key.is_a?(Hash) ? key["repeat"].to_s * key["times"].to_i : key
end

# Builds a limiter through the C constructors, returning an FFI::AutoPointer.
def build(backend, spec)
  out = FFI::MemoryPointer.new(:pointer)
  name = cstr(spec["name"])
  status =
    case spec["kind"]
    when "concurrent"
      C.rk_limiter_new_concurrent(backend, name, count(spec["limit"]), seconds(spec["lock_timeout"]), 5.0, out)
    when "bucket" then C.rk_limiter_new_bucket(backend, name, count(spec["limit"]), seconds(spec["interval"]), out)
    when "window"
      if spec.key?("windows")
        windows = spec["windows"]
        array = FFI::MemoryPointer.new(C::WindowLimit, [windows.size, 1].max)
        windows.each_with_index do |w, i|
          limit = C::WindowLimit.new(array + i * C::WindowLimit.size)
          limit[:limit] = count(w["limit"])
          limit[:interval_secs] = seconds(w["interval"])
        end
        C.rk_limiter_new_windows(backend, name, array, windows.size, out)
      else
        C.rk_limiter_new_window(backend, name, count(spec["limit"]), seconds(spec["interval"]), out)
      end
    when "sliding_window"
      limits = spec["limits"]
      array = FFI::MemoryPointer.new(C::SlidingLimit, [limits.size, 1].max)
      limits.each_with_index do |l, i|
        raise Inexpressible, "precision 0 (C's 0 means none)" if l.size > 2 && !l[2].nil? && l[2].is_a?(Numeric) && l[2].zero?
        limit = C::SlidingLimit.new(array + i * C::SlidingLimit.size)
        limit[:duration_secs] = seconds(l[0])
        limit[:limit] = count(l[1])
        limit[:precision_secs] = l.size > 2 && !l[2].nil? ? seconds(l[2]) : 0.0
      end
      C.rk_limiter_new_sliding_window(backend, name, array, limits.size, out)
    when "token_bucket"
      C.rk_limiter_new_token_bucket(backend, name, seconds(spec["rate"]), count(spec["capacity"]), out)
    when "leaky" then C.rk_limiter_new_leaky(backend, name, count(spec["size"]), seconds(spec["drain"]), out)
    when "points" then C.rk_limiter_new_points(backend, name, count(spec["capacity"]), seconds(spec["refill"]), out)
    when "calendar"
      anchor = spec["anchor"]
      raise Inexpressible, "anchor 0 (C's 0 means the default)" if anchor == 0
      raise Inexpressible, "anchor #{anchor}" unless anchor.nil? || (anchor.is_a?(Integer) && anchor.between?(0, 2**32 - 1))
      C.rk_limiter_new_calendar(backend, name, count(spec["limit"]), cstr(spec["period"]), cstr(spec["tz"]), anchor || 0, out)
    when "unlimited" then C.rk_limiter_new_unlimited(out)
    else raise Malformed, "unknown limiter kind #{spec['kind'].inspect}"
    end
  call!(status)
  FFI::AutoPointer.new(out.read_pointer, C.method(:rk_limiter_free))
end

def decision_h(d)
  v = { "allowed" => d[:allowed], "limit" => d[:limit], "remaining" => d[:remaining],
        "retry_after_us" => d[:retry_after_us], "reset_after_us" => d[:reset_after_us] }
  v["fencing_token"] = d[:lease][:fencing_token] if d[:has_lease]
  v
end

def error_matches(expected, error)
  raise Malformed, "an invalid_argument expectation must name its `parameter`" if expected["kind"] == "invalid_argument" && !expected.key?("parameter")
  error.kind == expected["kind"] && (!expected.key?("parameter") || error.parameter == expected["parameter"])
end

# Runs one case; returns failure messages.
def run_case(c, stats)
  failures = []
  clock_out = FFI::MemoryPointer.new(:pointer)
  call!(C.rk_manual_clock_new(c.fetch("start_us"), clock_out))
  clock = FFI::AutoPointer.new(clock_out.read_pointer, C.method(:rk_manual_clock_free))
  backend_out = FFI::MemoryPointer.new(:pointer)
  call!(C.rk_backend_new_memory_with_clock(clock, backend_out))
  backend = FFI::AutoPointer.new(backend_out.read_pointer, C.method(:rk_backend_free))

  built = {}
  build_error = nil
  c["limiters"].sort.each do |id, spec|
    built[id] = build(backend, spec)
  rescue CError => e
    build_error ||= [id, e]
  end
  if c.key?("limiter_error")
    expected = c["limiter_error"]
    if build_error.nil?
      failures << "expected limiter error #{expected}, but every limiter was built"
    elsif !error_matches(expected, build_error[1])
      failures << "building #{build_error[0]}: expected error #{expected}, got #{build_error[1].to_h} (#{build_error[1].message})"
    end
    return failures
  end
  return ["building #{build_error[0]}: expected success, got #{build_error[1].message}"] if build_error

  leases = {}
  c["steps"].each_with_index do |step, index|
    op = step["op"]
    if op == "advance"
      call!(C.rk_manual_clock_advance(clock, step["us"]))
      next
    end
    limiter = built.fetch(step["limiter"])
    key = cstr(key_of(step))
    decision = C::Decision.new
    outcome =
      begin
        case op
        when "check" then call!(C.rk_limiter_check(limiter, key, step.key?("cost") ? count(step["cost"]) : 1, decision)) || decision
        when "peek" then call!(C.rk_limiter_peek(limiter, key, decision)) || decision
        when "reset" then call!(C.rk_limiter_reset(limiter, key)) && nil
        when "points_used"
          call!(C.rk_limiter_points_used(limiter, key, count(step["estimate"]), count(step["actual"]), decision)) || decision
        when "release"
          lease = leases.fetch(step["lease"]) { raise Malformed, "step #{index}: no lease saved as #{step['lease']}" }
          call!(C.rk_limiter_release(limiter, key || cstr(""), lease)) && nil
        else raise Malformed, "step #{index}: unknown op #{op}"
        end
      rescue CError => e
        e
      end
    where = "step #{index}: #{op} on #{step['limiter']}"
    if step.key?("error")
      if !outcome.is_a?(CError)
        failures << "#{where}: expected error #{step['error']}, got success"
      elsif !error_matches(step["error"], outcome)
        failures << "#{where}: expected error #{step['error']}, got #{outcome.to_h} (#{outcome.message})"
      end
      next
    end
    if outcome.is_a?(CError)
      failures << "#{where}: expected success, got #{outcome.message}"
      next
    end
    next unless step.key?("expect")
    raise Malformed, "#{where}: an expectation for a call that returns no decision" if outcome.nil?
    expected = step["expect"].dup
    stats[:details_skipped] += 1 if expected.delete("limits")
    actual = decision_h(outcome)
    actual.delete("fencing_token") unless expected.key?("fencing_token")
    failures << "#{where}: expected #{expected.sort.to_h}\n         actual   #{actual.sort.to_h}" unless expected == actual
    if step.key?("save_lease")
      if outcome[:has_lease]
        lease = C::Lease.new
        lease.pointer.put_bytes(0, outcome[:lease].pointer.get_bytes(0, C::Lease.size))
        leases[step["save_lease"]] = lease
      else
        failures << "#{where}: expected a lease to save as #{step['save_lease']}, got none"
      end
    end
  end
  failures
end

dir = ENV.fetch("RK_VECTORS")
files = Dir[File.join(dir, "*.json")].sort
raise "no vectors in #{dir}" if files.empty?
stats = { cases: 0, ran: 0, skipped: 0, details_skipped: 0 }
failures = []
files.each do |path|
  doc = JSON.parse(File.read(path))
  doc.fetch("cases").each do |c|
    stats[:cases] += 1
    begin
      problems = run_case(c, stats)
      stats[:ran] += 1
      problems.each { |p| failures << "FAIL #{File.basename(path)} / #{c['name'].inspect}: #{p}" }
    rescue Inexpressible => e
      stats[:skipped] += 1
      puts "  skipped #{File.basename(path)} / #{c['name'].inspect}: not expressible in C (#{e.message})"
    rescue Malformed, KeyError => e
      failures << "FAIL #{File.basename(path)} / #{c['name'].inspect}: malformed vector: #{e.message}"
    end
  end
end
failures.each { |f| puts f }
failures << "only #{stats[:ran]} cases ran; at least #{MIN_TOTAL} are required" if stats[:ran] < MIN_TOTAL
puts "vectors through the C ABI: #{stats[:cases]} cases, #{stats[:ran]} ran, #{stats[:skipped]} not expressible in C, " \
     "#{stats[:details_skipped]} per-limit details not compared, #{failures.size} failures"
passed = failures.empty? ? 1 : 0
puts "#{passed} passed, #{1 - passed} failed"
exit(passed == 1 ? 0 : 1)
