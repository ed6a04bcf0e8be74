"""RQ integration (``pip install ratekeeper[rq]``): run a job under a limiter and, when the
limiter refuses, enqueue it again later with backoff instead of failing it — Sidekiq
Enterprise's limiter middleware, for RQ.

::

    from ratekeeper.rq import limited

    @limited(stripe, key=lambda customer_id: customer_id)
    def charge(customer_id): ...

    queue.enqueue(charge, "cus_1", retry=Retry(max=3))

On :class:`~ratekeeper.OverLimit` the job is enqueued again with
``Queue.enqueue_in(backoff.reschedule_in(n, retry_after), ...)`` for its n-th reschedule: same
function, arguments, queue, timeout, TTLs and remaining ``Retry`` budget, and its ``meta`` with
the count (``meta["ratekeeper_reschedules"]``) and the first job's id
(``meta["ratekeeper_origin"]``). RQ runs scheduled jobs only on a worker started with
``--with-scheduler``. The refused run itself ends as *finished*, returning a
:class:`Rescheduled` that names the job carrying on. RQ has no way to put a running job back
as scheduled under the same id (the worker marks it finished or failed when the function
returns), hence a new job. The job's own failures and ``Retry`` are untouched: reschedules are
not retries. After ``backoff.max_reschedules`` reschedules the job fails with the ``OverLimit``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

try:
    from rq import Queue, Retry, get_current_job
except ImportError as _missing:  # an optional extra: say which
    raise ImportError(f"ratekeeper.rq needs rq: pip install 'ratekeeper[rq]' ({_missing})") from _missing

from ._limiter import Limiter
from ._ratekeeper import Backoff
from .errors import OverLimit
from .jobs import CostFn, KeyFn, check_arguments, current_decision, run_limited

__all__ = ["COUNT", "ORIGIN", "Rescheduled", "limited", "reschedules", "current_decision"]

COUNT = "ratekeeper_reschedules"
"""The ``job.meta`` key counting a job's reschedules for being over limit."""
ORIGIN = "ratekeeper_origin"
"""The ``job.meta`` key holding the id of the first job of a chain of reschedules."""

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Rescheduled:
    """What a job refused by its limiter returns: the job that will run it later."""

    job_id: str
    """The id of the new job."""
    delay: float
    """Seconds until it runs."""
    attempt: int
    """Its reschedule count (1 for the first reschedule)."""


def reschedules(job: Any = None) -> int:
    """How many times the running job (or ``job``) was rescheduled for being over limit."""
    job = job if job is not None else get_current_job()
    return int((job.meta or {}).get(COUNT, 0)) if job is not None else 0


def _reschedule(job: Any, error: OverLimit, backoff: Backoff) -> Rescheduled:
    attempt = reschedules(job) + 1
    delay = backoff.reschedule_in(attempt, error.retry_after)
    if delay is None:
        raise error
    queue = Queue(job.origin, connection=job.connection, serializer=job.serializer)
    retry = None
    if job.retries_left:
        retry = Retry(max=job.retries_left, interval=job.retry_intervals or 0)
    new = queue.enqueue_in(
        timedelta(seconds=delay),
        job.func,
        args=job.args,
        kwargs=job.kwargs,
        job_timeout=job.timeout,
        result_ttl=job.result_ttl,
        ttl=job.ttl,
        failure_ttl=job.failure_ttl,
        description=job.description,
        retry=retry,
        meta={**(job.meta or {}), COUNT: attempt, ORIGIN: (job.meta or {}).get(ORIGIN, job.id)},
    )
    return Rescheduled(job_id=new.id, delay=delay, attempt=attempt)


def limited(
    limiter: Limiter,
    *,
    key: KeyFn = None,
    cost: CostFn = 1,
    backoff: Backoff | None = None,
) -> Callable[[F], F]:
    """Decorates an RQ job function so it runs only when ``limiter`` admits it, and is enqueued
    again with ``backoff`` (default: Sidekiq's 300·n + rand(300) s, 20 times) when it does not.

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
