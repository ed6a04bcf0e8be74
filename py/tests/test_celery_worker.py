"""ratekeeper.celery with a real Celery worker (prefork pool, 4 processes) on a real Redis
broker, calling a real HTTP server that answers 429 beyond its limit. No mocks.

Default shape: 200 jobs against 20 calls per 1 s window (about 10 s). RATEKEEPER_LONG_TESTS=1
runs the issue's shape: 200 jobs against 20 per 10 s (about 100 s)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import RedisServer
from .upstream import Upstream, fill_next_window

WORKERS = Path(__file__).resolve().parent / "workers"
LONG = os.environ.get("RATEKEEPER_LONG_TESTS") == "1"
JOBS, LIMIT, WINDOW = (200, 20, 10.0) if LONG else (200, 20, 1.0)
PROCESSES = 4
# Only a guard against a hung worker, never an assertion on speed: ten times the ideal run.
HANG_GUARD = 10 * (JOBS / LIMIT) * WINDOW + 120


class Worker:
    """A `celery worker` process group, stopped by its pid."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool=prefork",
             f"--concurrency={PROCESSES}", "--loglevel=INFO", "--without-gossip", "--without-mingle",
             "--without-heartbeat", "-n", f"rk-{uuid.uuid4().hex[:8]}@%h"],
            cwd=WORKERS, env=env, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)  # warm shutdown: the pool children exit with it
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


@pytest.fixture
def setup(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[Any, Upstream, str]]:
    upstream = Upstream(LIMIT, WINDOW)
    prefix = f"celery-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "RK_REDIS_URL": redis_server.url, "RK_PREFIX": prefix, "RK_UPSTREAM": upstream.url,
           "RK_LIMIT": str(LIMIT), "RK_WINDOW": str(WINDOW)}
    # The test process imports the same app to send jobs and read results.
    os.environ.update({k: v for k, v in env.items() if k.startswith("RK_")})
    sys.path.insert(0, str(WORKERS))
    sys.modules.pop("celery_app", None)
    import celery_app

    worker = Worker(env, tmp_path / "worker.log")
    try:
        deadline = time.monotonic() + HANG_GUARD
        while not celery_app.app.control.ping(timeout=0.5):  # the worker is consuming
            assert worker.proc.poll() is None and time.monotonic() < deadline, "the worker did not start"
        yield celery_app, upstream, prefix
    finally:
        worker.stop()
        upstream.stop()
        sys.path.remove(str(WORKERS))
        if worker.proc.returncode not in (0, None):
            print((tmp_path / "worker.log").read_text(errors="replace")[-4000:])


def runs(app: Any, prefix: str) -> list[tuple[str, str, int]]:
    return [tuple(json.loads(r)) for r in app.log.lrange(f"{prefix}:runs", 0, -1)]  # type: ignore[misc]


def test_jobs_over_the_limit_are_rescheduled_never_sent_in_excess(setup: tuple[Any, Upstream, str]) -> None:
    app, upstream, prefix = setup
    fill_next_window(app.api, LIMIT, WINDOW)
    results = [app.call_upstream.delay(job) for job in range(JOBS)]
    done = [r.get(timeout=HANG_GUARD) for r in results]

    # Every job completed, each once, and the API never refused one.
    assert sorted(d["job"] for d in done) == list(range(JOBS))
    assert [d["status"] for d in done] == [200] * JOBS
    assert upstream.excess == 0 and not upstream.bad_stamps
    assert sorted(int(c) for c in upstream.calls) == list(range(JOBS))
    assert max(upstream.by_admission.values()) <= LIMIT
    # Reschedules were counted apart from the task's retries (max_retries=0 would have failed
    # any job whose reschedule counted as a retry).
    assert all(d["retries"] == 0 for d in done)
    total = sum(d["reschedules"] for d in done)
    # The first window's calls were taken before the jobs were sent: the first jobs are
    # refused whatever the workers' speed (which this test does not assume).
    assert total >= 1
    # The count each run started with matches the final one: runs of a job = reschedules + 1.
    per_job = Counter(task_id for name, task_id, _ in runs(app, prefix) if name.endswith("call_upstream"))
    assert sorted(per_job.values()) == sorted(d["reschedules"] + 1 for d in done)
    # The work spread over the pool's processes, which shared the one limit.
    pids = {d["pid"] for d in done}
    assert len(pids) >= 2
    print(f"\n{JOBS} jobs, {LIMIT}/{WINDOW:g}s: {total} reschedules over {len(pids)} worker processes; "
          f"counted by arrival the API would have seen {upstream.arrival_spill()} spill-over call(s)")


def test_after_max_reschedules_the_job_fails_with_over_limit(setup: tuple[Any, Upstream, str]) -> None:
    import ratekeeper

    app, _, prefix = setup
    result = app.always_refused.delay(1)
    with pytest.raises(ratekeeper.OverLimit) as error:  # rebuilt from the JSON result backend
        result.get(timeout=HANG_GUARD)
    assert error.value.retry_after == 0.05
    assert result.state == "FAILURE"
    starts = [n for _, task_id, n in runs(app, prefix) if task_id == result.id]
    assert starts == [0, 1, 2, 3]  # the first run, then max_reschedules = 3 reschedules
