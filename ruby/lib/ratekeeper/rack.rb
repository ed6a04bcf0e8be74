# frozen_string_literal: true

require "ratekeeper"
require "ratekeeper/http_rules"
require "json"
require "logger"
require "set"

module Ratekeeper
  # Rack middleware (Rails, Sinatra, Hanami, any Rack app) with the options and header forms of
  # the Python and Node HTTP middleware (docs/src/guides/http/index.md):
  #
  #   use Ratekeeper::Rack, limiter: Ratekeeper::Limiter.window("api", 100, :minute)
  #
  # Options (validated here, before any request: a bad one raises InvalidArgument naming it):
  #   limiter:         a Limiter, or an Array checked in order (a request passes when all do)
  #   key:             ->(env) { String }: the identity counted (default: the client address,
  #                    IPv6 grouped by /56; proxy headers only from `trusted_proxies`)
  #   trusted_proxies: an Array of addresses or CIDR ranges whose `proxy_header` is believed
  #   proxy_header:    the one header those proxies write the client's address into, and the
  #                    only one read: "X-Forwarded-For" (default: nginx, AWS ALB, Cloudflare) or
  #                    "Forwarded" (RFC 7239); the client is its right-most address that is not
  #                    a trusted proxy. Never a header the proxy passes through from the client.
  #   cost:            a whole number >= 1 and at most each limiter's capacity, or
  #                    ->(env) { Integer } (default 1)
  #   skip:            ->(env) { true }: not limited at all (no backend call, no header)
  #   count:           "all" (default), "failures" (status >= 400) or "successes"
  #   headers:         "draft-11" (default), "draft-7", "draft-6", "legacy", or nil / false
  #   on_refused:      ->(env, refusal) { [status, headers, body] } (default: 429 problem+json)
  #   shadow:          true: decide and send headers, log what would be refused, never refuse
  #   partition_key_secret: a String of at least 16 bytes (draft-11 only): each RateLimit member
  #                    carries `pk=:<base64>:`, the first 16 bytes of HMAC-SHA256 of the request's
  #                    key under the secret, never the key itself (the secret is never shown)
  #
  # Under Puma (threads and forked workers) and any other server one middleware instance is
  # shared: it keeps no per-request state of its own (the limiters are thread- and fork-safe).
  #
  # The rules every language's middleware shares (tests/http/cases.json) are the library's
  # (Ratekeeper::HttpRules): the client key, the header fields, the partition key, and each
  # limiter's capacity, refundability and window. What is here is Rack's glue and the order of
  # the calls.
  class Rack
    QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
    BACKEND_FAILURE_RETRY_AFTER = 1
    COUNTS = %w[all failures successes].freeze
    BACKEND_ERRORS = [BackendUnavailable, TimeoutError, BackendRejected].freeze

    # Why a request is refused and the response ratekeeper would answer with (`on_refused`
    # receives it): `reason` "quota-exceeded" (429) or "backend-failure" (503).
    Refusal = Struct.new(:status, :reason, :retry_after, :violated_policies, :headers, :body, keyword_init: true) do
      # The Rack response.
      def to_rack = [status, headers.merge("content-type" => "application/problem+json"), [body]]
    end

    Gate = Struct.new(:limiter, :name, :mode, :window) # :nodoc:
    Outcome = Struct.new(:gate, :decision) # :nodoc:

    # Requests shadow mode let through although a limiter refused them (this process).
    attr_reader :shadow_refused

    # The options, for the error naming an unknown one.
    OPTIONS = %i[limiter key trusted_proxies proxy_header cost skip count headers on_refused shadow logger
                 partition_key_secret].freeze

    # A missing `limiter:` or an unknown option raises InvalidArgument naming it, as every other
    # bad option does (and as Python and Node do), not Ruby's ArgumentError.
    def initialize(app, limiter: nil, key: nil, trusted_proxies: nil, proxy_header: "X-Forwarded-For", cost: 1, skip: nil,
                   count: "all", headers: "draft-11", on_refused: nil, shadow: false, logger: nil, partition_key_secret: nil,
                   **unknown)
      unless unknown.empty?
        Ratekeeper.invalid!(unknown.keys.first, "is not an option; the options are #{OPTIONS.join(', ')}")
      end
      Ratekeeper.invalid!("limiter", "is required: a Ratekeeper::Limiter or an Array of them") if limiter.nil?
      @app = app
      limiters = limiter.is_a?(Array) ? limiter : [limiter]
      if limiters.empty? || !limiters.all?(Limiter)
        Ratekeeper.invalid!("limiter", "must be a Ratekeeper::Limiter or a non-empty Array of them, got #{limiter.inspect}")
      end
      { key: key, skip: skip, on_refused: on_refused }.each do |name, value|
        Ratekeeper.invalid!(name, "must respond to call, got #{value.inspect}") unless value.nil? || value.respond_to?(:call)
      end
      fixed_cost(cost, limiters) unless cost.respond_to?(:call)
      count = count.to_s
      Ratekeeper.invalid!("count", "must be \"all\", \"failures\" or \"successes\", got #{count.inspect}") unless COUNTS.include?(count)
      headers = nil if headers == false
      unless headers.nil? || headers.is_a?(String) || headers.is_a?(Symbol)
        Ratekeeper.invalid!("headers", "must be \"draft-11\", \"draft-7\", \"draft-6\", \"legacy\" or nil, got #{headers.inspect}")
      end
      Ratekeeper.invalid!("shadow", "must be true or false, got #{shadow.inspect}") unless [true, false].include?(shadow)
      @rules = HttpRules.new(headers: headers&.to_s, trusted_proxies: trusted_list(trusted_proxies),
                             proxy_header: proxy_header_name(proxy_header), partition_key_secret: secret(partition_key_secret))
      # Rack servers join a field's lines by commas in the env (Puma, WEBrick): every line counts.
      @proxy_env = "HTTP_#{@rules.proxy_header.upcase.tr('-', '_')}"
      @gates = limiters.map { |one| gate(one, count) }
      @key = key
      @cost = cost
      @skip = skip
      @count = count
      @on_refused = on_refused
      @shadow = shadow
      @logger = logger || Logger.new($stderr, progname: "ratekeeper")
      @shadow_refused = 0
    end

    def call(env)
      return @app.call(env) if @skip&.call(env)

      key = @key ? @key.call(env) : client_key(env)
      cost = @cost.respond_to?(:call) ? @cost.call(env) : @cost
      outcomes, refusal = admit(key, cost)
      if refusal
        return @on_refused ? @on_refused.call(env, refusal) : refusal.to_rack
      end

      status, headers, body = @app.call(env)
      rate_headers(outcomes, key).each { |name, value| headers[name] = value }
      settle(outcomes, key, cost, status)
      [status, headers, body]
    rescue Exception # rubocop:disable Lint/RescueException -- the app raised: settle as a 500, re-raise
      settle(outcomes, key, cost, 500) if outcomes && !refusal && status.nil?
      raise
    end

    private

    # A fixed cost is a whole number >= 1 that each limiter can admit at least once: the core
    # would refuse a larger one on every request, so it is refused here, as Python and Node do.
    def fixed_cost(cost, limiters)
      unless cost.is_a?(Integer) && cost >= 1
        Ratekeeper.invalid!("cost", "must be a whole number >= 1 or respond to call, got #{cost.inspect}")
      end
      limiters.each do |one|
        most = one.capacity # an unlimited limiter's is the largest cost, 2^53
        next if cost <= most

        Ratekeeper.invalid!("cost", "#{cost} exceeds the capacity of #{one.name.inspect} (#{most}); no request could ever be admitted")
      end
    end

    def gate(limiter, count)
      kind = limiter.kind
      if kind == "concurrent" && count != "all"
        Ratekeeper.invalid!("count", "the concurrent limiter #{limiter.name.inspect} counts requests in flight; use count: \"all\"")
      end
      mode = count == "all" ? :check : (limiter.refundable? ? :refund : :peek)
      Gate.new(limiter, limiter.name, mode, limiter.window)
    end

    # Names whose backend is failing closed now (each outage is logged once).
    def failing = (@failing ||= Set.new)

    def admit(key, cost)
      outcomes = []
      refusing = []
      shadowed = []
      @gates.each do |g|
        decision = g.mode == :peek ? g.limiter.peek(key) : g.limiter.check(key, cost: cost)
        failing.delete(g.name)
        outcomes << Outcome.new(g, decision)
        refusing << outcomes.last unless decision.allowed?
        shadowed << outcomes.last if decision.shadow_refused?
        break if refusing.any? && !@shadow
      rescue *BACKEND_ERRORS => e
        # Why is said once per outage; the limiter's metrics count each failure (`errors`).
        if failing.add?(g.name)
          @logger.warn("#{g.name.inspect} failed closed, answering 503 until its backend answers " \
                       "(each failure counts in the limiter's metrics errors): #{e.message}")
        end
        next if @shadow

        give_back(outcomes, key, cost)
        return [[], backend_failure]
      end
      if refusing.empty? || @shadow
        # One rule for both shadow modes (this option's, a limiter's): a request let through
        # although a limit refused it.
        unless (refusing + shadowed).empty?
          @shadow_refused += 1
          @logger.info("shadow mode let through a request refused by #{(refusing + shadowed).map { |o| o.gate.name }.join(', ')}")
        end
        return [outcomes, nil]
      end
      give_back(outcomes, key, cost)
      [outcomes, refusal(refusing, rate_headers(outcomes, key))]
    end

    # Whether the call behind `decision` took something a settle may give back: an admission.
    # A refusal, enforced or shadow (a limiter in shadow mode admits it, consuming nothing), took
    # nothing.
    def consumed?(decision) = decision.allowed? && !decision.shadow_refused?

    # Undoes what the limiters before a refusal took, where the kind can.
    def give_back(outcomes, key, cost)
      outcomes.each do |o|
        next unless consumed?(o.decision)

        if o.decision.lease
          o.gate.limiter.release(o.decision.lease, key: key)
        elsif o.gate.mode != :peek && o.gate.limiter.refundable? && cost.positive?
          o.gate.limiter.points_used(cost, 0, key: key)
        end
      rescue *BACKEND_ERRORS, LeaseLost => e
        @logger.warn("could not give back #{o.gate.name}: #{e.message}")
      end
    end

    # After the response: charge, refund or release as `count` says.
    def settle(outcomes, key, cost, status)
      counted = @count == "all" || ((status.to_i >= 400) == (@count == "failures"))
      outcomes.each do |o|
        next unless consumed?(o.decision)

        if o.decision.lease
          o.gate.limiter.release(o.decision.lease, key: key)
        elsif o.gate.mode == :refund && !counted
          o.gate.limiter.points_used(cost, 0, key: key)
        elsif o.gate.mode == :peek && counted
          o.gate.limiter.check(key, cost: cost)
        end
      rescue *BACKEND_ERRORS, LeaseLost => e
        @logger.warn("could not settle #{o.gate.name} after the response: #{e.message}")
      end
    end

    def ceil(seconds) = [0, (seconds - 1e-9).ceil].max

    # The rate-limit fields of the decisions (the library's rules), with Rack 3's lower-case names.
    def rate_headers(outcomes, key)
      @rules.fields(outcomes.map { |o| [o.gate.name, o.gate.window, o.decision] }, key).to_h { |name, value| [name.downcase, value] }
    end

    def problem(type, title, status, detail, policies)
      doc = { "type" => type, "title" => title, "status" => status, "detail" => detail }
      doc["violated-policies"] = policies if policies
      JSON.generate(doc)
    end

    def refusal(refusing, rate_headers)
      names = refusing.map { |o| o.gate.name }
      retry_after = [1, ceil(refusing.map { |o| o.decision.retry_after }.max || 1.0)].max
      Refusal.new(status: 429, reason: "quota-exceeded", retry_after: retry_after, violated_policies: names,
                  headers: { "retry-after" => retry_after.to_s }.merge(rate_headers),
                  body: problem(QUOTA_EXCEEDED, "Too Many Requests", 429, "Rate limit exceeded; retry in #{retry_after} s.", names))
    end

    def backend_failure
      Refusal.new(status: 503, reason: "backend-failure", retry_after: BACKEND_FAILURE_RETRY_AFTER, violated_policies: [],
                  headers: { "retry-after" => BACKEND_FAILURE_RETRY_AFTER.to_s },
                  body: problem("about:blank", "Service Unavailable", 503, "The rate limiter's backend is unavailable.", nil))
    end

    # ---- options the library validates (their Ruby types are checked here, to name them) ----

    # One String is not taken as a list of one: Python and Node refuse it, so one configuration
    # means the same in every language.
    def trusted_list(trusted)
      return [] if trusted.nil?

      unless trusted.is_a?(Array)
        Ratekeeper.invalid!("trusted_proxies", "must be an Array of IP addresses or CIDR ranges, got #{trusted.inspect}")
      end
      trusted.each do |item|
        Ratekeeper.invalid!("trusted_proxies", "must be IP addresses or CIDR ranges, got #{item.inspect}") unless item.is_a?(String)
      end
    end

    def proxy_header_name(name)
      return name.to_s if name.is_a?(String) || name.is_a?(Symbol)

      Ratekeeper.invalid!("proxy_header", "must be \"X-Forwarded-For\" or \"Forwarded\" (the header your proxy sets), got #{name.inspect}")
    end

    def secret(value)
      return nil if value.nil?
      return value.b if value.is_a?(String)

      Ratekeeper.invalid!("partition_key_secret", "must be a String, got a #{value.class}")
    end

    # The default key: the client address, IPv6 grouped by /56; the proxy header (and no other)
    # only when the peer is trusted, then the right-most address of its chain that is not a
    # trusted proxy.
    def client_key(env) = @rules.client_key(env["REMOTE_ADDR"], env[@proxy_env])
  end
end
