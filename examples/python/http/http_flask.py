# Flask: 200 requests an hour per client address by default; /search and /export share one
# stricter limit of 10 a minute; /health is exempt.
import os

from flask import Flask

from ratekeeper import Backend
from ratekeeper.flask import RateLimiter

backend = Backend.redis(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))

app = Flask(__name__)
limiter = RateLimiter(app, default=backend.window("api", 200, "hour"))
heavy = backend.window("heavy", 10, "minute")


@app.get("/")
def hello() -> dict[str, str]:
    return {"hello": "world"}


@app.get("/search")
@limiter.limit(heavy)
def search() -> dict[str, list[str]]:
    return {"results": []}


@app.get("/export")
@limiter.limit(heavy)
def export() -> str:
    return "id,name\n"


@app.get("/health")
@limiter.exempt
def health() -> str:
    return "ok"
