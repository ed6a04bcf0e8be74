# The C ABI's value types (include/ratekeeper.h) as ruby-ffi structs, shared by the Ruby tests.
require "ffi"

module RkTypes
  # `rk_lease`.
  class Lease < FFI::Struct
    layout :id_hi, :uint64, :id_lo, :uint64, :fencing_token, :uint64, :granted_at_us, :uint64
  end

  # `rk_decision`.
  class Decision < FFI::Struct
    layout :allowed, :bool, :limit, :uint64, :remaining, :uint64, :retry_after_us, :uint64,
           :reset_after_us, :uint64, :decided_at_us, :uint64, :has_lease, :bool, :lease, Lease
  end
end
