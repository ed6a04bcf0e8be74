"""The Flask test app: ``RateLimiter`` with a default from ``RK_OPTIONS``."""

from __future__ import annotations

from flask import Flask

from common import configure
from ratekeeper.flask import RateLimiter

raw, kwargs = configure()
app = Flask(__name__)
limiter = RateLimiter(app, default=kwargs.pop("limiter"), **kwargs)


@app.get("/")
def hello() -> str:
    return "hello"


@app.get("/fail")
def fail() -> tuple[str, int]:
    return "wrong password", 401


@app.get("/boom")
def boom() -> str:
    raise RuntimeError("a failing view")
