"""Rate limiting for Django (sync and async views, WSGI and ASGI): the :func:`ratelimit` view
decorator, :class:`RateLimitMiddleware` for every request, and :func:`exempt`. Install with
the wheel's ``[django]`` extra.

Options and their meaning: ``docs/src/guides/http/index.md`` (the same in every language).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar, cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.urls import Resolver404, resolve

from ._http import Admission, Count, HeaderForm, LimiterOption, Policy, ProxyHeader, Refusal
from .errors import InvalidArgument

__all__ = ["RateLimitMiddleware", "Refusal", "exempt", "ratelimit", "refusal_response"]

View = TypeVar("View", bound=Callable[..., Any])
RefusedHandler = Callable[[HttpRequest, Refusal], HttpResponseBase]

_EXEMPT = "_ratekeeper_exempt"


def refusal_response(refusal: Refusal) -> HttpResponse:
    """The default refusal: 429 (or 503) with an RFC 9457 ``application/problem+json`` body,
    ``Retry-After`` and the rate-limit header fields."""
    return HttpResponse(refusal.body, status=refusal.status, content_type=refusal.content_type,
                        headers=dict(refusal.headers))


def _peer(request: HttpRequest) -> str | None:
    peer = request.META.get("REMOTE_ADDR")
    return str(peer) if peer else None


def _header(request: HttpRequest, name: str) -> str | None:
    # Django joins a field's lines by commas in META (its ASGI handler; WSGI servers do the same).
    value = request.headers.get(name)
    return str(value) if value is not None else None


def policy(
    limiter: LimiterOption,
    *,
    key: Callable[[HttpRequest], str] | None = None,
    cost: int | Callable[[HttpRequest], int] = 1,
    skip: Callable[[HttpRequest], bool] | None = None,
    count: Count = "all",
    headers: HeaderForm | None = "draft-11",
    on_refused: RefusedHandler | None = None,
    shadow: bool = False,
    trusted_proxies: Iterable[str] | None = None,
    proxy_header: ProxyHeader = "X-Forwarded-For",
    partition_key_secret: bytes | str | None = None,
) -> Policy[HttpRequest]:
    """The validated options of a Django rate limit (raises ``InvalidArgument`` naming the bad
    option)."""
    return Policy(
        limiter, key=key, cost=cost, skip=skip, count=count, headers=headers, on_refused=on_refused,
        shadow=shadow, trusted_proxies=trusted_proxies, proxy_header=proxy_header, peer=_peer, header=_header,
        partition_key_secret=partition_key_secret,
    )


def _refuse(rules: Policy[HttpRequest], request: HttpRequest, refusal: Refusal) -> HttpResponseBase:
    handler = rules.on_refused
    return cast(HttpResponseBase, handler(request, refusal)) if handler is not None else refusal_response(refusal)


def _failed_status(e: BaseException) -> int:
    # The exceptions Django itself turns into responses; anything else is a 500.
    return 404 if isinstance(e, Http404) else 403 if isinstance(e, PermissionDenied) else 500


def _finish(admission: Admission, response: HttpResponseBase) -> HttpResponseBase:
    for name, value in admission.headers:
        response.headers[name] = value  # one field per name: draft-11 members are joined already
    return response


def _limited(rules: Policy[HttpRequest], handler: Callable[..., Any]) -> Callable[..., Any]:
    """``handler`` (a view or the rest of the middleware chain) wrapped in ``rules``, keeping
    its sync or async nature."""
    if iscoroutinefunction(handler):
        async_handler = cast(Callable[..., Awaitable[HttpResponseBase]], handler)

        @functools.wraps(handler)
        async def limited_async(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            admission = await rules.aadmit(request)
            if admission is None:
                return await async_handler(request, *args, **kwargs)
            if admission.refusal is not None:
                return _refuse(rules, request, admission.refusal)
            status = 500
            try:
                response = await async_handler(request, *args, **kwargs)
                status = response.status_code
            except BaseException as e:
                status = _failed_status(e)
                raise
            finally:
                await admission.asettle(status)
            return _finish(admission, response)

        return limited_async

    @functools.wraps(handler)
    def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        admission = rules.admit(request)
        if admission is None:
            return cast(HttpResponseBase, handler(request, *args, **kwargs))
        if admission.refusal is not None:
            return _refuse(rules, request, admission.refusal)
        status = 500
        try:
            response = cast(HttpResponseBase, handler(request, *args, **kwargs))
            status = response.status_code
        except BaseException as e:
            status = _failed_status(e)
            raise
        finally:
            admission.settle(status)
        return _finish(admission, response)

    return limited


def ratelimit(
    limiter: LimiterOption,
    *,
    key: Callable[[HttpRequest], str] | None = None,
    cost: int | Callable[[HttpRequest], int] = 1,
    skip: Callable[[HttpRequest], bool] | None = None,
    count: Count = "all",
    headers: HeaderForm | None = "draft-11",
    on_refused: RefusedHandler | None = None,
    shadow: bool = False,
    trusted_proxies: Iterable[str] | None = None,
    proxy_header: ProxyHeader = "X-Forwarded-For",
    partition_key_secret: bytes | str | None = None,
) -> Callable[[View], View]:
    """A view decorator limiting that view, for sync and async views alike (an async view is
    checked with the asyncio calls, never blocking the event loop)::

        @ratelimit(backend.window("login", 5, "minute"), count="failures")
        async def login(request): ...

    One limiter object on several views is one shared limit. With ``RateLimitMiddleware`` too,
    a decorated view is limited by both. Every option is validated here."""
    rules = policy(limiter, key=key, cost=cost, skip=skip, count=count, headers=headers, on_refused=on_refused,
                   shadow=shadow, trusted_proxies=trusted_proxies, proxy_header=proxy_header,
            partition_key_secret=partition_key_secret)

    def decorate(view: View) -> View:
        return cast(View, _limited(rules, view))

    return decorate


def exempt(view: View) -> View:
    """Exempts a view from :class:`RateLimitMiddleware`: its requests touch nothing."""
    setattr(view, _EXEMPT, True)
    return view


class RateLimitMiddleware:
    """Limits every request (sync and async stacks alike) with the options in the setting
    ``RATEKEEPER_MIDDLEWARE`` (a dict: ``limiter`` and the keyword options of
    :func:`ratelimit`)::

        MIDDLEWARE = [..., "ratekeeper.django.RateLimitMiddleware"]
        RATEKEEPER_MIDDLEWARE = {"limiter": backend.window("api", 100, "minute")}

    Views marked with :func:`exempt` (resolved from the path) touch nothing."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        from django.conf import settings  # here: the lazy settings object is read only once configured

        conf = getattr(settings, "RATEKEEPER_MIDDLEWARE", None)
        if not isinstance(conf, dict) or "limiter" not in conf:
            raise InvalidArgument(
                "invalid argument `limiter`: settings.RATEKEEPER_MIDDLEWARE must be a dict with a `limiter`", "limiter"
            )
        options = dict(conf)
        user_skip: Callable[[HttpRequest], bool] | None = options.pop("skip", None)
        if user_skip is not None and not callable(user_skip):
            raise InvalidArgument(f"invalid argument `skip`: must be a function of the request, got {user_skip!r}", "skip")

        def skip(request: HttpRequest) -> bool:
            return _exempt(request) or (user_skip is not None and bool(user_skip(request)))

        try:
            rules = policy(skip=skip, **options)
        except TypeError as e:  # an unknown option name
            raise InvalidArgument(f"invalid argument `RATEKEEPER_MIDDLEWARE`: {e}", "RATEKEEPER_MIDDLEWARE") from None
        self.policy = rules
        self._handle = _limited(rules, get_response)
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        return self._handle(request)


def _exempt(request: HttpRequest) -> bool:
    try:
        match = resolve(request.path_info)
    except Resolver404:
        return False
    return bool(getattr(match.func, _EXEMPT, False))
