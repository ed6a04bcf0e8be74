"""The Celery app of test_celery_worker.py, imported by a real `celery worker` (prefork pool)
and by the test that sends the jobs. Configured from the environment the test sets."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

import redis
from celery import Celery, Task
from celery.signals import task_prerun

import ratekeeper
from ratekeeper.celery import current_decision, limited, reschedules

URL = os.environ["RK_REDIS_URL"]
PREFIX = os.environ["RK_PREFIX"]
UPSTREAM = os.environ["RK_UPSTREAM"]
LIMIT = int(os.environ["RK_LIMIT"])
WINDOW = float(os.environ["RK_WINDOW"])

app = Celery("rk_celery_test", broker=URL, backend=URL)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
if os.environ.get("RK_VISIBILITY_TIMEOUT"):
    # A broker that delivers a message again when it was held unacknowledged this long, looking
    # for such messages every second (Kombu's default: every 10 s, scanning one call in 10).
    app.conf.broker_transport_options = {"visibility_timeout": float(os.environ["RK_VISIBILITY_TIMEOUT"]),
                                         "unacked_restore_interval": 1, "unacked_restore_throttle": 1}

# Built in the worker's parent process, before the fork: the core rebuilds its runtime and
# connections in each child (what this test also exercises).
# A generous per-call deadline: the test machine may be loaded (the default, 200 ms, is for
# production latency; a timed-out check would fail the job, as fail_closed should).
backend = ratekeeper.Backend.redis(URL, prefix=PREFIX, deadline=5.0)
api = backend.bucket("upstream", LIMIT, WINDOW)
# Small steps so that reschedule_in is dominated by the limiter's retry_after; the jitter
# spreads the refused jobs over the next window instead of all at its first microsecond.
backoff = ratekeeper.Backoff(base=0.01, jitter=WINDOW / 2, max_reschedules=10_000)

roomy = backend.token_bucket("roomy", 1000, 1000)
give_up = ratekeeper.Backoff(base=0.01, jitter=0, max_reschedules=3)

log = redis.Redis.from_url(URL)


@task_prerun.connect
def _record_run(task_id: str, task: Task, **_: Any) -> None:
    # Every run of every job, with the reschedule count it started with.
    log.rpush(f"{PREFIX}:runs", json.dumps([task.name, task_id, reschedules(task)]))


@app.task(bind=True, max_retries=0)  # 0: a reschedule counted as a retry would fail the job
@limited(api, backoff=backoff)
def call_upstream(self: Task, job: int) -> dict[str, Any]:
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
    return {"job": job, "status": status, "reschedules": reschedules(self), "retries": self.request.retries,
            "pid": os.getpid()}


@app.task(bind=True)
@limited(roomy, key=lambda job: f"job-{job}", backoff=give_up)
def always_refused(self: Task, job: int) -> None:
    # An OverLimit from inside the body (here: as if the API had answered 429 with a
    # Retry-After of 50 ms) reschedules the job like the limiter's own refusal.
    raise ratekeeper.OverLimit("over limit: the API said 429", 0.05)


# Refused once for LONG_DELAY seconds (longer than the test's visibility timeout), then runs.
LONG_DELAY = float(os.environ.get("RK_LONG_DELAY", "8"))
once = ratekeeper.Backoff(base=0.01, jitter=0, max_reschedules=3)


@app.task(bind=True)
@limited(roomy, key=lambda job: f"long-{job}", backoff=once)
def refused_once_long(self: Task, job: int) -> int:
    if reschedules(self) == 0:
        raise ratekeeper.OverLimit("over limit: the API said 429", LONG_DELAY)
    log.rpush(f"{PREFIX}:long-runs", job)
    return job
