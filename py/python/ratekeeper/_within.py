"""``within_limit``: acquire, run, release — as ``with``, ``async with`` and a decorator."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, overload

from .errors import InvalidArgument, OverLimit

if TYPE_CHECKING:
    from ._limiter import Limiter
    from ._ratekeeper import Decision

__all__ = ["Permit", "WithinLimit", "WithinLimitOrSkip"]

P = ParamSpec("P")
R = TypeVar("R")


class Permit:
    """What a ``within_limit`` block gets: whether it was admitted, the decision, and (for
    points, token bucket and leaky limiters) the means to report the actual cost."""

    __slots__ = ("_limiter", "_key", "_cost", "_reported", "decision")

    decision: Decision | None
    """The decision that admitted the block; None when ``policy="ignore"`` skipped it."""

    def __init__(self, limiter: Limiter, key: str | None, cost: int, decision: Decision | None) -> None:
        self._limiter = limiter
        self._key = key
        self._cost = cost
        self._reported = False
        self.decision = decision

    @property
    def allowed(self) -> bool:
        """True when the block was admitted (always, under ``policy="raise"``)."""
        return self.decision is not None

    def __bool__(self) -> bool:
        return self.decision is not None

    def points_used(self, actual: int) -> Decision:
        """Reports the block's actual cost; the difference from the estimate (the ``cost``
        given to ``within_limit``) is charged (above the capacity: as debt, at most 16
        capacities ahead) or refunded. A permit reports once: a second report raises
        ``InvalidArgument`` naming ``actual`` and changes nothing."""
        self._claim_report()
        try:
            return self._limiter.points_used(self._cost, actual, self._key)
        except InvalidArgument:
            self._reported = False  # refused before anything was written: may be reported again
            raise

    async def apoints_used(self, actual: int) -> Decision:
        """asyncio form of :meth:`points_used`."""
        self._claim_report()
        try:
            return await self._limiter.apoints_used(self._cost, actual, self._key)
        except InvalidArgument:
            self._reported = False
            raise

    def _claim_report(self) -> None:
        # Claimed before the call: a report whose answer was lost (it may have been applied) is
        # not made twice.
        if self._reported:
            raise InvalidArgument(
                "invalid argument `actual`: points_used was already reported for this permit", "actual"
            )
        self._reported = True

    def __repr__(self) -> str:
        return f"Permit(allowed={self.allowed}, decision={self.decision!r})"


class _Block:
    __slots__ = ("_limiter", "_key", "_cost", "_ignore", "_wait_timeout", "_held")

    def __init__(
        self,
        limiter: Limiter,
        key: str | None,
        cost: int,
        policy: Literal["raise", "ignore"],
        wait_timeout: float | None,
    ) -> None:
        limiter._validate(key, cost, wait_timeout)
        self._limiter = limiter
        self._key = key
        self._cost = cost
        self._ignore = policy == "ignore"
        self._wait_timeout = wait_timeout
        self._held: list[Permit] = []

    # ---------------------------------------------------------------- acquiring and releasing

    def _enter(self) -> Permit:
        try:
            decision: Decision | None = self._limiter.acquire(self._key, self._cost, self._wait_timeout)
        except OverLimit:
            if not self._ignore:
                raise
            decision = None
        return Permit(self._limiter, self._key, self._cost, decision)

    def _exit(self, permit: Permit) -> None:
        lease = permit.decision.lease if permit.decision is not None else None
        if lease is not None:
            self._limiter.release(lease, self._key)

    async def _aenter(self) -> Permit:
        try:
            decision: Decision | None = await self._limiter.aacquire(self._key, self._cost, self._wait_timeout)
        except OverLimit:
            if not self._ignore:
                raise
            decision = None
        return Permit(self._limiter, self._key, self._cost, decision)

    async def _aexit(self, permit: Permit) -> None:
        lease = permit.decision.lease if permit.decision is not None else None
        if lease is not None:
            await self._limiter.arelease(lease, self._key)

    # ---------------------------------------------------------------- context managers

    def __enter__(self) -> Permit:
        permit = self._enter()
        self._held.append(permit)
        return permit

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._exit(self._held.pop())

    async def __aenter__(self) -> Permit:
        permit = await self._aenter()
        self._held.append(permit)
        return permit

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._aexit(self._held.pop())

    # ---------------------------------------------------------------- decorator

    def _decorate(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                permit = await self._aenter()
                if not permit:
                    return None
                try:
                    return await fn(*args, **kwargs)
                finally:
                    await self._aexit(permit)

            return run_async

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            permit = self._enter()
            if not permit:
                return None
            try:
                return fn(*args, **kwargs)
            finally:
                self._exit(permit)

        return run

    def __repr__(self) -> str:
        policy = "ignore" if self._ignore else "raise"
        return f"{type(self).__name__}({self._limiter!r}, key={self._key!r}, cost={self._cost}, policy={policy!r})"


class WithinLimit(_Block):
    """``limiter.within_limit(...)`` with ``policy="raise"``: over the limit (after waiting up
    to ``wait_timeout``), entering raises :class:`~ratekeeper.OverLimit`.

    Use it as ``with``/``async with`` (the block gets a :class:`Permit`) or as a decorator of a
    sync or async function. Any lease is released when the block ends, even on error."""

    __slots__ = ()

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]: ...
    @overload
    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]: ...
    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return self._decorate(fn)


class WithinLimitOrSkip(_Block):
    """``limiter.within_limit(..., policy="ignore")``: over the limit, the block is skipped.

    A ``with`` block still runs (Python cannot skip it) and sees ``permit.allowed == False``; a
    decorated function is not called and returns None."""

    __slots__ = ()

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R | None]]: ...
    @overload
    def __call__(self, fn: Callable[P, R]) -> Callable[P, R | None]: ...
    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return self._decorate(fn)
