# frozen_string_literal: true

# ratekeeper: distributed rate limiting shared with Python, Node, C and Rust processes through
# Redis, with Sidekiq Enterprise's limiter API. The gem is a thin ruby-ffi binding of
# libratekeeper: every limiter's logic is the library's.
require_relative "ratekeeper/version"
require_relative "ratekeeper/native"
require_relative "ratekeeper/errors"
require_relative "ratekeeper/args"
require_relative "ratekeeper/decision"
require_relative "ratekeeper/backend"
require_relative "ratekeeper/configuration"
require_relative "ratekeeper/limiter"

module Ratekeeper
  # The version of the C library loaded.
  def self.library_version = Native.rk_version

  # The registry lists a process's limiters under the language its first backend named, so the
  # gem names Ruby at once, before any backend (a ManualClock one has no name to give) is made.
  Backend.send(:from_config, { kind: "memory", max_keys: 1 }, :memory)
end
