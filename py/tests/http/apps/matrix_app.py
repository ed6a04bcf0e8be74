"""Several Starlette apps side by side in one server, one per mount of ``RK_OPTIONS["mounts"]``
(``{"name": {"limiters": [[name, spec], ...], "shedder": [name, limit], option: value, ...}}``), each behind its own
``RateLimitMiddleware``: one uvicorn process serves every configuration a test module needs."""

from __future__ import annotations

import json
import os
from typing import Any

from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.websockets import WebSocket

from ratekeeper import Backend, FleetShedder
from ratekeeper.asgi import RateLimitMiddleware

raw: dict[str, Any] = json.loads(os.environ["RK_OPTIONS"])
backend = Backend.redis(raw["redis"], prefix=raw["prefix"], deadline=5.0, connect_timeout=5.0)


async def hello(request: Request) -> Response:
    return PlainTextResponse("hello")


async def fail(request: Request) -> Response:
    return PlainTextResponse("wrong password", status_code=401)


async def echo(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text(await websocket.receive_text())
    await websocket.close()


async def hold(websocket: WebSocket) -> None:
    """Echoes until the client closes: an open connection, for a concurrent limiter."""
    await websocket.accept()
    async for text in websocket.iter_text():
        await websocket.send_text(text)


def without_denial_response(app: Any) -> Any:
    """The app as a server without the WebSocket Denial Response extension sees it: the
    middleware must then close the handshake with 1008, which the server answers with 403."""
    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            extensions = {k: v for k, v in scope.get("extensions", {}).items() if k != "websocket.http.response"}
            scope = {**scope, "extensions": extensions}
        await app(scope, receive, send)
    return wrapped


def skip(conn: HTTPConnection) -> bool:
    return conn.url.path.endswith("/health")


def mounted(options: dict[str, Any]) -> Any:
    options = dict(options)
    no_denial = options.pop("no_denial_response", False)
    limiters: list[Any] = [backend.limiter(name, spec) for name, spec in options.pop("limiters", [])]
    if "shedder" in options:  # [name, limit]: a FleetShedder on the same backend
        name, limit = options.pop("shedder")
        limiters.append(FleetShedder(backend, name, limit))
    app = Starlette(routes=[Route("/", hello), Route("/fail", fail), Route("/health", hello),
                            WebSocketRoute("/ws", echo), WebSocketRoute("/hold", hold)])
    app.add_middleware(RateLimitMiddleware, limiter=limiters if len(limiters) > 1 else limiters[0], skip=skip,
                       **options)
    return without_denial_response(app) if no_denial else app


app = Starlette(routes=[Mount(f"/{name}", mounted(options)) for name, options in raw["mounts"].items()])
