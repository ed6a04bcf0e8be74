"""Celery integration (``pip install ratekeeper[celery]``): run a task under a limiter and, when
the limiter refuses, reschedule the task with backoff instead of failing it — Sidekiq
Enterprise's limiter middleware, for Celery.

::

    from ratekeeper.celery import limited

    @app.task(bind=True, max_retries=3)          # bind=True: the wrapper needs the task
    @limited(stripe, key=lambda customer_id: customer_id)
    def charge(self, customer_id): ...

On :class:`~ratekeeper.OverLimit` the task is sent again with
``countdown = backoff.reschedule_in(n, retry_after)`` for its n-th reschedule, and the worker
marks it ``RETRY``. Reschedules are counted in a message header (``ratekeeper-reschedules``),
not in ``request.retries``: the task's ``max_retries`` and ``autoretry_for`` keep counting only
its own failures. After ``backoff.max_reschedules`` reschedules the task fails with the
``OverLimit``, and Celery's own retry policy (if any) applies to it like to any other error.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

try:
    from celery.exceptions import Retry
except ImportError as _missing:  # an optional extra: say which
    raise ImportError(f"ratekeeper.celery needs celery: pip install 'ratekeeper[celery]' ({_missing})") from _missing

from ._limiter import Limiter
from ._ratekeeper import Backoff
from .errors import InvalidArgument, OverLimit
from .jobs import CostFn, KeyFn, check_arguments, current_decision, run_limited

__all__ = ["HEADER", "limited", "reschedules", "current_decision"]

HEADER = "ratekeeper-reschedules"
"""The message header counting a task's reschedules for being over limit."""

F = TypeVar("F", bound=Callable[..., Any])


def reschedules(task: Any) -> int:
    """How many times the running task was rescheduled for being over limit (0 on its first
    run)."""
    request = task.request
    # Celery copies a message's custom headers into `request.headers` and onto the request
    # itself; either holds the count.
    value = (getattr(request, "headers", None) or {}).get(HEADER, getattr(request, HEADER, None))
    return int(value or 0)


def _reschedule(task: Any, error: OverLimit, backoff: Backoff) -> Retry:
    attempt = reschedules(task) + 1
    delay = backoff.reschedule_in(attempt, error.retry_after)
    if delay is None:
        raise error
    request = task.request
    headers = {**(getattr(request, "headers", None) or {}), HEADER: attempt}
    if request.called_directly or request.is_eager:
        # No broker to send to (`task(...)`, `apply()`): Celery's own retry does what eager
        # mode can (re-running in place); its count of retries is then shared.
        return task.retry(exc=error, countdown=delay, headers=headers)
    # What `Task.retry` does, minus its `retries + 1`: the same message (id, args, links,
    # headers) sent again with a countdown, then `Retry` so the worker records the state.
    signature = task.signature_from_request(request, countdown=delay, headers=headers)
    signature.apply_async()
    return Retry(exc=error, when=delay, sig=signature)


def limited(
    limiter: Limiter,
    *,
    key: KeyFn = None,
    cost: CostFn = 1,
    backoff: Backoff | None = None,
) -> Callable[[F], F]:
    """Decorates the function of a bound task (``@app.task(bind=True)`` above it) so it runs
    only when ``limiter`` admits it, and is rescheduled with ``backoff`` (default: Sidekiq's
    300·n + rand(300) s, 20 times) when it does not.

    ``key`` and ``cost`` are fixed values or functions of the task's arguments (without
    ``self``). Rate limiters are checked without waiting; a concurrent limiter is held for the
    whole body (waiting up to its ``wait_timeout``). Inside the body,
    :func:`current_decision` is the decision that admitted it."""
    policy = check_arguments(limiter, key, backoff)

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def run(task: Any, *args: Any, **kwargs: Any) -> Any:
            if not hasattr(task, "request"):
                raise InvalidArgument(
                    "invalid argument `self`: a limited task must be bound: use @app.task(bind=True)", "self"
                )
            try:
                return run_limited(limiter, key, cost, args, kwargs, lambda: fn(task, *args, **kwargs))
            except OverLimit as error:
                raise _reschedule(task, error, policy) from None

        return run  # type: ignore[return-value]

    return decorate
