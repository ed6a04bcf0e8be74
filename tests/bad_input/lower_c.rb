# Lowers the shared bad-input table (tests/bad_input/cases.json) to the C calls that express
# each case, one line per case, for tests/bad_input/run_c.c (which has no JSON parser):
#
#   case <TAB> name <TAB> call <TAB> expected status <TAB> parameter <TAB> argument tokens...
#   skip <TAB> name <TAB> why C cannot express it
#
# Tokens, in the C function's argument order: `s:<hex bytes>` a string, `N` NULL, `u:<n>` an
# unsigned integer, `d:<n>` a double (`nan`, `inf`, `-inf` included); arrays are a `u:<length>`
# token followed by their elements. A `check_all` part is four tokens: its limiter's spec (JSON
# text), its key, its cost and `u:1` when its limiter is built on another backend (else `u:0`). Durations are seconds, as in the table and the C API, except
# `rk_manual_clock_advance` and `rk_backoff_reschedule_in`, which take microseconds.
#
# What C cannot express (a string where C takes a uint64_t, -1 for an unsigned parameter, an
# option C does not have) is a `skip` line saying why, never a guess. A Redis backend option
# rk_backend_new_redis has no parameter for (connect_timeout, TLS material) goes through
# rk_backend_new_from_json instead: call `backend_json`, one string token, the configuration.
# An `http_middleware` case is call `http_rules` (rk_http_rules_new) when its bad option is one
# the library validates (header form, trusted proxies, proxy header, partition key secret).
#
# Usage: ruby tests/bad_input/lower_c.rb [tests/bad_input/cases.json] | run_c
require "json"

class NotExpressible < StandardError; end

STATUS = {
  "invalid_argument" => "RK_INVALID_ARGUMENT",
  "null_parameter" => "RK_NULL_PARAMETER",
  "invalid_utf8" => "RK_INVALID_UTF8",
}.freeze
U64_MAX = 2**64 - 1
U32_MAX = 2**32 - 1
POLICIES = { "fail_closed" => 0, "fail_open" => 1, "fallback" => 2 }.freeze

# The table's special values (its `conventions.values`); a lone surrogate becomes its WTF-8
# bytes, which are not UTF-8.
def value(v)
  case v
  when Hash
    return { "NaN" => Float::NAN, "Infinity" => Float::INFINITY, "-Infinity" => -Float::INFINITY }.fetch(v["number"]) if v.key?("number")
    return v["repeat"] * v["times"] if v.key?("repeat")
    return (v["lone_surrogate"].b + "\xED\xA0\x80".b) if v.key?("lone_surrogate")
    v.transform_values { |x| value(x) }
  when Array then v.map { |x| value(x) }
  else v
  end
end

def str(v, param)
  return "N" if v.nil?
  raise NotExpressible, "C's `#{param}` is a char*: #{v.inspect} cannot be passed" unless v.is_a?(String)
  "s:#{v.unpack1('H*')}"
end

def unsigned(v, param, max, type)
  unless v.is_a?(Integer) && v >= 0 && v <= max
    raise NotExpressible, "C's `#{param}` is a #{type}: #{v.inspect} cannot be passed"
  end
  "u:#{v}"
end

def u64(v, param) = unsigned(v, param, U64_MAX, "uint64_t")
def u32(v, param) = unsigned(v, param, U32_MAX, "uint32_t")

def dbl(v, param)
  raise NotExpressible, "C's `#{param}` is a double: #{v.inspect} cannot be passed" unless v.is_a?(Numeric)
  f = v.to_f
  return "d:nan" if f.nan?
  return "d:#{f.positive? ? '' : '-'}inf" if f.infinite?
  "d:#{format('%.17g', f)}"
end

def list(v, param)
  raise NotExpressible, "C's `#{param}` is an array: #{v.inspect} cannot be passed" unless v.is_a?(Array)
  ["u:#{v.size}"]
end

POSITIONAL_REDIS = %w[url seeds prefix failure_policy fallback_divisor deadline].freeze

# The call and tokens of a `redis` or `cluster` case whose options only rk_backend_new_from_json
# takes, and of every `sentinel` case (its `sentinels` and `service` in the `sentinel` object).
def backend_json(a, kind = "redis")
  if kind == "sentinel"
    place = { "addresses" => a["sentinels"], "service" => a["service"] }
    place["db"] = a["db"] if a.key?("db")
    a = a.reject { |k, _| %w[sentinels service db].include?(k) }.merge("sentinel" => place)
  end
  json = JSON.generate({ "kind" => kind }.merge(a))
rescue JSON::GeneratorError => e
  raise NotExpressible, "the configuration is not JSON text (#{e.message})"
else
  ["backend_json", ["s:#{json.unpack1('H*')}"]]
end

