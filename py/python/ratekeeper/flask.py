"""Rate limiting for Flask: :class:`RateLimiter`. Install with the wheel's ``[flask]`` extra.

Options and their meaning: ``docs/src/guides/http/index.md`` (the same in every language).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from flask import Flask, Request, Response, current_app, g, request

from . import _ratekeeper
from ._http import Admission, Count, HeaderForm, LimiterOption, Policy, ProxyHeader, Refusal
from .errors import InvalidArgument

__all__ = ["RateLimiter", "Refusal", "refusal_response"]

View = TypeVar("View", bound=Callable[..., Any])

_POLICY = "_ratekeeper_policy"
_EXEMPT = "_ratekeeper_exempt"


def refusal_response(refusal: Refusal) -> Response:
    """The default refusal: 429 (or 503) with an RFC 9457 ``application/problem+json`` body,
    ``Retry-After`` and the rate-limit header fields."""
    return Response(refusal.body, status=refusal.status, headers=list(refusal.headers), content_type=refusal.content_type)


def _peer(req: Request) -> str | None:
    return req.remote_addr


def _header(req: Request, name: str) -> str | None:
    # The WSGI server joins a field's lines by commas in the environ (gunicorn, Werkzeug's own).
    return req.headers.get(name)


class RateLimiter:
    """Limits a Flask app's requests: ``default`` applies to every view without a limit of its
    own; ``@limiter.limit(...)`` gives a view its own limit (one limiter object on several views
    is one shared limit); ``@limiter.exempt`` views touch nothing::

        limiter = RateLimiter(app, default=backend.window("api", 200, "hour"))

        @app.get("/search")
        @limiter.limit(backend.window("search", 10, "minute"))
        def search(): ...

    The keyword options (``key``, ``cost``, ``skip``, ``count``, ``headers``, ``on_refused``,
    ``shadow``, ``trusted_proxies``, ``proxy_header``, ``partition_key_secret``) apply to the default and are inherited by ``limit`` (which
    may override any). ``key``, ``cost``, ``skip`` and ``on_refused`` receive the Flask
    ``request``. Every option is validated here (``InvalidArgument`` naming it)."""

    def __init__(
        self,
        app: Flask | None = None,
        *,
        default: LimiterOption | None = None,
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
    ) -> None:
        self._options: dict[str, Any] = dict(
            key=key, cost=cost, skip=skip, count=count, headers=headers, on_refused=on_refused, shadow=shadow,
            trusted_proxies=trusted_proxies, proxy_header=proxy_header, partition_key_secret=partition_key_secret,
        )
        # Validates the options even without a default (an unlimited limiter touches no backend).
        checked = self._policy(default if default is not None else _ratekeeper.unlimited())
        self.default: Policy[Request] | None = checked if default is not None else None
        if app is not None:
            self.init_app(app)

    def _policy(self, limiter: LimiterOption, **overrides: Any) -> Policy[Request]:
        unknown = set(overrides) - set(self._options)
        if unknown:
            name = sorted(unknown)[0]
            raise InvalidArgument(f"invalid argument `{name}`: not an option of limit()", name)
        return Policy(limiter, **{**self._options, **overrides}, peer=_peer, header=_header)

    def init_app(self, app: Flask) -> None:
        """Hooks the limiter into ``app`` (for the application-factory pattern)."""
        app.before_request(self._before)
        app.after_request(self._after)
        app.teardown_request(self._teardown)

    def limit(self, limiter: LimiterOption, **options: Any) -> Callable[[View], View]:
        """A decorator giving a view its own limit (instead of the default), with the
        limiter's options overridden by ``options``. Put it under ``@app.route``."""
        policy = self._policy(limiter, **options)

        def decorate(view: View) -> View:
            if getattr(view, _POLICY, None) is not None:
                raise InvalidArgument(
                    "invalid argument `limiter`: this view already has a limit; pass a list for several limiters", "limiter"
                )
            setattr(view, _POLICY, policy)
            return view

        return decorate

    def exempt(self, view: View) -> View:
        """A decorator exempting a view from every limit: its requests touch nothing."""
        setattr(view, _EXEMPT, True)
        return view

    def _before(self) -> Response | None:
        view = current_app.view_functions.get(request.endpoint) if request.endpoint else None
        if view is not None and getattr(view, _EXEMPT, False):
            return None
        policy: Policy[Request] | None = getattr(view, _POLICY, None) or self.default
        if policy is None:
            return None
        admission = policy.admit(request)
        if admission is None:
            return None
        g._ratekeeper_admission = admission
        if admission.refusal is None:
            return None
        handler = policy.on_refused
        return handler(request, admission.refusal) if handler is not None else refusal_response(admission.refusal)

    def _after(self, response: Response) -> Response:
        admission: Admission | None = g.pop("_ratekeeper_admission", None)
        if admission is None or admission.refusal is not None:
            return response
        for name, value in admission.headers:
            response.headers.add(name, value)
        admission.settle(response.status_code)
        return response

    def _teardown(self, _exc: BaseException | None) -> None:
        # An exception no error handler turned into a response: settle as a failure.
        admission: Admission | None = g.pop("_ratekeeper_admission", None)
        if admission is not None and admission.refusal is None:
            admission.settle(500)
