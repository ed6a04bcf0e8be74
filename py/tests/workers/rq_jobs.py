"""The job functions of test_rq_worker.py, imported by real `rq worker --with-scheduler`
processes (each forking a work horse per job). Configured from the environment the test sets."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

import redis

import ratekeeper
from ratekeeper.rq import current_decision, limited, reschedules

URL = os.environ["RK_REDIS_URL"]
PREFIX = os.environ["RK_PREFIX"]
UPSTREAM = os.environ["RK_UPSTREAM"]
LIMIT = int(os.environ["RK_LIMIT"])
WINDOW = float(os.environ["RK_WINDOW"])

# Built in the worker before it forks each work horse: the core rebuilds its runtime and
# connections in the child.
# A generous per-call deadline: the test machine may be loaded (the default is 200 ms).
backend = ratekeeper.Backend.redis(URL, prefix=PREFIX, deadline=5.0)
api = backend.bucket("upstream", LIMIT, WINDOW)
# Small steps, so the delay is the limiter's retry_after; the jitter spreads the refused jobs.
backoff = ratekeeper.Backoff(base=0.01, jitter=WINDOW / 2, max_reschedules=10_000)
roomy = backend.token_bucket("roomy", 1000, 1000)
give_up = ratekeeper.Backoff(base=0.01, jitter=0, max_reschedules=3)
log = redis.Redis.from_url(URL)


@limited(api, backoff=backoff)
def call_upstream(job: int) -> int:
    decision = current_decision()
    assert decision is not None
    request = urllib.request.Request(
        f"{UPSTREAM}/call?job={job}", headers={"X-Admitted-Us": str(decision.decided_at_us)}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    log.rpush(f"{PREFIX}:done", json.dumps({"job": job, "status": status, "reschedules": reschedules(),
                                            "pid": os.getppid()}))
    return status


@limited(roomy, key=lambda job: f"job-{job}", backoff=give_up)
def always_refused(job: int) -> None:
    log.rpush(f"{PREFIX}:refused-runs", reschedules())
    # As if the API had answered 429 with a Retry-After of 50 ms.
    raise ratekeeper.OverLimit("over limit: the API said 429", 0.05)


@limited(roomy, key=lambda job, fail=False: f"once-{job}", backoff=give_up)
def refused_once(job: int, fail: bool = False) -> str:
    """Refused on its first run (as if the API had answered 429), then runs for real: ends with
    "ran", or fails when `fail`."""
    log.rpush(f"{PREFIX}:once-runs", json.dumps([job, reschedules()]))
    if reschedules() == 0:
        raise ratekeeper.OverLimit("over limit: the API said 429", 0.05)
    log.rpush(f"{PREFIX}:order", json.dumps(["real", job]))
    if fail:
        raise RuntimeError("the real run fails")
    return "ran"


def dependent(job: int) -> None:
    log.rpush(f"{PREFIX}:order", json.dumps(["dependent", job]))


def on_success(job: Any, connection: Any, result: Any, *args: Any, **kwargs: Any) -> None:
    log.rpush(f"{PREFIX}:callbacks", json.dumps(["success", job.args[0], repr(result)]))


def on_failure(job: Any, connection: Any, *exc_info: Any) -> None:
    log.rpush(f"{PREFIX}:callbacks", json.dumps(["failure", job.args[0]]))
