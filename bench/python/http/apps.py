"""The benchmarked apps: one route answering a small JSON document, per framework (BENCH_FRAMEWORK:
fastapi, flask, django) and variant (BENCH_VARIANT: floor = no limiter, ratekeeper, peer), the
limit on the Redis at BENCH_REDIS, keyed by client address, high enough never to refuse (the
admitted path is what every request of a healthy service takes), with rate-limit headers on.

Peers: slowapi (FastAPI, its SlowAPIMiddleware), flask-limiter (Flask, default_limits), and
django-ratelimit (Django, its view decorator over Django's Redis cache); ratekeeper's Django
variant uses its view decorator too, so both do the same work per request."""

from __future__ import annotations

import os
from typing import Any

FRAMEWORK = os.environ["BENCH_FRAMEWORK"]
VARIANT = os.environ["BENCH_VARIANT"]
REDIS = os.environ["BENCH_REDIS"]
LIMIT = 1_000_000_000  # per hour: never reached

app: Any
application: Any


def _limiter() -> Any:
    from ratekeeper import Backend

    return Backend.redis(REDIS, prefix="bench").window("bench", LIMIT, 3600)


if FRAMEWORK == "fastapi":
    from fastapi import FastAPI, Request

    app = FastAPI()
    if VARIANT == "ratekeeper":
        from ratekeeper.asgi import RateLimitMiddleware

        app.add_middleware(RateLimitMiddleware, limiter=_limiter())
    elif VARIANT == "peer":
        from slowapi import Limiter
        from slowapi.middleware import SlowAPIMiddleware
        from slowapi.util import get_remote_address

        app.state.limiter = Limiter(key_func=get_remote_address, storage_uri=REDIS,
                                    default_limits=[f"{LIMIT}/hour"], headers_enabled=True)
        app.add_middleware(SlowAPIMiddleware)

    @app.get("/")
    async def hello(request: Request) -> dict[str, str]:
        return {"hello": "world"}

elif FRAMEWORK == "flask":
    from flask import Flask

    app = Flask(__name__)
    if VARIANT == "ratekeeper":
        from ratekeeper.flask import RateLimiter

        RateLimiter(app, default=_limiter())
    elif VARIANT == "peer":
        from flask_limiter import Limiter
        from flask_limiter.util import get_remote_address

        Limiter(get_remote_address, app=app, default_limits=[f"{LIMIT}/hour"], storage_uri=REDIS,
                headers_enabled=True)

    @app.get("/")
    def flask_hello() -> dict[str, str]:
        return {"hello": "world"}

elif FRAMEWORK == "django":
    from django.conf import settings
    from django.core.wsgi import get_wsgi_application
    from django.http import HttpRequest, HttpResponse, JsonResponse
    from django.urls import path

    settings.configure(
        ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"], MIDDLEWARE=[],
        CACHES={"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS}},
        SILENCED_SYSTEM_CHECKS=["django_ratelimit.E003", "django_ratelimit.W001"],
    )

    def view(request: HttpRequest) -> HttpResponse:
        return JsonResponse({"hello": "world"})

    if VARIANT == "ratekeeper":
        from ratekeeper.django import ratelimit as rk_ratelimit

        view = rk_ratelimit(_limiter())(view)
    elif VARIANT == "peer":
        from django_ratelimit.decorators import ratelimit

        view = ratelimit(key="ip", rate=f"{LIMIT}/h", block=True)(view)

    urlpatterns = [path("", view)]
    application = get_wsgi_application()
    app = application
else:
    raise SystemExit(f"unknown BENCH_FRAMEWORK {FRAMEWORK!r}")
