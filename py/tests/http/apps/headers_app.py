"""One Starlette app per header form, mounted side by side: ``/draft-11/``, ``/draft-7/``,
``/draft-6/``, ``/legacy/``, ``/none/`` (each its own limiter, from ``RK_OPTIONS``)."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route

from common import configure
from ratekeeper import Backend
from ratekeeper.asgi import RateLimitMiddleware

raw, _ = configure()
backend = Backend.redis(raw["redis"], prefix=raw["prefix"])


async def hello(request: Request) -> Response:
    return PlainTextResponse("hello")


def form_app(form: Any, name: str) -> Starlette:
    app = Starlette(routes=[Route("/", hello)])
    app.add_middleware(RateLimitMiddleware, limiter=backend.window(name, 3, 3600), headers=form)
    return app


app = Starlette(routes=[Mount(f"/{form or 'none'}", form_app(form, f"h-{form}"))
                        for form in ("draft-11", "draft-7", "draft-6", "legacy", None)])
