"""The Starlette test app: ``RateLimitMiddleware`` over every route, options from ``RK_OPTIONS``."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from common import configure
from ratekeeper.asgi import RateLimitMiddleware

raw, kwargs = configure()


async def hello(request: Request) -> Response:
    return PlainTextResponse("hello")


async def fail(request: Request) -> Response:
    return PlainTextResponse("wrong password", status_code=401)


async def echo(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text(await websocket.receive_text())
    await websocket.close()


def skip(conn: HTTPConnection) -> bool:
    return conn.url.path == "/health"


if raw.get("key") == "x-client":
    kwargs["key"] = lambda conn: conn.headers.get("x-client", "")
app = Starlette(routes=[Route("/", hello), Route("/fail", fail), Route("/health", hello), WebSocketRoute("/ws", echo)])
app.add_middleware(RateLimitMiddleware, skip=skip, **kwargs)
