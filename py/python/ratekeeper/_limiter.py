"""``ratekeeper.Limiter``: the native limiter plus ``within_limit``."""

from __future__ import annotations

import asyncio

from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

if TYPE_CHECKING:
    from typing_extensions import Self

from . import _ratekeeper
from ._within import WithinLimit, WithinLimitOrSkip
from .errors import InvalidArgument

__all__ = ["Limiter", "HttpResponse"]


class HttpResponse(Protocol):
    """What :meth:`Limiter.observe_response` reads of a response: ``requests.Response`` and
    ``httpx.Response`` both fit (``status_code``, and ``headers`` with ``items()``)."""

    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> Any: ...


class Limiter(_ratekeeper.NativeLimiter):
    """A rate limiter bound to a backend; build one with a :class:`Backend` method. Safe to
    share between threads, tasks and event loops.

    Every call takes an optional ``key`` (a user id, an IP...), so one limiter serves many
    identities. ``check``/``peek``/``acquire``/``reset``/``release``/``extend``/``points_used``
    block (releasing the GIL on Redis); their ``a``-prefixed forms return asyncio futures."""

    __slots__ = ()

    if TYPE_CHECKING:
        # The native `__new__` (another handle on `limiter`) makes an instance of the class it is
        # called on; its generated stub can only say `NativeLimiter`.
        def __new__(cls, limiter: _ratekeeper.NativeLimiter) -> Self: ...

    @overload
    def within_limit(
        self,
        key: str | None = None,
        cost: int = 1,
        *,
        policy: Literal["raise"] = "raise",
        wait_timeout: float | None = None,
    ) -> WithinLimit: ...
    @overload
    def within_limit(
        self,
        key: str | None = None,
        cost: int = 1,
        *,
        policy: Literal["ignore"],
        wait_timeout: float | None = None,
    ) -> WithinLimitOrSkip: ...
    def within_limit(
        self,
        key: str | None = None,
        cost: int = 1,
        *,
        policy: Literal["raise", "ignore"] = "raise",
        wait_timeout: float | None = None,
    ) -> WithinLimit | WithinLimitOrSkip:
        """Acquire (waiting up to ``wait_timeout`` seconds, default the limiter's), run the
        block, release any lease — as ``with``, ``async with`` or a decorator::

            with erp.within_limit("tenant-3") as permit: ...
            async with erp.within_limit("tenant-3"): ...

            @erp.within_limit("tenant-3")
            def sync_job() -> None: ...

        ``policy="raise"`` (default) raises :class:`OverLimit` when the limit cannot be had in
        time; ``policy="ignore"`` skips the block instead (see :class:`WithinLimitOrSkip`)."""
        if policy == "raise":
            return WithinLimit(self, key, cost, policy, wait_timeout)
        if policy == "ignore":
            return WithinLimitOrSkip(self, key, cost, policy, wait_timeout)
        raise InvalidArgument(f'invalid argument `policy`: must be "raise" or "ignore", got {policy!r}', "policy")

    def observe_response(
        self, response: HttpResponse, key: str | None = None, max_pause: float | None = None
    ) -> float | None:
        """:meth:`observe` on a ``requests`` or ``httpx`` response (anything with
        ``status_code`` and ``headers``)::

            response = session.get(url)
            limiter.observe_response(response)  # a 429 with Retry-After: 3 pauses every process

        The pause lasts at most ``max_pause`` seconds (default: the limiter's, one hour).
        Returns the pause in effect in seconds, or ``None`` when the response asks for none."""
        return self.observe(response.status_code, response.headers, key, max_pause)

    def aobserve_response(
        self, response: HttpResponse, key: str | None = None, max_pause: float | None = None
    ) -> asyncio.Future[float | None]:
        """asyncio form of :meth:`observe_response`."""
        return self.aobserve(response.status_code, response.headers, key, max_pause)