def redis_tail(a)
  (a.keys - %w[url seeds prefix failure_policy fallback_divisor deadline]).each do |k|
    raise NotExpressible, "rk_backend_new_redis has no `#{k}`"
  end
  policy = a.fetch("failure_policy", 0)
  policy = POLICIES.fetch(policy) { raise NotExpressible, "C's failure policy is an enum: #{policy.inspect}" } if policy.is_a?(String)
  [str(a["prefix"], "prefix"), u32(policy, "failure_policy"), u32(a.fetch("fallback_divisor", 0), "fallback_divisor"),
   dbl(a.fetch("deadline", 0), "deadline_secs")]
end

def spec_json(spec) = "s:#{JSON.generate(spec).unpack1('H*')}"

# The options of an HTTP middleware C's rk_http_rules_new takes (the rest are the middleware's,
# in the language it is written in); their Node names, as the table spells them.
HTTP_RULES_OPTIONS = %w[standardHeaders trustedProxies proxyHeader partitionKeySecret].freeze

# rk_http_rules_new's tokens: header form, trusted proxies, proxy header, secret.
def http_rules(options)
  other = options.keys - HTTP_RULES_OPTIONS - ["limiter"]
  raise NotExpressible, "C's rk_http_rules_new has no option #{other.first} (a middleware's, over the C API)" unless other.empty?
  unless options.keys.intersect?(HTTP_RULES_OPTIONS)
    raise NotExpressible, "C's rk_http_rules_new takes no limiter: the middleware over the C API checks its own"
  end
  if options.key?("proxyHeader") && options["proxyHeader"].nil?
    raise NotExpressible, "C's `proxy_header` NULL is the default, X-Forwarded-For (null is no string elsewhere)"
  end
  trusted = options.fetch("trustedProxies", [])
  [str(options.fetch("standardHeaders", "draft-11"), "headers"), *list(trusted, "trusted_proxies"),
   *trusted.map { |t| str(t, "trusted_proxies") }, str(options.fetch("proxyHeader", "X-Forwarded-For"), "proxy_header"),
   str(options["partitionKeySecret"], "partition_key_secret")]
end

# The argument tokens of a case's C call.
def tokens(call, a, c)
  case call
  when "memory" then [u64(a["max_keys"], "max_keys")]
  when "redis" then [str(a["url"], "url"), *redis_tail(a)]
  when "cluster"
    seeds = a["seeds"]
    [*list(seeds, "seeds"), *seeds.map { |s| str(s, "seeds") }, *redis_tail(a)]
  when "bucket", "window" then [str(a["name"], "name"), u64(a["limit"], "limit"), dbl(a["interval"], "interval_secs")]
  when "windows"
    w = a["windows"]
    [str(a["name"], "name"), *list(w, "windows"), *w.flat_map do |x|
      raise NotExpressible, "an rk_window_limit has two fields, the table gives #{x.inspect}" unless x.is_a?(Array) && x.size == 2
      [u64(x[0], "limit"), dbl(x[1], "interval_secs")]
    end]
  when "sliding_window"
    l = a["limits"]
    [str(a["name"], "name"), *list(l, "limits"), *l.flat_map do |x|
      raise NotExpressible, "an rk_sliding_limit has three fields, the table gives #{x.inspect}" unless x.is_a?(Array) && [2, 3].include?(x.size)
      [dbl(x[0], "duration_secs"), u64(x[1], "limit"), dbl(x.fetch(2, 0), "precision_secs")]
    end]
  when "token_bucket" then [str(a["name"], "name"), dbl(a["rate"], "rate"), u64(a["capacity"], "capacity")]
  when "leaky" then [str(a["name"], "name"), u64(a["size"], "size"), dbl(a["drain"], "drain_secs")]
  when "points" then [str(a["name"], "name"), u64(a["capacity"], "capacity"), dbl(a["refill"], "refill_secs")]
  when "concurrent"
    raise NotExpressible, "rk_limiter_new_concurrent has no allow_fallback (rk_limiter_with_allow_fallback takes a bool)" if a.key?("allow_fallback")
    [str(a["name"], "name"), u64(a["limit"], "limit"), dbl(a.fetch("lock_timeout", 30), "lock_timeout_secs"),
     dbl(a.fetch("wait_timeout", 5), "wait_timeout_secs")]
  when "calendar"
    [str(a["name"], "name"), u64(a["limit"], "limit"), str(a["period"], "period"), str(a["tz"], "tz"), u32(a.fetch("anchor", 0), "anchor")]
  when "limiter"
    spec = a["spec"]
    [str(a["name"], "name"), spec.is_a?(String) ? str(spec, "json") : spec_json(spec)]
  when "set_limit"
    spec = a["spec"]
    [str(a["name"], "name"), spec.is_a?(Hash) ? spec_json(spec) : str(spec, "spec_json"), str(a["key"], "key")]
  when "clear_limit" then [str(a["name"], "name"), str(a["key"], "key")]
  when "backoff"
    [dbl(a.fetch("base", 300), "base"), dbl(a.fetch("jitter", 300), "jitter"), u32(a.fetch("max_reschedules", 20), "max_reschedules")]
  when "reschedule_in"
    retry_after = a.fetch("retry_after", 0)
    raise NotExpressible, "C's `retry_after_us` is a uint64_t: #{retry_after.inspect} s cannot be passed" unless retry_after.is_a?(Numeric) && retry_after >= 0
    [u32(a["attempt"], "attempt"), u64((retry_after * 1_000_000).round, "retry_after_us")]
  when "check_all"
    parts = a["parts"]
    [*list(parts, "parts"), *parts.each_with_index.flat_map do |p, i|
      # A part: its limiter's spec, its key, its cost, and whether its limiter is built on
      # another backend than the call's.
      [spec_json(p.fetch("limiter")), str(p["key"], "parts[#{i}].key"), u64(p.fetch("cost", 1), "parts[#{i}].cost"),
       "u:#{p["other_backend"] ? 1 : 0}"]
    end]
  when "manual_clock" then [u64(a["start_us"], "start_us")]
  when "http_middleware" then http_rules(a["options"])
  when "advance"
    s = a["seconds"]
    raise NotExpressible, "C's `us` is a uint64_t: #{s.inspect} s cannot be passed" unless s.is_a?(Numeric) && s.finite? && s >= 0
    [u64((s * 1_000_000).round, "us")]
  else limiter_tokens(call, a, c)
  end
