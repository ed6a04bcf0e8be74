"""RQ integration (the wheel's ``[rq]`` extra): run a job under a limiter and, when the
limiter refuses, run it again later with backoff instead of failing it — Sidekiq Enterprise's
limiter middleware, for RQ.

::

    from ratekeeper.rq import limited

    @limited(stripe, key=lambda customer_id: customer_id)
    def charge(customer_id): ...

    queue.enqueue(charge, "cus_1", retry=Retry(max=3), on_success=Callback(report))

On :class:`~ratekeeper.OverLimit` the refused run returns an ``rq.Retry`` with
``interval = backoff.reschedule_in(n, retry_after)`` (rounded up to whole seconds, RQ's unit) for
its n-th reschedule: RQ puts the *same job* back as scheduled. Nothing of a finished job
happens for a refused run: jobs that ``depends_on`` it keep waiting for its real run, its
``on_success`` / ``on_failure`` / ``on_stopped`` callbacks fire once, for the real run, and its
id, arguments, queue, timeout, TTLs and ``Retry`` budget are its own. The count is in
``meta["ratekeeper_reschedules"]``. RQ runs scheduled jobs only on a worker started with
``--with-scheduler``. The job's own failures and ``Retry`` are untouched: reschedules are not
retries (RQ records each as a *retried* result). After ``backoff.max_reschedules`` reschedules
the job fails with the ``OverLimit``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

try:
    from rq import Retry, get_current_job
except ImportError as _missing:  # an optional extra: say which
    raise ImportError(f"ratekeeper.rq needs rq: pip install rq (the [rq] extra) ({_missing})") from _missing

from ._limiter import Limiter
from ._ratekeeper import Backoff
from .errors import OverLimit
from .jobs import CostFn, KeyFn, check_arguments, current_decision, run_limited

__all__ = ["COUNT", "ORIGIN", "Rescheduled", "limited", "reschedules", "current_decision"]

COUNT = "ratekeeper_reschedules"
"""The ``job.meta`` key counting a job's reschedules for being over limit."""

ORIGIN = "ratekeeper_origin"
"""Deprecated: no longer written. A refused run now puts the same job back (``rq.Retry``), so
there is no chain of jobs whose first id this key held."""


@dataclass(frozen=True)
class Rescheduled:
    """Deprecated: no longer returned. A refused run now returns an ``rq.Retry`` and the same job
    runs again later; the class stays so that code importing it keeps working."""

    job_id: str
    """The id of the job that runs later."""
    delay: float
    """Seconds until it runs."""
    attempt: int
    """Its reschedule count (1 for the first reschedule)."""

# Reschedules are bounded by the backoff's `max_reschedules`, not by RQ: a refused run returns a
# Retry whose `max` RQ never reaches (RQ compares it with the job's count of returned retries).
_UNBOUNDED = 2**31 - 1

F = TypeVar("F", bound=Callable[..., Any])


def reschedules(job: Any = None) -> int:
    """How many times the running job (or ``job``) was rescheduled for being over limit."""
    job = job if job is not None else get_current_job()
    return int((job.meta or {}).get(COUNT, 0)) if job is not None else 0


def _reschedule(job: Any, error: OverLimit, backoff: Backoff) -> Retry:
    attempt = reschedules(job) + 1
    delay = backoff.reschedule_in(attempt, error.retry_after)
    if delay is None:
        raise error
    job.meta[COUNT] = attempt
    job.save_meta()
    # RQ schedules in whole seconds; rounding up never runs the job before the limiter said.
    return Retry(max=_UNBOUNDED, interval=max(1, math.ceil(delay)))


def limited(
    limiter: Limiter,
    *,
    key: KeyFn = None,
    cost: CostFn = 1,
    backoff: Backoff | None = None,
) -> Callable[[F], F]:
    """Decorates an RQ job function so it runs only when ``limiter`` admits it, and is scheduled
    again (the same job) with ``backoff`` (default: Sidekiq's 300·n + rand(300) s, 20 times)
    when it does not.

    ``key`` and ``cost`` are fixed values or functions of the job's arguments. Rate limiters
    are checked without waiting; a concurrent limiter is held for the whole body (waiting up to
    its ``wait_timeout``). An ``OverLimit`` raised by the body reschedules the job too. Called
    outside a worker (no current job), a refusal raises ``OverLimit``."""
    policy = check_arguments(limiter, key, backoff)

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return run_limited(limiter, key, cost, args, kwargs, lambda: fn(*args, **kwargs))
            except OverLimit as error:
                job = get_current_job()
                if job is None:
                    raise
                return _reschedule(job, error, policy)

        return run  # type: ignore[return-value]

    return decorate
