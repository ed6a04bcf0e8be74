"""The Python half of node/__test__/http-cross-language.test.js: a Starlette app under uvicorn with
ratekeeper's ASGI middleware, the same limiter as the Node example apps
(`window("api", 100, "minute")`, keyed by the client address) on the same Redis. Prints
`listening on PORT`."""

import os
import socket

import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ratekeeper import Backend
from ratekeeper.asgi import RateLimitMiddleware

# A longer deadline than the default 0.2 s: the test asserts exact totals, which a check that
# timed out on a loaded machine (answered 503) would blur.
backend = Backend.redis(os.environ["REDIS_URL"], deadline=1.0)


async def hello(request: object) -> PlainTextResponse:
    return PlainTextResponse("hello")


app = Starlette(routes=[Route("/", hello)])
app.add_middleware(RateLimitMiddleware, limiter=backend.window("api", 100, "minute"))

sock = socket.socket()
sock.bind(("127.0.0.1", int(os.environ.get("PORT", "0"))))
print(f"listening on {sock.getsockname()[1]}", flush=True)
uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off")).run(sockets=[sock])
