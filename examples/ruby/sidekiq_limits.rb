# Sidekiq Enterprise's rate limiting page, with only the constant renamed
# (Sidekiq::Limiter -> Ratekeeper::Limiter). Run by ruby/test/examples_test.rb.
# --8<-- [start:setup]
require "ratekeeper/sidekiq"

Ratekeeper::Limiter.configure do |config|
  config.redis = { url: ENV.fetch("REDIS_URL", "redis://localhost:6379") }
end
# --8<-- [end:setup]

# Stand-ins for the calls the page's jobs make; they record what ran.
$calls ||= []
def call_erp = $calls << :erp
def call_stripe(user_id) = $calls << [:stripe, user_id]
def call_shopify(query) = $calls << [:shopify, query]

# --8<-- [start:concurrent]
ERP_LIMIT = Ratekeeper::Limiter.concurrent('erp', 50, wait_timeout: 5, lock_timeout: 30)

class ErpJob
  include Sidekiq::Job

  def perform(...)
    ERP_LIMIT.within_limit do
      call_erp
    end
  end
end
# --8<-- [end:concurrent]

# --8<-- [start:bucket]
class StripeJob
  include Sidekiq::Job

  def perform(user_id)
    user_throttle = Ratekeeper::Limiter.bucket("stripe-#{user_id}", 30, :second, wait_timeout: 5)
    user_throttle.within_limit do
      call_stripe(user_id)
    end
  end
end
# --8<-- [end:bucket]

# --8<-- [start:window]
class StripeWindowJob
  include Sidekiq::Job

  def perform(user_id)
    user_throttle = Ratekeeper::Limiter.window("stripe-#{user_id}", 5, :second, wait_timeout: 5)
    user_throttle.within_limit do
      call_stripe(user_id)
    end
  end
end
# --8<-- [end:window]

# --8<-- [start:leaky]
SHOPIFY_LEAKY = Ratekeeper::Limiter.leaky("shopify-42", 60, :minute, wait_timeout: 0)
# --8<-- [end:leaky]

# --8<-- [start:points]
lmt = Ratekeeper::Limiter.points("shopify", 1000, 20)

query_estimate = 200 # use endpoint docs for logic to determine needed points
lmt.within_limit(estimate: query_estimate) do |handle|
  # make the actual query here #
  call_shopify("{ shop { name } }")
  actual = 50 # maybe our estimate was pessimistic
  handle.points_used(actual)
end
# --8<-- [end:points]

# --8<-- [start:unlimited]
ERP = Ratekeeper::Limiter.concurrent("erp", 10)

class AdminAwareJob
  include Sidekiq::Job

  def perform(admin)
    lmtr = admin ? Ratekeeper::Limiter.unlimited : ERP
    lmtr.within_limit do
      # always executes for admins
      call_erp
    end
  end
end
# --8<-- [end:unlimited]

# --8<-- [start:configure]
module SomeLib
  class SlowDownPlease < StandardError; end
end

Ratekeeper::Limiter.configure do |config|
  # Reschedule over-limit jobs sooner than Sidekiq's default (300 * overrated + rand(300) + 1 s).
  config.backoff = ->(limiter, job, exception) do
    (60 * job['overrated']) + rand(60) + 1
  end
  # A client library's own "too many requests" error reschedules the job too.
  config.errors << SomeLib::SlowDownPlease
end
# --8<-- [end:configure]