end

def limiter_tokens(call, a, c)
  key = str(a["key"], "key")
  spec = spec_json(c.fetch("limiter"))
  case call
  when "check" then [spec, key, u64(a.fetch("cost", 1), "cost")]
  when "peek", "reset" then [spec, key]
  when "acquire" then [spec, key, u64(a.fetch("cost", 1), "cost"), dbl(a.fetch("wait_timeout", -1), "wait_timeout_secs")]
  when "points_used" then [spec, key, u64(a["estimate"], "estimate"), u64(a["actual"], "actual")]
  when "settle"
    d = a["decision"]
    raise NotExpressible, "rk_limiter_settle takes a const rk_decision *: #{d.inspect} cannot be passed" unless d.nil? || d.is_a?(String)
    [spec, key, str(d, "decision"), u64(a["actual"], "actual")]
  when "pause" then [spec, key, dbl(a["duration"], "duration_secs")]
  when "resume" then [spec, key]
  when "with_max_pause" then [spec, key, dbl(a["max_pause"], "max_pause_secs")]
  when "block" then [spec, key, dbl(a["duration"], "duration_secs")]
  when "unblock" then [spec, key]
  when "with_block_for" then [spec, key, dbl(a["block_for"], "block_for_secs")]
  when "with_deny_cache" then raise NotExpressible, "C's `on` is a bool: #{a['on'].inspect} cannot be passed"
  when "observe"
    raise NotExpressible, "rk_limiter_observe has no max_pause (C bounds pauses per limiter)" if a.key?("max_pause")
    h = a["headers"]
    [spec, key, u32(a["status"], "status"), *list(h, "headers"), *h.flat_map { |n, v| [str(n, "header_names"), str(v, "header_values")] }]
  else raise NotExpressible, "C has no #{call}"
  end
end

path = ARGV[0] || File.join(__dir__, "cases.json")
JSON.parse(File.read(path))["cases"].each do |c|
  name = c["name"].tr("\t\n", "  ")
  begin
    raise NotExpressible, c["skip"]["c"] if c.dig("skip", "c")
    a = c.fetch("args_c", c["args"]).transform_values { |v| value(v) }
    status = STATUS.fetch(c.fetch("c_error", c["error"]))
    call, toks =
      if %w[redis cluster].include?(c["call"]) && !(a.keys - POSITIONAL_REDIS).empty?
        backend_json(a, c["call"])
      elsif c["call"] == "sentinel"
        backend_json(a, "sentinel")
      elsif a.key?("rate") || (c["call"] == "windows" && a["windows"].is_a?(String))
        # A rate string (`window(name, "5/minute")` elsewhere) is C's rk_parse_rate.
        ["parse_rate", [str(a.fetch("rate") { a["windows"] }, "rate")]]
      else
        [c["call"] == "http_middleware" ? "http_rules" : c["call"], tokens(c["call"], a, c)]
      end
    puts ["case", name, call, status, c["parameter"].fetch("c"), *toks].join("\t")
  rescue NotExpressible => e
    puts ["skip", name, e.message.tr("\t\n", "  ")].join("\t")
  end
end
