"""Rate limiting for ASGI apps (Starlette, FastAPI): :class:`RateLimitMiddleware`, for HTTP
requests and WebSocket handshakes. Install with the wheel's ``[fastapi]`` extra (or
``[starlette]``).

Options and their meaning: ``docs/src/guides/http/index.md`` (the same in every language).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from ._http import Admission, Count, HeaderForm, LimiterOption, Policy, ProxyHeader, Refusal

__all__ = ["RateLimitMiddleware", "Refusal", "header_value", "peer_address", "policy", "refusal_response"]

#: What ``on_refused`` returns: any ASGI response (a Starlette ``Response``).
RefusedHandler = Callable[[HTTPConnection, Refusal], Response]


def refusal_response(refusal: Refusal) -> Response:
    """The default refusal: 429 (or 503) with an RFC 9457 ``application/problem+json`` body,
    ``Retry-After`` and the rate-limit header fields."""
    response = Response(refusal.body, status_code=refusal.status, media_type=refusal.content_type)
    for name, value in refusal.headers:
        response.headers.append(name, value)
    return response


def peer_address(conn: HTTPConnection) -> str | None:
    """The connection's peer address (what the default key starts from)."""
    return conn.client.host if conn.client else None


def header_value(conn: HTTPConnection, name: str) -> str | None:
    """A request header field, every line of it joined by commas in order (``None`` when
    absent), as gunicorn, Django and node:http join them. Starlette's ``headers.get`` returns the
    first line only: behind a proxy that adds its own ``X-Forwarded-For`` line after the
    client's (HAProxy), that first line is the client's own writing."""
    lines = conn.headers.getlist(name)
    return ",".join(lines) if lines else None


def policy(
    limiter: LimiterOption,
    *,
    key: Callable[[HTTPConnection], str] | None = None,
    cost: int | Callable[[HTTPConnection], int] = 1,
    skip: Callable[[HTTPConnection], bool] | None = None,
    count: Count = "all",
    headers: HeaderForm | None = "draft-11",
    on_refused: RefusedHandler | None = None,
    shadow: bool = False,
    trusted_proxies: Iterable[str] | None = None,
    proxy_header: ProxyHeader = "X-Forwarded-For",
    partition_key_secret: bytes | str | None = None,
) -> Policy[HTTPConnection]:
    """The validated options of a Starlette/FastAPI rate limit (raises ``InvalidArgument``
    naming the bad option)."""
    return Policy(
        limiter, key=key, cost=cost, skip=skip, count=count, headers=headers, on_refused=on_refused,
        shadow=shadow, trusted_proxies=trusted_proxies, proxy_header=proxy_header, peer=peer_address, header=header_value,
        partition_key_secret=partition_key_secret,
    )


def _encoded(headers: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]


class RateLimitMiddleware:
    """ASGI middleware limiting every HTTP request and WebSocket handshake::

        app.add_middleware(RateLimitMiddleware, limiter=backend.window("api", 100, "minute"))

    ``key``, ``skip``, ``cost`` and ``on_refused`` receive a Starlette ``HTTPConnection`` (the
    base of ``Request`` and ``WebSocket``). A WebSocket over its limit is refused at the
    handshake: with the 429 problem response when the server supports the WebSocket Denial
    Response extension (uvicorn does), else by a close with code 1008 before accepting (which
    the server answers as HTTP 403). A concurrent limiter's lease is held until the socket closes.

    Lifespan and other scope types pass through untouched."""

    def __init__(
        self,
        app: ASGIApp,
        limiter: LimiterOption,
        *,
        key: Callable[[HTTPConnection], str] | None = None,
        cost: int | Callable[[HTTPConnection], int] = 1,
        skip: Callable[[HTTPConnection], bool] | None = None,
        count: Count = "all",
        headers: HeaderForm | None = "draft-11",
        on_refused: RefusedHandler | None = None,
        shadow: bool = False,
        trusted_proxies: Iterable[str] | None = None,
        proxy_header: ProxyHeader = "X-Forwarded-For",
        partition_key_secret: bytes | str | None = None,
    ) -> None:
        self.app = app
        self.policy = policy(
            limiter, key=key, cost=cost, skip=skip, count=count, headers=headers, on_refused=on_refused,
            shadow=shadow, trusted_proxies=trusted_proxies, proxy_header=proxy_header,
            partition_key_secret=partition_key_secret,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope, receive)
        admission = await self.policy.aadmit(conn)
        if admission is None:
            await self.app(scope, receive, send)
            return
        if admission.refusal is not None:
            await self._refuse(conn, admission.refusal, scope, receive, send)
            return
        await _serve(self.app, admission, scope, receive, send)

    async def _refuse(self, conn: HTTPConnection, refusal: Refusal, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self.policy.on_refused
        response = handler(conn, refusal) if handler is not None else refusal_response(refusal)
        if scope["type"] == "http":
            await response(scope, receive, send)
            return
        websocket = WebSocket(scope, receive, send)
        if "websocket.http.response" in scope.get("extensions", {}):
            await websocket.send_denial_response(response)
        else:
            await websocket.close(code=1008, reason=f"rate limited: retry in {refusal.retry_after} s")


async def _serve(app: ASGIApp, admission: Admission, scope: Scope, receive: Receive, send: Send) -> None:
    """Runs the app with the rate-limit fields added to its response (or WebSocket accept), then
    settles the admission with the response's status."""
    status = 500
    extra = _encoded(admission.headers)

    async def send_with_headers(message: Message) -> None:
        nonlocal status
        kind = message["type"]
        if kind == "http.response.start":
            status = int(message["status"])
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        elif kind == "websocket.accept":
            status = 101
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        elif kind == "websocket.close" and status == 500:
            status = 403  # closed before accepting: the handshake failed
        await send(message)

    try:
        await app(scope, receive, send_with_headers)
    finally:
        await admission.asettle(status)
