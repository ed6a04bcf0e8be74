# FastAPI: 100 requests per minute per client IP, with the standard headers.
import os
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

import ratekeeper

backend = ratekeeper.Backend.redis(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
per_ip = backend.window("api", 100, "minute")
app = FastAPI()


@app.middleware("http")
async def rate_limit(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    d = await per_ip.acheck(request.client.host if request.client else None)
    if not d.allowed:
        return JSONResponse({"detail": "too many requests"}, status_code=429, headers=d.headers())
    response = await call_next(request)
    response.headers.update(d.headers())
    return response


@app.get("/")
async def hello() -> dict[str, str]:
    return {"hello": "world"}
