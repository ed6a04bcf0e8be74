# Behind a reverse proxy: the rate-limit key is the client's address as the proxy reports it.
# Name the one header your proxy writes (`proxy_header:`) and the addresses it connects from
# (`trusted_proxies:`); the key is the right-most address of that header not in
# `trusted_proxies:`. PROXY picks the deployment below (ruby/test/rack_proxy_test.rb runs each
# one under Puma):
#   REDIS_URL=redis://127.0.0.1:6379 PROXY=nginx puma examples/ruby/behind_proxy.ru
require "ratekeeper/rack"

Ratekeeper::Limiter.configure { |c| c.redis = { url: ENV.fetch("REDIS_URL") } }
API_LIMIT = Ratekeeper::Limiter.window("api", Integer(ENV.fetch("API_LIMIT", "100")), :minute)

# --8<-- [start:deployments]
# Cloudflare's published ranges (https://www.cloudflare.com/ips/): keep this list current.
CLOUDFLARE = %w[
  173.245.48.0/20 103.21.244.0/22 103.22.200.0/22 103.31.4.0/22 141.101.64.0/18
  108.162.192.0/18 190.93.240.0/20 188.114.96.0/20 197.234.240.0/22 198.41.128.0/17
  162.158.0.0/15 104.16.0.0/13 104.24.0.0/14 172.64.0.0/13 131.0.72.0/22
  2400:cb00::/32 2606:4700::/32 2803:f800::/32 2405:b500::/32 2405:8100::/32
  2a06:98c0::/29 2c0f:f248::/32
].freeze
# nginx, an AWS ALB and Cloudflare all append the address they were connected from to
# X-Forwarded-For (nginx with `proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;`):
# what differs is whom to trust, the addresses the last hops connect from.
TRUSTED_PROXIES = {
  # nginx on the app's host.
  "nginx" => ["127.0.0.1", "::1"],
  # An Application Load Balancer: its nodes connect from the subnets of your VPC.
  "alb" => [ENV.fetch("VPC_CIDR", "10.0.0.0/16")],
  # Cloudflare, then nginx on the app's host.
  "cloudflare" => ["127.0.0.1", "::1", *CLOUDFLARE]
}.freeze
# --8<-- [end:deployments]

# --8<-- [start:middleware]
use Ratekeeper::Rack,
    limiter: API_LIMIT,
    proxy_header: "X-Forwarded-For", # the default; "Forwarded" for a proxy that sets RFC 7239's
    trusted_proxies: TRUSTED_PROXIES.fetch(ENV.fetch("PROXY", "nginx")),
    skip: ->(env) { env["PATH_INFO"] == "/health" }
# --8<-- [end:middleware]

run ->(_env) { [200, { "content-type" => "text/plain" }, ["hello\n"]] }
