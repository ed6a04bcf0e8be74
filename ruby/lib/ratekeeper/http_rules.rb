# frozen_string_literal: true

require "json"

module Ratekeeper
  # The rules every HTTP middleware applies the same way, from the library (`rk_http_rules`):
  # the client key, the rate-limit header fields and draft-11's partition key, validated once.
  # Ratekeeper::Rack holds one; tests/http/cases.json is what they must answer.
  class HttpRules
    # `headers`: "draft-11", "draft-7", "draft-6", "legacy" or nil; `trusted_proxies`: an Array
    # of address or CIDR Strings; `proxy_header`: "X-Forwarded-For" or "Forwarded" (any case);
    # `partition_key_secret`: a String of at least 16 bytes, or nil. Raises InvalidArgument
    # naming the bad one (never showing the secret).
    def initialize(headers:, trusted_proxies:, proxy_header:, partition_key_secret:)
      entries = trusted_proxies.map { |entry| FFI::MemoryPointer.from_string(entry) }
      list = FFI::MemoryPointer.new(:pointer, [entries.size, 1].max)
      list.write_array_of_pointer(entries) unless entries.empty?
      secret = partition_key_secret && FFI::MemoryPointer.from_string(partition_key_secret)
      @ptr = Native.handle(:rk_http_rules_free) do |out|
        Native.rk_http_rules_new(headers, list, entries.size, proxy_header, secret, partition_key_secret&.bytesize || 0, out)
      end
      @proxy_header = Native.rk_http_rules_proxy_header(@ptr)
    end

    # The header the trusted proxies set, in lower case ("x-forwarded-for" or "forwarded").
    attr_reader :proxy_header

    def inspect = "#<Ratekeeper::HttpRules #{@proxy_header}>"

    # The key of a request from `peer` (nil: "unknown"); `proxy_header_value` is the proxy
    # header's lines joined by commas, read only when the peer is a trusted proxy.
    def client_key(peer, proxy_header_value)
      # Clients write the proxy header, and Rack hands it over as bytes: bytes that are not UTF-8
      # become U+FFFD (the core then reads that hop as no address) instead of failing the request.
      # (An ASCII header, nearly every one, is passed as it is: no copy per request.)
      unless proxy_header_value.nil? || proxy_header_value.ascii_only?
        proxy_header_value = proxy_header_value.dup.force_encoding(Encoding::UTF_8).scrub
      end
      Native.text { |buf, len, out_n| Native.rk_http_rules_client_key(@ptr, peer, proxy_header_value, buf, len, out_n) }
    end

    # The rate-limit header fields, as [name, value] pairs, of `reports`: [policy name, the
    # limiter's window in seconds or nil, its decision] in order (a decision answers `allowed?`,
    # `limit`, `remaining`, `reset_after` and `retry_after`, and `limits` when it has several:
    # each answering `window`, `limit`, `remaining`, `reset_after`, `retry_after`); `key` is the
    # request's (draft-11's `pk`).
    def fields(reports, key)
      keep = [] # the memory the structs point to, alive until the call returns
      natives = FFI::MemoryPointer.new(Native::HttpReport, [reports.size, 1].max)
      reports.each_with_index do |(name, window, decision), i|
        r = Native::HttpReport.new(natives + (i * Native::HttpReport.size))
        keep << (r[:name] = FFI::MemoryPointer.from_string(name))
        r[:window_secs] = window || 0.0
        r[:allowed] = decision.allowed?
        r[:limit] = decision.limit
        r[:remaining] = decision.remaining
        r[:reset_after_secs] = decision.reset_after
        r[:retry_after_secs] = decision.retry_after
        limits = decision.respond_to?(:limits) ? decision.limits.to_a : []
        keep << (r[:limits] = limits_of(limits)) unless limits.empty?
        r[:limits_len] = limits.size
      end
      json = Native.text { |buf, len, out_n| Native.rk_http_rules_fields(@ptr, natives, reports.size, key, buf, len, out_n) }
      keep.clear
      JSON.parse(json)
    end

    private

    def limits_of(limits)
      natives = FFI::MemoryPointer.new(Native::HttpLimit, limits.size)
      limits.each_with_index do |l, i|
        n = Native::HttpLimit.new(natives + (i * Native::HttpLimit.size))
        n[:window_secs] = l.window
        n[:limit] = l.limit
        n[:remaining] = l.remaining
        n[:reset_after_secs] = l.reset_after
        n[:retry_after_secs] = l.retry_after
      end
      natives
    end
  end
end
