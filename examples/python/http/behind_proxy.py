# Behind a reverse proxy: the rate-limit key is the client's address as the proxy reports it.
# Name the one header your proxy writes (`proxy_header`) and the addresses it connects from
# (`trusted_proxies`); the key is the right-most address of that header not in
# `trusted_proxies`. Run uvicorn with `--no-proxy-headers`, so uvicorn does not rewrite the
# peer address itself. PROXY picks the deployment below (the tests run each one).
import os

from fastapi import FastAPI

from ratekeeper import Backend
from ratekeeper.asgi import RateLimitMiddleware

backend = Backend.redis(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
api = backend.window("api", int(os.environ.get("API_LIMIT", "100")), "minute")

# --8<-- [start:deployments]
# Cloudflare's published ranges (https://www.cloudflare.com/ips/): keep this list current.
CLOUDFLARE = [
    "173.245.48.0/20", "103.21.244.0/22", "103.22.200.0/22", "103.31.4.0/22", "141.101.64.0/18",
    "108.162.192.0/18", "190.93.240.0/20", "188.114.96.0/20", "197.234.240.0/22", "198.41.128.0/17",
    "162.158.0.0/15", "104.16.0.0/13", "104.24.0.0/14", "172.64.0.0/13", "131.0.72.0/22",
    "2400:cb00::/32", "2606:4700::/32", "2803:f800::/32", "2405:b500::/32", "2405:8100::/32",
    "2a06:98c0::/29", "2c0f:f248::/32",
]
# nginx, an AWS ALB and Cloudflare all append the address they were connected from to
# X-Forwarded-For (nginx with `proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;`):
# what differs is whom to trust, the addresses the last hops connect from.
TRUSTED_PROXIES = {
    # nginx on the app's host.
    "nginx": ["127.0.0.1", "::1"],
    # An Application Load Balancer: its nodes connect from the subnets of your VPC.
    "alb": [os.environ.get("VPC_CIDR", "10.0.0.0/16")],
    # Cloudflare, then nginx on the app's host.
    "cloudflare": ["127.0.0.1", "::1", *CLOUDFLARE],
}
# --8<-- [end:deployments]

app = FastAPI()
# --8<-- [start:middleware]
app.add_middleware(
    RateLimitMiddleware,
    limiter=api,
    proxy_header="X-Forwarded-For",  # the default; "Forwarded" for a proxy that sets RFC 7239's
    trusted_proxies=TRUSTED_PROXIES[os.environ.get("PROXY", "nginx")],
)
# --8<-- [end:middleware]


@app.get("/")
async def hello() -> dict[str, str]:
    return {"hello": "world"}
