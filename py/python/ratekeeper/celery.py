"""Celery integration (the wheel's ``[celery]`` extra): run a task under a limiter and, when
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

A countdown never reaches the broker's visibility timeout (``broker_transport_options
["visibility_timeout"]``, else the transport's default: one hour on Redis, 30 minutes on SQS).
A worker holds a message with a countdown unacknowledged until it is due, and Redis or SQS
deliver a message unacknowledged for that long a second time — the task would run twice. A
longer delay is travelled in hops of at most half the timeout: the message carries when it is
due (``ratekeeper-eta``), and a hop that arrives early is sent on again without running the task
or checking the limiter. Brokers without a visibility timeout (RabbitMQ) get the whole delay in
one countdown.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

try:
    from celery.exceptions import Retry
except ImportError as _missing:  # an optional extra: say which
    raise ImportError(f"ratekeeper.celery needs celery: pip install celery (the [celery] extra) ({_missing})") from _missing

from ._limiter import Limiter
from ._ratekeeper import Backoff
from .errors import InvalidArgument, OverLimit
from .jobs import CostFn, KeyFn, check_arguments, current_decision, run_limited

__all__ = ["ETA_HEADER", "HEADER", "HOP_SHARE", "limited", "reschedules", "visibility_timeout", "current_decision"]

HEADER = "ratekeeper-reschedules"
"""The message header counting a task's reschedules for being over limit."""
ETA_HEADER = "ratekeeper-eta"
"""The message header holding when a rescheduled task is due (Unix seconds), for the hops of a
delay longer than the broker's visibility timeout allows in one countdown."""
HOP_SHARE = 0.5
"""The longest countdown, as a share of the broker's visibility timeout: the rest is margin for
the time a message spends between its sending and its delivery."""

F = TypeVar("F", bound=Callable[..., Any])


def _header(request: Any, name: str) -> Any:
    # Celery copies a message's custom headers into `request.headers` and onto the request
    # itself; either holds them.
    return (getattr(request, "headers", None) or {}).get(name, getattr(request, name, None))


def reschedules(task: Any) -> int:
    """How many times the running task was rescheduled for being over limit (0 on its first
    run)."""
    return int(_header(task.request, HEADER) or 0)


def visibility_timeout(app: Any) -> float | None:
    """The seconds after which ``app``'s broker delivers an unacknowledged message again: the
    ``visibility_timeout`` transport option, else the transport's default (Redis: 3600, SQS:
    1800); ``None`` for a broker that has none (RabbitMQ)."""
    configured = (app.conf.broker_transport_options or {}).get("visibility_timeout")
    if configured not in (None, ""):
        return float(configured)
    with app.connection_for_write() as connection:  # does not connect
        channel = connection.transport.Channel
    default = getattr(channel, "visibility_timeout", None) or getattr(channel, "default_visibility_timeout", None)
    return float(default) if isinstance(default, (int, float)) and default > 0 else None


def _send_again(task: Any, due: float, attempt: int, error: OverLimit | None) -> Retry:
    """Sends the running task's message again, due at `due` (Unix seconds): with one countdown,
    or the first hop of at most `HOP_SHARE` of the broker's visibility timeout."""
    request = task.request
    delay = max(0.0, due - time.time())
    timeout = visibility_timeout(task.app)
    countdown = delay if timeout is None else min(delay, timeout * HOP_SHARE)
    headers = {**(getattr(request, "headers", None) or {}), HEADER: attempt, ETA_HEADER: due}
    # What `Task.retry` does, minus its `retries + 1`: the same message (id, args, links,
    # headers) sent again with a countdown, then `Retry` so the worker records the state.
    signature = task.signature_from_request(request, countdown=countdown, headers=headers)
    signature.apply_async()
    return Retry(exc=error, when=countdown, sig=signature)


def _reschedule(task: Any, error: OverLimit, backoff: Backoff) -> Retry:
    attempt = reschedules(task) + 1
    delay = backoff.reschedule_in(attempt, error.retry_after)
    if delay is None:
        raise error
    request = task.request
    if request.called_directly or request.is_eager:
        # No broker to send to (`task(...)`, `apply()`): Celery's own retry does what eager
        # mode can (re-running in place); its count of retries is then shared.
        headers = {**(getattr(request, "headers", None) or {}), HEADER: attempt}
        return task.retry(exc=error, countdown=delay, headers=headers)
    return _send_again(task, time.time() + delay, attempt, error)


def _early_hop(task: Any) -> Retry | None:
    """The next hop when the running message is a hop that arrived before its task is due."""
    request = task.request
    due = _header(request, ETA_HEADER)
    if due is None or request.called_directly or request.is_eager or float(due) <= time.time():
        return None
    return _send_again(task, float(due), reschedules(task), None)


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
            hop = _early_hop(task)
            if hop is not None:
                raise hop
            try:
                return run_limited(limiter, key, cost, args, kwargs, lambda: fn(task, *args, **kwargs))
            except OverLimit as error:
                raise _reschedule(task, error, policy) from None

        return run  # type: ignore[return-value]

    return decorate
