# frozen_string_literal: true

# The Rack middleware: its options through Rack::MockRequest on a real Redis, and the example
# app (examples/ruby/config.ru) behind a real Puma (2 forked workers, threads) hit by several
# client processes at once.
require_relative "test_helper"
require_relative "support/puma_server"
require "rack"
require "rack/mock"
require "ratekeeper/rack"
require "open3"

class RackTest < Minitest::Test
  OK_APP = ->(_env) { [200, { "content-type" => "text/plain" }, ["ok"]] }

  def setup
    @backend = redis_backend
  end

  def app(limiter, inner = OK_APP, **options)
    ::Rack::MockRequest.new(Ratekeeper::Rack.new(inner, limiter: limiter, logger: Logger.new(File::NULL), **options))
  end

  def test_draft_11_headers_and_a_problem_json_refusal
    limiter = Ratekeeper::Limiter.window("api", 2, 60, backend: @backend)
    client = app(limiter)
    first = client.get("/", "REMOTE_ADDR" => "10.0.0.1")
    assert_equal 200, first.status
    assert_equal '"api";q=2;w=60', first.headers["RateLimit-Policy"]
    assert_equal '"api";r=1;t=60', first.headers["RateLimit"]
    client.get("/", "REMOTE_ADDR" => "10.0.0.1")
    refused = client.get("/", "REMOTE_ADDR" => "10.0.0.1")
    assert_equal 429, refused.status
    assert_equal "application/problem+json", refused.headers["content-type"]
    assert_operator Integer(refused.headers["Retry-After"]), :>=, 59
    body = JSON.parse(refused.body)
    assert_equal ["api"], body["violated-policies"]
    assert_equal Ratekeeper::Rack::QUOTA_EXCEEDED, body["type"]
    # Another client address has its own count.
    assert_equal 200, client.get("/", "REMOTE_ADDR" => "10.0.0.2").status
  end

  def test_older_header_forms_and_none
    limiter = Ratekeeper::Limiter.bucket("forms", 5, 60, backend: @backend)
    r = app(limiter, headers: "draft-7").get("/", "REMOTE_ADDR" => "10.0.0.1")
    assert_equal "limit=5, remaining=4, reset=#{r.headers['RateLimit'][/reset=(\d+)/, 1]}", r.headers["RateLimit"]
    assert_equal "5;w=60", r.headers["RateLimit-Policy"]
    r = app(limiter, headers: "draft-6").get("/", "REMOTE_ADDR" => "10.0.0.1")
    assert_equal "3", r.headers["RateLimit-Remaining"]
    r = app(limiter, headers: "legacy").get("/", "REMOTE_ADDR" => "10.0.0.1")
    assert_equal "2", r.headers["X-RateLimit-Remaining"]
    r = app(limiter, headers: nil).get("/", "REMOTE_ADDR" => "10.0.0.1")
    assert_nil r.headers["RateLimit"]
    assert_nil r.headers["X-RateLimit-Remaining"]
  end

  def test_key_cost_skip_and_on_refused
    limiter = Ratekeeper::Limiter.token_bucket("tb", 0.001, 10, backend: @backend)
    client = app(limiter, key: ->(env) { env["HTTP_X_API_KEY"] }, cost: ->(env) { env["PATH_INFO"] == "/big" ? 8 : 1 },
                          skip: ->(env) { env["PATH_INFO"] == "/health" },
                          on_refused: ->(_env, refusal) { [418, { "x-why" => refusal.reason }, ["no"]] })
    assert_equal 200, client.get("/big", "HTTP_X_API_KEY" => "a").status
    assert_equal 2, limiter.peek("a").remaining
    health = client.get("/health", "HTTP_X_API_KEY" => "a")
    assert_nil health.headers["RateLimit"]
    assert_equal 2, limiter.peek("a").remaining
    refused = client.get("/big", "HTTP_X_API_KEY" => "a")
    assert_equal [418, "quota-exceeded"], [refused.status, refused.headers["x-why"]]
    assert_equal 10, limiter.peek("b").remaining
  end

  def test_count_failures_refunds_successes_and_peek_then_charges
    failing = ->(env) { [env["PATH_INFO"] == "/fail" ? 401 : 200, {}, ["x"]] }
    tb = Ratekeeper::Limiter.token_bucket("login", 0.001, 3, backend: @backend)
    client = app(tb, failing, count: "failures")
    3.times { assert_equal 200, client.get("/ok", "REMOTE_ADDR" => "10.0.0.9").status }
    assert_equal 3, tb.peek("10.0.0.9").remaining, "successes were refunded"
    3.times { client.get("/fail", "REMOTE_ADDR" => "10.0.0.9") }
    assert_equal 429, client.get("/ok", "REMOTE_ADDR" => "10.0.0.9").status
    window = Ratekeeper::Limiter.window("login-w", 2, 60, backend: @backend)
    client = app(window, failing, count: "successes")
    client.get("/fail", "REMOTE_ADDR" => "10.0.0.9")
    assert_equal 2, window.peek("10.0.0.9").remaining, "a failure was not charged"
    client.get("/ok", "REMOTE_ADDR" => "10.0.0.9")
    assert_equal 1, window.peek("10.0.0.9").remaining
  end

  def test_shadow_never_refuses_and_counts
    limiter = Ratekeeper::Limiter.window("shadow", 1, 60, backend: @backend)
    middleware = Ratekeeper::Rack.new(OK_APP, limiter: limiter, shadow: true, logger: Logger.new(File::NULL))
    client = ::Rack::MockRequest.new(middleware)
    3.times { assert_equal 200, client.get("/", "REMOTE_ADDR" => "10.0.0.1").status }
    assert_equal 2, middleware.shadow_refused
  end

  # A limiter in shadow mode admits what it would refuse, consuming nothing: there is nothing to
  # give back, neither after the response (count: "failures" refunds a success) nor when a later
  # limiter refuses. As Python's and Node's middleware, which settle only what was consumed.
  def test_a_shadow_refusal_consumed_nothing_and_is_never_refunded
    bucket = Ratekeeper::Limiter.token_bucket("shadow-tb", 0.0001, 2, backend: @backend)
    bucket.check("10.0.0.1", cost: 2) # spent: the shadow copy would refuse
    middleware = Ratekeeper::Rack.new(OK_APP, limiter: bucket.with_shadow(true), count: "failures", logger: Logger.new(File::NULL))
    client = ::Rack::MockRequest.new(middleware)
    assert_equal 200, client.get("/", "REMOTE_ADDR" => "10.0.0.1").status
    assert_equal 0, bucket.peek("10.0.0.1").remaining, "a success under count: failures refunded a shadow refusal"
    assert_equal 1, middleware.shadow_refused, "a limiter's shadow refusal is counted, as the middleware's own"

    window = Ratekeeper::Limiter.window("shadow-w", 1, 60, backend: @backend)
    window.check("10.0.0.1")
    client = app([bucket.with_shadow(true), window])
    assert_equal 429, client.get("/", "REMOTE_ADDR" => "10.0.0.1").status
    assert_equal 0, bucket.peek("10.0.0.1").remaining, "a later refusal gave back a shadow refusal"
  end

  # Rack 3's Lint refuses upper-case response header names; every name the middleware writes is
  # lower case, on an admission, a refusal and a failed backend, in every header form.
  def test_response_header_names_are_lower_case_under_rack_lint
    names = [] # the names the middleware answers with (MockResponse adds its own Content-Length)
    lint = lambda do |inner, **options|
      middleware = Ratekeeper::Rack.new(inner, logger: Logger.new(File::NULL), **options)
      recorded = ->(env) { middleware.call(env).tap { |_status, headers, _body| names.concat(headers.keys) } }
      ::Rack::MockRequest.new(::Rack::Lint.new(recorded))
    end
    %w[draft-11 draft-7 draft-6 legacy].each do |form|
      client = lint.call(OK_APP, limiter: Ratekeeper::Limiter.window("lint-#{form}", 1, 60, backend: @backend), headers: form)
      assert_equal 200, client.get("/", "REMOTE_ADDR" => "10.0.0.1").status
      assert_equal 429, client.get("/", "REMOTE_ADDR" => "10.0.0.1").status
    end
    down = Ratekeeper::Backend.redis("redis://127.0.0.1:#{RedisServer.free_port}", deadline: 0.2)
    failed = lint.call(OK_APP, limiter: Ratekeeper::Limiter.window("lint-down", 1, 60, backend: down)).get("/", "REMOTE_ADDR" => "10.0.0.1")
    assert_equal 503, failed.status
    assert_includes names, "retry-after"
    assert_includes names, "ratelimit-policy"
    assert_equal [], names.uniq.reject { |name| name == name.downcase }, "upper-case response header names"
  end

  def test_client_address_ipv6_groups_and_trusted_proxies
    limiter = Ratekeeper::Limiter.window("addr", 1, 60, backend: @backend)
    client = app(limiter, trusted_proxies: ["10.1.0.0/16"])
    assert_equal 200, client.get("/", "REMOTE_ADDR" => "2001:db8:0:1::1").status
    assert_equal 429, client.get("/", "REMOTE_ADDR" => "2001:db8:0:2::1").status, "one /56"
    # Behind a trusted proxy the client is the right-most untrusted hop; a spoofed left entry is ignored.
    assert_equal 200, client.get("/", "REMOTE_ADDR" => "10.1.0.5", "HTTP_X_FORWARDED_FOR" => "1.1.1.1, 203.0.113.7").status
    assert_equal 429, client.get("/", "REMOTE_ADDR" => "10.1.0.5", "HTTP_X_FORWARDED_FOR" => "9.9.9.9, 203.0.113.7").status
    assert_equal 0, limiter.peek("203.0.113.7").remaining
    # An untrusted peer's header is not read.
    assert_equal 200, client.get("/", "REMOTE_ADDR" => "198.51.100.1", "HTTP_X_FORWARDED_FOR" => "203.0.113.8").status
    assert_equal 1, limiter.peek("203.0.113.8").remaining
    # Nor is a Forwarded header: only the proxy header (default X-Forwarded-For) is read.
    assert_equal 429, client.get("/", "REMOTE_ADDR" => "10.1.0.5", "HTTP_FORWARDED" => "for=198.51.100.77",
                                      "HTTP_X_FORWARDED_FOR" => "203.0.113.7").status
  end

  def test_proxy_header_forwarded_reads_forwarded_only
    limiter = Ratekeeper::Limiter.window("addr-fwd", 1, 60, backend: @backend)
    client = app(limiter, trusted_proxies: ["10.1.0.0/16"], proxy_header: "forwarded")
    via = ->(fields) { client.get("/", { "REMOTE_ADDR" => "10.1.0.5" }.merge(fields)).status }
    assert_equal 200, via.call("HTTP_FORWARDED" => 'for="[2001:db8:0:ab12::1]:4711";proto=https')
    assert_equal 429, via.call("HTTP_FORWARDED" => "for=9.9.9.9, for=2001:db8:0:abff::2, for=10.1.0.9"), "one /56, behind two proxies"
    assert_equal 200, via.call("HTTP_X_FORWARDED_FOR" => "4.4.4.4", "HTTP_FORWARDED" => "for=5.5.5.5")
    assert_equal 429, via.call("HTTP_X_FORWARDED_FOR" => "6.6.6.6", "HTTP_FORWARDED" => "for=5.5.5.5"), "X-Forwarded-For is not read"
    ["X-Forwarded-For", "Forwarded", "FORWARDED", :forwarded].each { |name| Ratekeeper::Rack.new(OK_APP, limiter: limiter, proxy_header: name) }
    [nil, "", "CF-Connecting-IP", :x_forwarded_for, ["Forwarded"]].each do |value|
      error = assert_raises(Ratekeeper::InvalidArgument, value.inspect) { Ratekeeper::Rack.new(OK_APP, limiter: limiter, proxy_header: value) }
      assert_equal "proxy_header", error.parameter
    end
  end

  # A proxy header is written by clients: bytes that are not UTF-8 in it must not fail the
  # request (Rack hands headers over as binary strings). Such a hop is not an address, so the
  # walk ends there and the request counts as the hop before it, as in Go and the core's cases.
  def test_a_proxy_header_with_bytes_that_are_not_utf8_counts_as_the_hop_before_it
    limiter = Ratekeeper::Limiter.window("addr-bytes", 1, 60, backend: @backend)
    client = app(limiter, trusted_proxies: ["10.1.0.0/16"])
    via = ->(header) { client.get("/", { "REMOTE_ADDR" => "10.1.0.5", "HTTP_X_FORWARDED_FOR" => header }).status }
    assert_equal 200, via.call("7.7.7.7, \xFF\xFE".b)
    assert_equal 429, via.call("9.9.9.9, \xC3".b), "both count as the proxy 10.1.0.5"
    assert_equal 200, via.call("8.8.8.8".b)
  end

  def test_a_failed_backend_answers_503_never_500
    down = Ratekeeper::Backend.redis("redis://127.0.0.1:#{RedisServer.free_port}", deadline: 0.2)
    r = app(Ratekeeper::Limiter.window("down", 1, 60, backend: down)).get("/", "REMOTE_ADDR" => "10.0.0.1")
    assert_equal 503, r.status
    assert_equal "1", r.headers["Retry-After"]
  end

  def test_bad_options_name_the_option
    limiter = Ratekeeper::Limiter.window("opts", 1, 60, backend: @backend)
    { limiter: [], cost: -1, count: "some", headers: "draft-99", shadow: "yes", key: "ip", trusted_proxies: ["nope"],
      proxy_header: "X-Real-IP" }.each do |option, value|
      error = assert_raises(Ratekeeper::InvalidArgument, option.to_s) do
        Ratekeeper::Rack.new(OK_APP, limiter: limiter, **{ option => value })
      end
      assert_equal option.to_s, error.parameter
    end
    concurrent = Ratekeeper::Limiter.concurrent("opts-c", 1, backend: @backend)
    assert_equal "count", assert_raises(Ratekeeper::InvalidArgument) { Ratekeeper::Rack.new(OK_APP, limiter: concurrent, count: "failures") }.parameter
  end

  PK_SECRET = "a-secret-of-at-least-16-bytes"

  # A draft-11 field parsed by a real Structured Fields parser (http-sfv, through RK_PYTHON, the
  # venv of scripts/test-python): [[name, params]], a byte sequence as its base64.
  def sf_list(field)
    python = ENV.fetch("RK_PYTHON") { flunk "RK_PYTHON (a Python with http-sfv) is required: run scripts/test-ruby" }
    out, err, status = Open3.capture3(python, "-c", <<~PY, field)
      import base64, json, sys, http_sfv
      parsed = http_sfv.List()
      parsed.parse(sys.argv[1].encode())
      show = lambda v: {"bytes": base64.b64encode(v).decode()} if isinstance(v, bytes) else v
      print(json.dumps([[str(m.value), {k: show(v) for k, v in m.params.items()}] for m in parsed]))
    PY
    assert status.success?, "http-sfv could not parse #{field.inspect}: #{err}"
    JSON.parse(out)
  end

  def test_partition_key_is_a_keyed_hash_of_the_key_as_in_python_and_node
    # The vectors py/tests/http/test_options.py and node/__test__/http-options.test.js pin:
    # the first 16 bytes of HMAC-SHA256(secret, key), base64.
    limiter = Ratekeeper::Limiter.window("pk", 5, 3600, backend: @backend)
    by_address = app(limiter, partition_key_secret: PK_SECRET)
    r = by_address.get("/", "REMOTE_ADDR" => "203.0.113.7")
    assert_equal [["pk", { "r" => 4, "t" => Integer(r.headers["RateLimit"][/t=(\d+)/, 1]), "pk" => { "bytes" => "gX8SmNME1631O1g30Jsyag==" } }]],
                 sf_list(r.headers["RateLimit"])
    refute_includes r.headers["RateLimit"], "203.0.113.7", "the raw key is never sent"
    assert_equal [["pk", { "q" => 5, "w" => 3600 }]], sf_list(r.headers["RateLimit-Policy"]), "the policy has no pk"
    assert_equal r.headers["RateLimit"], by_address.get("/", "REMOTE_ADDR" => "203.0.113.7").headers["RateLimit"].sub("r=3", "r=4"),
                 "one client, one partition"
    refute_equal r.headers["RateLimit"][/pk=[^,]*/], by_address.get("/", "REMOTE_ADDR" => "198.51.100.9").headers["RateLimit"][/pk=[^,]*/]
    # A refusal carries the same field.
    by_user = app(Ratekeeper::Limiter.window("pk-user", 1, 60, backend: @backend), key: ->(_env) { "user-42" },
                  partition_key_secret: PK_SECRET.b)
    by_user.get("/")
    refused = by_user.get("/")
    assert_equal 429, refused.status
    assert_equal({ "bytes" => "kkSzpvOQVe/EiDuWzJQTlg==" }, sf_list(refused.headers["RateLimit"]).dig(0, 1, "pk"))
    # Without a secret, no pk.
    assert_nil sf_list(app(limiter).get("/", "REMOTE_ADDR" => "10.0.0.1").headers["RateLimit"]).dig(0, 1, "pk")
  end

  def test_a_refused_partition_key_secret_is_never_shown
    limiter = Ratekeeper::Limiter.window("pk-opts", 1, 60, backend: @backend)
    [["fifteen-bytes!!", "draft-11"], [PK_SECRET, "draft-7"], [PK_SECRET, nil], [12_345, "draft-11"], [:a_secret_of_16_bytes, "draft-11"]].each do |secret, headers|
      error = assert_raises(Ratekeeper::InvalidArgument, [secret, headers].inspect) do
        Ratekeeper::Rack.new(OK_APP, limiter: limiter, partition_key_secret: secret, headers: headers)
      end
      assert_equal "partition_key_secret", error.parameter
      [error.message, error.inspect, error.full_message].each { |text| refute_includes text, secret.to_s }
    end
    middleware = Ratekeeper::Rack.new(OK_APP, limiter: limiter, partition_key_secret: PK_SECRET)
    refute_includes middleware.inspect, PK_SECRET, "the middleware does not show it either"
  end

  def test_the_example_behind_puma_with_client_processes
    redis = RedisServer.new
    limit = 40
    env = { "REDIS_URL" => redis.url, "API_LIMIT" => limit.to_s, "RATEKEEPER_PK_SECRET" => PK_SECRET }
    puma = PumaServer.new(File.join(REPO_ROOT, "examples/ruby/config.ru"), env, workers: 2, threads: "2:4")
    port = puma.port
    clients = 4.times.map do
      IO.popen([RbConfig.ruby, "-rnet/http", "-rjson", "-e", <<~RUBY])
        Net::HTTP.start("127.0.0.1", #{port}) do |http|
          responses = 25.times.map { http.get("/") }
          health = http.get("/health")
          puts JSON.generate(codes: responses.map(&:code).tally, health: [health.code, health["RateLimit"]],
                             fields: responses.map { |r| r["RateLimit"] }.uniq { |f| f[/pk=[^,;]*/] })
        end
      RUBY
    end
    reports = clients.map { |io| JSON.parse(io.read).tap { io.close } }
    assert(clients.all? { $?.success? })
    ok = reports.sum { |r| r["codes"].fetch("200", 0) }
    refused = reports.sum { |r| r["codes"].fetch("429", 0) }
    assert_equal limit, ok, "every client is 127.0.0.1: one limit, exactly #{limit} admitted across Puma's workers"
    assert_equal 100 - limit, refused
    assert(reports.all? { |r| r["health"] == ["200", nil] }, reports.inspect)
    # Every answer (admitted or refused, from either worker) carries the client's one partition
    # key: HMAC-SHA256 of its key under the secret, as Python's hmac computes it.
    fields = reports.flat_map { |r| r["fields"] }
    pks = fields.map { |f| sf_list(f).dig(0, 1, "pk", "bytes") }.uniq
    assert_equal [python_pk(PK_SECRET, "127.0.0.1")], pks, fields.inspect
  ensure
    puma&.stop(keep_log: !passed?)
    redis&.stop
  end

  # The pk of `key` by Python's hmac, an implementation apart from the gem's.
  def python_pk(secret, key)
    out, status = Open3.capture2(ENV.fetch("RK_PYTHON"), "-c", <<~PY, secret, key)
      import base64, hashlib, hmac, sys
      print(base64.b64encode(hmac.new(sys.argv[1].encode(), sys.argv[2].encode(), hashlib.sha256).digest()[:16]).decode())
    PY
    assert status.success?
    out.strip
  end
end
