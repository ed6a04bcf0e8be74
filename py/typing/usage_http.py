"""A typed tour of the HTTP middleware (ratekeeper.asgi, .fastapi, .flask, .django), checked
with `mypy --strict` by scripts/test-python (never run): if an option's type drifts from what
users write, this file stops type-checking."""

from __future__ import annotations

import flask
from django.http import HttpRequest, HttpResponse
from fastapi import Depends, FastAPI, Request
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, Response

from ratekeeper import Backend, FleetShedder, InvalidArgument
from ratekeeper.asgi import RateLimitMiddleware, Refusal, refusal_response
from ratekeeper.django import exempt, ratelimit
from ratekeeper.fastapi import RateLimited, limit, rate_limited_handler
from ratekeeper.flask import RateLimiter


def by_api_key(conn: HTTPConnection) -> str:
    return conn.headers.get("x-api-key", "anonymous")


def teapot(conn: HTTPConnection, refusal: Refusal) -> Response:
    return JSONResponse({"retry_in": refusal.retry_after, "why": list(refusal.violated_policies)},
                        status_code=refusal.status, headers=dict(refusal.headers))


def asgi(backend: Backend) -> FastAPI:
    app = FastAPI()
    api = backend.window("api", 100, "minute")
    shedder = FleetShedder(backend, "fleet", 500)
    app.add_middleware(RateLimitMiddleware, limiter=[api, shedder], key=by_api_key, headers="draft-7",
                       on_refused=teapot, trusted_proxies=["10.0.0.0/8"], proxy_header="Forwarded", shadow=False)
    app.add_middleware(RateLimitMiddleware, limiter=api, partition_key_secret=b"a-secret-of-at-least-16-bytes")
    app.add_exception_handler(RateLimited, rate_limited_handler)
    default: Response = refusal_response(Refusal(429, "quota-exceeded", 1, ("api",), (), b"{}"))
    assert default.status_code == 429

    def weight(request: Request) -> int:
        return 5 if request.url.path.startswith("/bulk") else 1

    @app.post("/bulk", dependencies=[Depends(limit(backend.points("bulk", 100, 60), cost=weight, count="successes"))])
    async def bulk() -> dict[str, int]:
        return {"ok": 1}

    try:
        limit(api, headers="draft-5")  # type: ignore[arg-type]
    except InvalidArgument as e:
        assert e.parameter == "headers"
    try:
        limit(api, trusted_proxies=["10.0.0.0/8"], proxy_header="X-Real-IP")  # type: ignore[arg-type]
    except InvalidArgument as e:
        assert e.parameter == "proxy_header"
    return app


def flask_app(backend: Backend) -> flask.Flask:
    app = flask.Flask(__name__)
    limiter = RateLimiter(app, default=backend.window("api", 200, "hour"), headers="legacy")
    heavy = backend.window("heavy", 10, "minute")

    @app.get("/search")
    @limiter.limit(heavy, count="failures")
    def search() -> str:
        return "results"

    @app.get("/health")
    @limiter.exempt
    def health() -> str:
        return "ok"

    return app


def django_views(backend: Backend) -> None:
    @ratelimit(backend.window("login", 5, "minute"), count="failures", key=lambda r: r.META["REMOTE_ADDR"])
    async def login(request: HttpRequest) -> HttpResponse:
        return HttpResponse("welcome")

    @ratelimit(backend.token_bucket("export", 1.0, 10), headers=None)
    def export(request: HttpRequest) -> HttpResponse:
        return HttpResponse("id,name")

    @exempt
    def health(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")
