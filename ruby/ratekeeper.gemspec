# frozen_string_literal: true

require_relative "lib/ratekeeper/version"

# A platform gem when the prebuilt library is in place (scripts/package copies it to
# lib/ratekeeper/native/libratekeeper.so): `gem build` then makes ratekeeper-VER-x86_64-linux.gem
# or ratekeeper-VER-aarch64-linux.gem, the platform of that library's machine, which installs with
# no Rust toolchain. Without it, a plain gem that loads RATEKEEPER_LIB or the system's
# libratekeeper (the C tarball).
Gem::Specification.new do |s|
  s.name = "ratekeeper"
  s.version = Ratekeeper::VERSION
  s.summary = "Distributed rate limiting shared with Python, Node and C through Redis, with Sidekiq Enterprise's limiter API"
  s.description = <<~TEXT
    Ruby binding (ruby-ffi) of libratekeeper: concurrent, bucket, window, leaky, points, token bucket,
    sliding window, calendar and leased limiters on memory, Redis or Redis Cluster, sharing limits with
    every process in any language; a Sidekiq server middleware that reschedules over-limit jobs, a
    Limits tab for Sidekiq's Web UI and a Rack middleware.
  TEXT
  s.authors = ["ratekeeper contributors"]
  s.licenses = ["MIT", "Apache-2.0"]
  s.required_ruby_version = ">= 3.1"
  s.files = Dir["lib/**/*.rb", "lib/**/*.erb"] + %w[README.md]
  native = "lib/ratekeeper/native/libratekeeper.so"
  if File.exist?(File.join(__dir__, native))
    s.files << native
    # e_machine, at byte 18 of an ELF header (little-endian): 0x3e x86-64, 0xb7 AArch64.
    machine = File.binread(File.join(__dir__, native), 2, 18).unpack1("v")
    cpu = { 0x3e => "x86_64", 0xb7 => "aarch64" }.fetch(machine) { raise "#{native}: unknown ELF machine #{machine}" }
    s.platform = Gem::Platform.new("#{cpu}-linux")
  end
  s.add_dependency "ffi", ">= 1.15", "< 2"
  s.metadata = { "rubygems_mfa_required" => "true" }
end
