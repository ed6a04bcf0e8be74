"""The FastAPI test app: the per-route dependency ``ratekeeper.fastapi.limit`` on ``/``, options
from ``RK_OPTIONS``."""

from __future__ import annotations

from fastapi import Depends, FastAPI

from common import configure
from ratekeeper.fastapi import RateLimited, limit, rate_limited_handler

raw, kwargs = configure()
app = FastAPI()
app.add_exception_handler(RateLimited, rate_limited_handler)


@app.get("/", dependencies=[Depends(limit(**kwargs))])
async def hello() -> dict[str, str]:
    return {"hello": "world"}
