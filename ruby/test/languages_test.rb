# frozen_string_literal: true

# One limit spent at once by Ruby, Python, Node, C and Go processes (two of each) on one Redis:
# the totals are exact. "scarce" (a window of 200) is asked 10 x 60 = 600 times and admits
# exactly 200 in all; "plenty" (a bucket of 100,000 a day) admits all 600 and has exactly
# 100,000 - 600 left. Every process waits for one start instant so their calls overlap.
#
# Needs what scripts/test-ruby provides: RK_PYTHON (a Python with the ratekeeper module),
# node/ratekeeper.node, RK_C_SPEND (tests/languages/spend.c compiled), RK_GO_SPEND
# (tests/languages/spend.go built against the Go module).
require_relative "test_helper"
require "json"

class LanguagesTest < Minitest::Test
  ATTEMPTS = 60
  PER_LANGUAGE = 2

  RUBY = <<~'RUBY'
    url, prefix, start, attempts = ARGV
    backend = Ratekeeper::Backend.redis(url, prefix: prefix, deadline: 5)
    scarce = backend.window("scarce", 200, 3600)
    plenty = backend.bucket("plenty", 100_000, :day)
    sleep [Float(start) - Time.now.to_f, 0].max
    counts = Integer(attempts).times.map { [scarce.check("shared").allowed? ? 1 : 0, plenty.check("shared").allowed? ? 1 : 0] }.transpose.map(&:sum)
    puts JSON.generate(language: "ruby", scarce: counts[0], plenty: counts[1])
  RUBY

  PYTHON = <<~'PYTHON'
    import json, sys, time
    import ratekeeper
    url, prefix, start, attempts = sys.argv[1:]
    backend = ratekeeper.Backend.redis(url, prefix=prefix, deadline=5)
    scarce = backend.window("scarce", 200, 3600)
    plenty = backend.bucket("plenty", 100_000, "day")
    time.sleep(max(float(start) - time.time(), 0))
    s = p = 0
    for _ in range(int(attempts)):
        s += scarce.check("shared").allowed
        p += plenty.check("shared").allowed
    print(json.dumps({"language": "python", "scarce": s, "plenty": p}))
  PYTHON

  NODE = <<~'NODE'
    const rk = require(process.env.RK_NODE_PACKAGE);
    const [url, prefix, start, attempts] = process.argv.slice(1);
    (async () => {
      const backend = rk.Backend.redis(url, { prefix, deadlineMs: 5000 });
      const scarce = backend.window("scarce", 200, "1h");
      const plenty = backend.bucket("plenty", 100000, "day");
      await new Promise((r) => setTimeout(r, Math.max(Number(start) * 1000 - Date.now(), 0)));
      let s = 0, p = 0;
      for (let i = 0; i < Number(attempts); i++) {
        if ((await scarce.check("shared")).allowed) s++;
        if ((await plenty.check("shared")).allowed) p++;
      }
      console.log(JSON.stringify({ language: "node", scarce: s, plenty: p }));
    })().catch((e) => { console.error(e); process.exit(1); });
  NODE

  def test_ruby_python_node_c_and_go_processes_share_one_limit_exactly
    python = ENV.fetch("RK_PYTHON") { flunk "RK_PYTHON (a Python with ratekeeper) is required: run scripts/test-ruby" }
    c_spend = ENV.fetch("RK_C_SPEND") { flunk "RK_C_SPEND (tests/languages/spend.c compiled) is required: run scripts/test-ruby" }
    go_spend = ENV.fetch("RK_GO_SPEND") { flunk "RK_GO_SPEND (tests/languages/spend.go built) is required: run scripts/test-ruby" }
    prefix = unique_prefix
    start = (Time.now.to_f + 3.0).to_s # time for every process to load and connect
    args = [redis_url, prefix, start, ATTEMPTS.to_s]
    rubylib = [File.expand_path("../lib", __dir__), ENV["RUBYLIB"]].compact.join(":")
    commands = [
      [{ "RUBYLIB" => rubylib }, [RbConfig.ruby, "-rratekeeper", "-rjson", "-e", RUBY, "--", *args]],
      [{}, [python, "-c", PYTHON, *args]],
      [{ "RK_NODE_PACKAGE" => File.join(REPO_ROOT, "node") }, ["node", "-e", NODE, "--", *args]],
      [{}, [c_spend, *args]],
      [{}, [go_spend, *args]]
    ]
    procs = commands.flat_map { |env, cmd| PER_LANGUAGE.times.map { IO.popen(env, cmd, err: %i[child out]) } }
    reports = procs.map do |io|
      out = io.read
      io.close
      assert $?.success?, "a worker failed: #{out}"
      JSON.parse(out.lines.last)
    end
    assert_equal %w[c go node python ruby], reports.map { |r| r["language"] }.uniq.sort
    assert_equal 200, reports.sum { |r| r["scarce"] }, "admitted by the window of 200: #{reports.inspect}"
    assert_equal procs.size * ATTEMPTS, reports.sum { |r| r["plenty"] }
    backend = Ratekeeper::Backend.redis(redis_url, prefix: prefix)
    assert_equal 0, backend.window("scarce", 200, 3600).peek("shared").remaining
    assert_equal 100_000 - procs.size * ATTEMPTS, backend.bucket("plenty", 100_000, :day).peek("shared").remaining
  end
end
