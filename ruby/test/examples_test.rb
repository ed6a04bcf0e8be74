# frozen_string_literal: true

# Runs the Ruby examples (examples/ruby/), which the documentation includes, each in its own
# process against the suite's redis-server, and checks what they did.
require_relative "test_helper"
require "open3"

class ExamplesTest < Minitest::Test
  EXAMPLES = File.join(REPO_ROOT, "examples/ruby")

  # Each example starts from an empty Redis of its own (they use the default prefix).
  def setup = @redis = RedisServer.new
  def teardown = @redis.stop

  def run_ruby(script, env = {})
    env = { "REDIS_URL" => @redis.url, "RUBYLIB" => [File.expand_path("../lib", __dir__), ENV["RUBYLIB"]].compact.join(":") }.merge(env)
    out, err, status = Open3.capture3(env, RbConfig.ruby, "-e", script)
    assert status.success?, "#{script}\nexited #{status.exitstatus}:\n#{out}\n#{err}"
    out
  end

  # Issue 46: run on its own, as pasted (no `$calls = []` set up by a caller), the page crashed
  # with "undefined method `<<' for nil:NilClass". Every example file runs by itself.
  def test_every_example_runs_on_its_own
    %w[sidekiq_limits.rb].each do |file|
      run_ruby("load #{File.join(EXAMPLES, file).dump}")
    end
  end

  def test_the_sidekiq_page_runs_with_the_constant_renamed
    out = run_ruby(<<~RUBY)
      $calls = []
      Redis.silence_deprecations = true if defined?(Redis) && Redis.respond_to?(:silence_deprecations=)
      load #{File.join(EXAMPLES, 'sidekiq_limits.rb').dump}
      ErpJob.new.perform
      StripeJob.new.perform(42)
      StripeWindowJob.new.perform(42)
      AdminAwareJob.new.perform(true)
      AdminAwareJob.new.perform(false)
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      60.times { SHOPIFY_LEAKY.within_limit { $calls << :leaky } }
      filled_in = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
      begin
        SHOPIFY_LEAKY.within_limit { $calls << :too_many }
      rescue Ratekeeper::Limiter::OverLimit => e
        $calls << [:over_limit, e.retry_after.round]
      end
      p $calls.tally
      p Ratekeeper::Limiter.points("shopify", 1000, 20).peek.remaining
      p Ratekeeper::Limiter.config.errors.map(&:name)
      p filled_in
    RUBY
    tally, points_left, errors, filled_in = out.lines.map(&:strip)
    tally = eval(tally) # rubocop:disable Security/Eval -- our own child's `p` output
    # The leaky bucket drains one call a second: filled within that second, the 61st call is
    # over the limit; a machine slow enough to take longer has let one drain, and it is admitted.
    sixty_first = Float(filled_in) < 1.0 || !tally.key?(:too_many) ? { [:over_limit, 1] => 1 } : { too_many: 1 }
    assert_equal({ erp: 3, [:shopify, "{ shop { name } }"] => 1, [:stripe, 42] => 2, leaky: 60, **sixty_first }, tally)
    assert_operator Integer(points_left), :>=, 950 # 50 points spent, refilling at 50 per second
    assert_equal '["Ratekeeper::OverLimit", "SomeLib::SlowDownPlease"]', errors
  end
end
