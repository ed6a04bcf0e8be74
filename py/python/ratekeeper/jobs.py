"""What every worker integration (``ratekeeper.celery``, ``ratekeeper.rq``) shares: running a job
body under a limiter, and the decision that admitted it.

Rate limiters (token bucket, bucket, window...) are checked without waiting: a job that cannot
run now is better rescheduled than left holding a worker process. Concurrent limiters are held
for the whole body (``within_limit``: waiting up to the limiter's ``wait_timeout``, releasing
after). Either way a refusal raises :class:`~ratekeeper.OverLimit` carrying ``retry_after``,
which the integration turns into a reschedule through :class:`~ratekeeper.Backoff`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar, Union

from ._limiter import Limiter
from ._ratekeeper import Backoff, Decision
from .errors import InvalidArgument, OverLimit

__all__ = ["KeyFn", "CostFn", "current_decision", "run_limited"]

R = TypeVar("R")

KeyFn = Union[str, None, Callable[..., Union[str, None]]]
"""A job's limiter key: a fixed string, None (the limiter's shared key), or a function of the
job's arguments (called as the job is: ``key(*args, **kwargs)``)."""

CostFn = Union[int, Callable[..., int]]
"""A job's cost: a whole number, or a function of the job's arguments."""

_current: ContextVar[Decision | None] = ContextVar("ratekeeper_job_decision", default=None)


def current_decision() -> Decision | None:
    """The decision that admitted the job body now running in this thread or task (its
    ``decided_at_us`` is the limiter's clock: Redis's ``TIME`` on a Redis backend), or None
    outside a limited job."""
    return _current.get()


def resolve(value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A key or cost: called with the job's arguments when it is a function."""
    return value(*args, **kwargs) if callable(value) else value


def check_key(key: Any) -> None:
    """Refuses, naming `key`, what is neither a str, None nor a function (a misplaced argument
    would otherwise surface only inside a worker, at the first job)."""
    if not (key is None or isinstance(key, str) or callable(key)):
        raise InvalidArgument(
            f"invalid argument `key`: must be a str, None or a function of the job's arguments, got {type(key).__name__}",
            "key",
        )


def check_arguments(limiter: Any, key: Any, backoff: Any) -> Backoff:
    """Checks what a job decorator was given (the same for every job system) and returns the
    backoff policy to use: ``backoff``, or Sidekiq's default."""
    if not isinstance(limiter, Limiter):
        raise InvalidArgument(
            f"invalid argument `limiter`: must be a ratekeeper Limiter, got {type(limiter).__name__}", "limiter"
        )
    check_key(key)
    if backoff is not None and not isinstance(backoff, Backoff):
        raise InvalidArgument(
            f"invalid argument `backoff`: must be a ratekeeper.Backoff, got {type(backoff).__name__}", "backoff"
        )
    return backoff if backoff is not None else Backoff()


def run_limited(
    limiter: Limiter,
    key: KeyFn,
    cost: CostFn,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    body: Callable[[], R],
) -> R:
    """Runs ``body`` if ``limiter`` admits the job now (a concurrent limiter: while holding a
    slot), or raises :class:`OverLimit` with the limiter's ``retry_after``."""
    k = resolve(key, args, kwargs)
    c = resolve(cost, args, kwargs)
    if limiter.kind == "concurrent":
        with limiter.within_limit(k, c) as permit:
            token = _current.set(permit.decision)
            try:
                return body()
            finally:
                _current.reset(token)
    decision = limiter.check(k, c)
    if not decision.allowed:
        raise OverLimit(
            f"over limit: `{limiter.name}` retry after {decision.retry_after:.6f}s", decision.retry_after
        )
    token = _current.set(decision)
    try:
        return body()
    finally:
        _current.reset(token)
