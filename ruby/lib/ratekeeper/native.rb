# frozen_string_literal: true

require "ffi"

module Ratekeeper
  # The C ABI of libratekeeper (include/ratekeeper.h), attached with ruby-ffi. Nothing here
  # decides anything: the gem converts arguments, results and errors, and the library does the
  # rest.
  #
  # The library is found, in order: `RATEKEEPER_LIB` (a path), the copy a platform gem carries
  # (`lib/ratekeeper/native/libratekeeper.so`), then the system's (`libratekeeper.so` from the
  # C tarball, through the dynamic loader's search path).
  module Native
    extend FFI::Library

    BUNDLED = File.expand_path("native/libratekeeper.so", __dir__)

    # Where the library is loaded from.
    def self.library_path
      ENV["RATEKEEPER_LIB"] || (File.exist?(BUNDLED) ? BUNDLED : "ratekeeper")
    end

    # What to do when no library loads: RATEKEEPER_LIB names a file that is not one; or this is
    # the plain gem (no prebuilt library for this platform) and the system has none either.
    def self.missing_library(error)
      return "ratekeeper: RATEKEEPER_LIB=#{ENV['RATEKEEPER_LIB']} does not load: #{error.message}" if ENV["RATEKEEPER_LIB"]

      "ratekeeper: no libratekeeper to load on #{Gem::Platform.local}: this gem carries none (the prebuilt " \
        "library comes in the platform gems for #{PREBUILT.join(' and ')}, which `gem install ratekeeper` " \
        "picks there), and the system has none. Build it from the source repository with Rust " \
        "(https://rustup.rs): `cargo build --release -p ratekeeper-ffi`, then set RATEKEEPER_LIB to " \
        "target/release/libratekeeper.so (or install it where the dynamic loader looks). " \
        "(#{error.message})"
    end

    # The platforms whose gem carries the library (scripts/package builds them).
    PREBUILT = %w[x86_64-linux aarch64-linux].freeze

    begin
      ffi_lib library_path
    rescue LoadError => e
      raise LoadError, missing_library(e)
    end

    # `rk_wait_default`: the limiter's own default wait.
    WAIT_DEFAULT = -1.0
    # The status codes (`rk_status`).
    STATUS = {
      0 => :ok, 1 => :over_limit, 2 => :shed, 3 => :lease_lost, 4 => :invalid_argument,
      5 => :null_parameter, 6 => :invalid_utf8, 7 => :backend_unavailable, 8 => :timeout,
      9 => :panic, 10 => :unknown_error, 11 => :backend_rejected
    }.freeze
    OK = 0
    OVER_LIMIT = 1
    # `rk_failure_policy`.
    FAILURE_POLICIES = { fail_closed: 0, fail_open: 1, fallback: 2 }.freeze

    # `rk_lease`.
    class Lease < FFI::Struct
      layout :id_hi, :uint64, :id_lo, :uint64, :fencing_token, :uint64, :granted_at_us, :uint64
    end

    # `rk_settle_ticket`.
    class SettleTicket < FFI::Struct
      layout :settleable, :bool, :id, :uint64, :cost, :uint64, :charged_at_us, :uint64, :limiter, :uint64
    end

    # `rk_settle_seal`.
    class SettleSeal < FFI::Struct
      layout :hex, [:char, 65]
    end

    # `rk_decision`.
    class Decision < FFI::Struct
      layout :allowed, :bool, :limit, :uint64, :remaining, :uint64, :retry_after_us, :uint64,
             :reset_after_us, :uint64, :decided_at_us, :uint64, :has_lease, :bool, :lease, Lease,
             :settle, SettleTicket,
             :shadow_refused, :bool
    end

    # `rk_check_all_part`.
    class CheckAllPart < FFI::Struct
      layout :limiter, :pointer, :key, :pointer, :cost, :uint64
    end

    # `rk_window_limit`.
    class WindowLimit < FFI::Struct
      layout :limit, :uint64, :interval_secs, :double
    end

    # `rk_sliding_limit`.
    class SlidingLimit < FFI::Struct
      layout :duration_secs, :double, :limit, :uint64, :precision_secs, :double
    end

    # `rk_http_limit`.
    class HttpLimit < FFI::Struct
      layout :window_secs, :double, :limit, :uint64, :remaining, :uint64, :reset_after_secs, :double,
             :retry_after_secs, :double
    end

    # `rk_http_report`.
    class HttpReport < FFI::Struct
      layout :name, :pointer, :window_secs, :double, :allowed, :bool, :limit, :uint64, :remaining, :uint64,
             :reset_after_secs, :double, :retry_after_secs, :double, :limits, :pointer, :limits_len, :size_t
    end

    # Calls that may wait on the network or on a limit are attached with `blocking: true`:
    # ruby-ffi releases the global VM lock around them, so other Ruby threads (Sidekiq's
    # workers, Puma's) run while one waits.
    def self.call(name, args, ret, blocking: false)
      DECLARED[name] = [args, ret].freeze
      attach_function name, args, ret, blocking: blocking
    end

    # Each function as declared here (name => [parameter types, return type]): the gem's suite
    # holds them to include/ratekeeper.h (test/native_header_test.rb), as the struct layouts
    # above.
    DECLARED = {} # rubocop:disable Style/MutableConstant -- filled by `call` below

    call :rk_version, [], :string
    call :rk_status_name, [:uint32], :string
    call :rk_last_error_message, %i[pointer size_t pointer], :int
    call :rk_string_free, [:pointer], :void

    call :rk_backend_new_from_json, %i[string pointer], :int
    call :rk_backend_new_from_json_with_clock, %i[string pointer pointer], :int
    call :rk_backend_new_memory_with_clock, %i[pointer pointer], :int
    call :rk_backend_free, [:pointer], :void
    call :rk_backend_set_limit, %i[pointer string string string], :int, blocking: true
    call :rk_backend_clear_limit, %i[pointer string string], :int, blocking: true
    call :rk_backend_flush, [:pointer], :int, blocking: true
    call :rk_backend_limiters_json, %i[pointer pointer], :int, blocking: true
    call :rk_backend_metrics_json, %i[pointer bool pointer], :int, blocking: true
    call :rk_backend_prometheus, %i[pointer bool pointer], :int, blocking: true

    call :rk_manual_clock_new, %i[uint64 pointer], :int
    call :rk_manual_clock_advance, %i[pointer uint64], :int
    call :rk_manual_clock_now_us, %i[pointer pointer], :int
    call :rk_manual_clock_free, [:pointer], :void

    call :rk_limiter_new_concurrent, %i[pointer string uint64 double double pointer], :int
    call :rk_limiter_new_bucket, %i[pointer string uint64 double pointer], :int
    call :rk_limiter_new_window, %i[pointer string uint64 double pointer], :int
    call :rk_limiter_new_windows, %i[pointer string pointer size_t pointer], :int
    call :rk_parse_rate, %i[string pointer size_t pointer], :int
    call :rk_limiter_new_sliding_window, %i[pointer string pointer size_t pointer], :int
    call :rk_limiter_new_token_bucket, %i[pointer string double uint64 pointer], :int
    call :rk_limiter_new_leased, %i[pointer string double uint64 uint64 double pointer], :int
    call :rk_limiter_new_leaky, %i[pointer string uint64 double pointer], :int
    call :rk_limiter_new_points, %i[pointer string uint64 double pointer], :int
    call :rk_limiter_new_calendar, %i[pointer string uint64 string string uint32 pointer], :int
    call :rk_limiter_new_from_json, %i[pointer string string pointer], :int
    call :rk_limiter_new_unlimited, [:pointer], :int
    call :rk_limiter_spec_json, %i[pointer pointer size_t pointer], :int
    call :rk_limiter_with_allow_fallback, %i[pointer bool pointer], :int
    call :rk_limiter_free, [:pointer], :void
    call :rk_limiter_capacity, %i[pointer pointer], :int
    call :rk_limiter_refundable, %i[pointer pointer], :int
    call :rk_limiter_window, %i[pointer pointer], :int

    call :rk_limiter_check, [:pointer, :string, :uint64, Decision.by_ref], :int, blocking: true
    call :rk_limiter_peek, [:pointer, :string, Decision.by_ref], :int, blocking: true
    call :rk_limiter_acquire, [:pointer, :string, :uint64, :double, Decision.by_ref], :int, blocking: true
    call :rk_limiter_release, [:pointer, :string, Lease.by_ref], :int, blocking: true
    call :rk_backend_check_all, %i[pointer pointer size_t pointer pointer pointer], :int, blocking: true
    call :rk_backend_acquire_all, %i[pointer pointer size_t double pointer pointer pointer], :int, blocking: true
    call :rk_limiter_extend, [:pointer, :string, Lease.by_ref], :int, blocking: true
    call :rk_limiter_reset, %i[pointer string], :int, blocking: true
    call :rk_limiter_points_used, [:pointer, :string, :uint64, :uint64, Decision.by_ref], :int, blocking: true
    call :rk_limiter_settle, [:pointer, :string, Decision.by_ref, :uint64, Decision.by_ref], :int, blocking: true
    call :rk_limiter_seal_ticket, [:pointer, :string, Decision.by_ref, SettleSeal.by_ref], :int, blocking: true
    call :rk_limiter_settle_sealed, [:pointer, :string, Decision.by_ref, :uint64, :string, Decision.by_ref], :int,
         blocking: true
    call :rk_limiter_close, [:pointer], :int, blocking: true
    call :rk_limiter_pause, %i[pointer string double pointer], :int, blocking: true
    call :rk_limiter_observe, %i[pointer string uint32 pointer pointer size_t pointer], :int, blocking: true
    call :rk_limiter_resume, %i[pointer string pointer], :int, blocking: true
    call :rk_limiter_with_max_pause, %i[pointer double pointer], :int
    call :rk_limiter_block, %i[pointer string double pointer], :int, blocking: true
    call :rk_limiter_unblock, %i[pointer string pointer], :int, blocking: true
    call :rk_limiter_with_block_for, %i[pointer double pointer], :int
    call :rk_limiter_with_shadow, %i[pointer bool pointer], :int
    call :rk_limiter_with_deny_cache, %i[pointer bool pointer], :int

    call :rk_backoff_new, %i[double double uint32 uint64 pointer], :int
    call :rk_backoff_reschedule_in, %i[pointer uint32 uint64 pointer pointer], :int
    call :rk_backoff_free, [:pointer], :void

    call :rk_http_rules_new, %i[string pointer size_t string pointer size_t pointer], :int
    call :rk_http_rules_free, [:pointer], :void
    call :rk_http_rules_proxy_header, [:pointer], :string
    call :rk_http_rules_client_key, %i[pointer string string pointer size_t pointer], :int
    call :rk_http_rules_fields, %i[pointer pointer size_t string pointer size_t pointer], :int

    # The message of the last failed call on this thread (thread-local in the library; read on
    # the thread that made the call, right after it, which is where every caller reads it).
    def self.last_error_message
      len = FFI::MemoryPointer.new(:size_t)
      rk_last_error_message(nil, 0, len)
      n = len.read(:size_t)
      return "" if n.zero?

      buf = FFI::MemoryPointer.new(:char, n + 1)
      rk_last_error_message(buf, buf.size, len)
      buf.read_string(n).force_encoding(Encoding::UTF_8)
    end

    # Makes a handle through a `T **out` constructor, freed by `free` when Ruby collects it.
    def self.handle(free, rename = nil)
      out = FFI::MemoryPointer.new(:pointer)
      Ratekeeper.check_status!(yield(out), rename)
      FFI::AutoPointer.new(out.read_pointer, method(free))
    end

    # Reads a string a call writes the way `snprintf` does: the block makes the call with
    # (buf, len, out_n), once to measure and once to fill.
    def self.text
      len = FFI::MemoryPointer.new(:size_t)
      Ratekeeper.check_status!(yield(nil, 0, len))
      buf = FFI::MemoryPointer.new(:char, len.read(:size_t) + 1)
      Ratekeeper.check_status!(yield(buf, buf.size, len))
      buf.read_string(len.read(:size_t)).force_encoding(Encoding::UTF_8)
    end

    # Reads and frees a string the library returned through a `char **out`.
    def self.take_string(rename = nil)
      out = FFI::MemoryPointer.new(:pointer)
      Ratekeeper.check_status!(yield(out), rename)
      ptr = out.read_pointer
      begin
        ptr.read_string.force_encoding(Encoding::UTF_8)
      ensure
        rk_string_free(ptr)
      end
    end
  end
end
