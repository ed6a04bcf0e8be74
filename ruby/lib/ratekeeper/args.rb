# frozen_string_literal: true

module Ratekeeper
  # Ruby values to the C ABI's types. Only what C cannot be told is checked here (a Float
  # where C takes a uint64_t would be truncated, a NUL would cut a string short); every range
  # and every rule is the library's, so the messages are the same in every language.
  module Args
    U64_MAX = 2**64 - 1
    U32_MAX = 2**32 - 1
    # Sidekiq's interval symbols, in seconds.
    INTERVALS = { second: 1.0, minute: 60.0, hour: 3600.0, day: 86_400.0 }.freeze

    module_function

    # A whole number for a uint64_t parameter.
    def count(value, parameter, max = U64_MAX)
      Ratekeeper.invalid!(parameter, "must be a whole number, got #{value.inspect}") unless value.is_a?(Integer)
      Ratekeeper.invalid!(parameter, "must not be negative, got #{value}") if value.negative?
      Ratekeeper.invalid!(parameter, "must be at most #{max}, got #{value}") if value > max
      value
    end

    # Seconds for a double parameter: a number or one of :second, :minute, :hour, :day.
    def seconds(value, parameter)
      case value
      when Numeric then value.to_f
      when Symbol, String
        INTERVALS.fetch(value.to_sym) do
          Ratekeeper.invalid!(parameter, "must be seconds or one of :second, :minute, :hour, :day, got #{value.inspect}")
        end
      else Ratekeeper.invalid!(parameter, "must be a number of seconds, got #{value.inspect}")
      end
    end

    # The most rates one rate string may hold (`"25/5s; 300/minute"` is two).
    MAX_RATES = 16

    # A rate string as `limits` and slowapi write it (`"5/minute"`, `"100 per hour"`,
    # `"25/5s; 300/minute"`), parsed by the library: a filled Native::WindowLimit array and its
    # length. Errors name `parameter`.
    def rates(text, parameter)
      array = FFI::MemoryPointer.new(Native::WindowLimit, MAX_RATES)
      len = FFI::MemoryPointer.new(:size_t)
      status = Native.rk_parse_rate(string(text, parameter, allow_nil: false), array, MAX_RATES, len)
      Ratekeeper.check_status!(status, { "rate" => parameter })
      [array, len.read(:size_t)]
    end

    # A string for a `const char *` parameter (nil stays NULL). Bytes go as they are: invalid
    # UTF-8 is the library's to report. A Symbol is its name; nothing else is converted (a key of
    # 42 is a mistake in every language: pass "42").
    def string(value, parameter, allow_nil: true)
      return nil if value.nil? && allow_nil

      value = value.to_s if value.is_a?(Symbol)
      Ratekeeper.invalid!(parameter, "must be a String, got #{value.inspect}") unless value.is_a?(String)
      Ratekeeper.invalid!(parameter, "must not contain a NUL byte") if value.include?("\0")
      value
    end

    # A limiter name.
    def name(value) = string(value, "name", allow_nil: false)

    # A key (nil: the limiter's single shared key).
    def key(value) = string(value, "key")
  end
end
