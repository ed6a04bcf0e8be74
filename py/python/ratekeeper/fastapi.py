"""Per-route rate limits for FastAPI: the dependency :func:`limit`. Install with
the wheel's ``[fastapi]`` extra. For every route at once (and WebSockets), use
:class:`ratekeeper.asgi.RateLimitMiddleware`.

Options and their meaning: ``docs/src/guides/http/index.md`` (the same in every language).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable

from fastapi import HTTPException, Request, Response

from ._http import Count, HeaderForm, LimiterOption, Policy, ProxyHeader, Refusal
from .asgi import header_value, peer_address, refusal_response

__all__ = ["RateLimited", "limit", "rate_limited_handler"]


class RateLimited(HTTPException):
    """Raised by a :func:`limit` dependency when the request is refused.

    It is an ``HTTPException``, so FastAPI answers it as it is — the status (429, or 503), the
    ``Retry-After`` and rate-limit fields — with FastAPI's ``{"detail": ...}`` body. Register
    :func:`rate_limited_handler` to answer ``response`` instead: the RFC 9457 problem (or what
    ``on_refused`` built)::

        app.add_exception_handler(RateLimited, rate_limited_handler)
    """

    def __init__(self, refusal: Refusal, response: Response) -> None:
        super().__init__(refusal.status, "Too Many Requests" if refusal.status == 429 else "Service Unavailable",
                         dict(refusal.headers))
        self.refusal = refusal
        self.response = response


async def rate_limited_handler(request: Request, exc: Exception) -> Response:
    """The exception handler answering a :class:`RateLimited` with its ``response``."""
    if not isinstance(exc, RateLimited):  # registered for RateLimited only; kept total for mypy
        raise exc
    return exc.response


def limit(
    limiter: LimiterOption,
    *,
    key: Callable[[Request], str] | None = None,
    cost: int | Callable[[Request], int] = 1,
    skip: Callable[[Request], bool] | None = None,
    count: Count = "all",
    headers: HeaderForm | None = "draft-11",
    on_refused: Callable[[Request, Refusal], Response] | None = None,
    shadow: bool = False,
    trusted_proxies: Iterable[str] | None = None,
    proxy_header: ProxyHeader = "X-Forwarded-For",
    partition_key_secret: bytes | str | None = None,
) -> Callable[[Request, Response], AsyncIterator[None]]:
    """A FastAPI dependency limiting the routes it is attached to::

        @app.post("/login", dependencies=[Depends(limit(per_ip, count="failures"))])

    Every option is validated here, when the route is declared. The rate-limit fields go on the
    response FastAPI builds from the route's return value (a route returning its own
    ``Response`` sets its own headers). With ``count``, a route counts as failed when it raises
    (an ``HTTPException``'s status, else 500) or sets ``response.status_code`` >= 400; one that
    returns its own error ``Response`` is seen as a success — use the middleware there."""
    rules: Policy[Request] = Policy(
        limiter, key=key, cost=cost, skip=skip, count=count, headers=headers, on_refused=on_refused,
        shadow=shadow, trusted_proxies=trusted_proxies, proxy_header=proxy_header, peer=peer_address, header=header_value,
        partition_key_secret=partition_key_secret,
    )

    async def rate_limit(request: Request, response: Response) -> AsyncIterator[None]:
        admission = await rules.aadmit(request)
        if admission is None:
            yield
            return
        if admission.refusal is not None:
            handler = rules.on_refused
            answer = handler(request, admission.refusal) if handler is not None else refusal_response(admission.refusal)
            raise RateLimited(admission.refusal, answer)
        for name, value in admission.headers:
            response.headers.append(name, value)
        status = 500
        try:
            yield
            status = response.status_code or 200
        except HTTPException as e:
            status = e.status_code
            raise
        finally:
            await admission.asettle(status)

    return rate_limit
