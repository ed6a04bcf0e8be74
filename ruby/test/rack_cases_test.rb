# frozen_string_literal: true

# The shared HTTP rules (tests/http/cases.json) through the Rack middleware: the key a request
# is counted under (its Rack env: REMOTE_ADDR and the HTTP_* headers), the rate-limit header
# fields (Ratekeeper::HttpRules, which the middleware asks), what `count` charges and refunds,
# and the limiter facts the middleware asks. Python (py/tests/http/test_cases.py), Node
# (node/__test__/http-cases.test.js) and the core (core/tests/http.rs) run the same table.
require_relative "test_helper"
require "json"
require "logger"
require "ratekeeper/rack"

class RackCasesTest < Minitest::Test
  TABLE = JSON.parse(File.read(File.join(REPO_ROOT, "tests/http/cases.json")))
  START_US = 1_700_000_000_000_000
  # A decision as the table gives it (seconds), and one limit of a multi-limit decision.
  Reported = Struct.new(:allowed, :limit, :remaining, :reset_after, :retry_after, :limits, keyword_init: true) do
    alias_method :allowed?, :allowed
  end
  ReportedLimit = Struct.new(:window, :limit, :remaining, :reset_after, :retry_after, keyword_init: true)

  def self.test_name(kind, name) = "test_#{kind}_#{name.gsub(/[^A-Za-z0-9]+/, '_')}"

  def middleware(limiter, status: 200, **options)
    Ratekeeper::Rack.new(->(_env) { [status, {}, []] }, limiter: limiter, logger: Logger.new(File::NULL), **options)
  end

  TABLE.fetch("client_key").each do |c|
    define_method(test_name("client_key", c["name"])) do
      limiter = Ratekeeper::Limiter.window("keys", 5, 60, backend: Ratekeeper::Backend.memory)
      options = { trusted_proxies: c["trusted_proxies"] }
      options[:proxy_header] = c["proxy_header"] if c.key?("proxy_header")
      env = c["headers"].to_h { |name, value| ["HTTP_#{name.upcase.tr('-', '_')}", value] }
      env["REMOTE_ADDR"] = c["peer"] if c["peer"]
      status, = middleware(limiter, **options).call(env)
      assert_equal 200, status
      assert_equal 4, limiter.peek(c["key"]).remaining, "counted under #{c['key']}"
    end
  end

  TABLE.fetch("fields").each do |c|
    define_method(test_name("fields", c["name"])) do
      rules = Ratekeeper::HttpRules.new(headers: c["headers"], trusted_proxies: [], proxy_header: "X-Forwarded-For",
                                        partition_key_secret: c["partition_key_secret"])
      reports = c["reports"].map do |r|
        limits = r["limits"]&.map { |l| ReportedLimit.new(**l.transform_keys(&:to_sym)) }
        [r["name"], r["window"], Reported.new(**r.slice("allowed", "limit", "remaining", "reset_after", "retry_after").transform_keys(&:to_sym), limits: limits)]
      end
      assert_equal c["fields"], rules.fields(reports, c["key"])
    end
  end

  TABLE.fetch("count").each do |c|
    define_method(test_name("count", c["name"])) do
      backend = Ratekeeper::Backend.memory(clock: Ratekeeper::ManualClock.new(START_US))
      limiter = Ratekeeper::Limiter.from_spec("count", c["limiter"], backend: backend)
      status, = middleware(limiter, status: c["status"], count: c["count"], cost: c["cost"]).call("REMOTE_ADDR" => "203.0.113.7")
      assert_equal c["status"], status
      assert_equal c["remaining"], limiter.peek("203.0.113.7").remaining
    end
  end

  TABLE.fetch("limiters").each do |c|
    define_method(test_name("limiter_facts", c["limiter"].values.join("_"))) do
      limiter = Ratekeeper::Limiter.from_spec("facts", c["limiter"], backend: Ratekeeper::Backend.memory)
      assert_equal [c["capacity"], c["refundable"], c["window"]], [limiter.capacity, limiter.refundable?, limiter.window]
    end
  end
end
