"""ratekeeper.rq with real RQ workers: 4 `rq worker --with-scheduler` processes (forking a work
horse per job) on a test-started Redis, calling a real HTTP server that answers 429 beyond its
limit (see upstream.py for how calls are filed under windows). No mocks.

Default shape: 200 jobs against 20 calls per 1 s window; RATEKEEPER_LONG_TESTS=1 runs the
issue's shape, 200 jobs against 20 per 10 s."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
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
# Only a guard against hung workers, never an assertion on speed.
HANG_GUARD = 10 * (JOBS / LIMIT) * WINDOW + 180


@pytest.fixture
def setup(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[Any, Upstream, str, Any]]:
    from redis import Redis
    from rq import Queue

    upstream = Upstream(LIMIT, WINDOW)
    prefix = f"rq-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "RK_REDIS_URL": redis_server.url, "RK_PREFIX": prefix, "RK_UPSTREAM": upstream.url,
           "RK_LIMIT": str(LIMIT), "RK_WINDOW": str(WINDOW),
           "PYTHONPATH": os.pathsep.join([str(WORKERS), os.environ.get("PYTHONPATH", "")])}
    os.environ.update({k: v for k, v in env.items() if k.startswith("RK_")})
    sys.path.insert(0, str(WORKERS))
    sys.modules.pop("rq_jobs", None)
    import rq_jobs

    rq = str(Path(sys.executable).parent / "rq")
    logs = [open(tmp_path / f"worker-{i}.log", "wb") for i in range(PROCESSES)]
    workers = [
        subprocess.Popen([rq, "worker", "--with-scheduler", "--url", redis_server.url, "--name",
                          f"{prefix}-{i}", prefix], cwd=WORKERS, env=env, stdout=log, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL)
        for i, log in enumerate(logs)
    ]
    queue = Queue(prefix, connection=Redis.from_url(redis_server.url))
    try:
        from rq import Worker

        wait_for("the workers to start", lambda: Worker.count(queue=queue) >= PROCESSES)
        yield rq_jobs, upstream, prefix, queue
    finally:
        for w in workers:
            if w.poll() is None:
                os.kill(w.pid, signal.SIGTERM)  # warm shutdown: finishes the current job
        for w in workers:
            try:
                w.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(w.pid, signal.SIGKILL)
                w.wait()
        for log in logs:
            log.close()
        upstream.stop()
        sys.path.remove(str(WORKERS))


def wait_for(what: str, ready: Any) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not ready():
        assert time.monotonic() < deadline, f"hung: {what}"
        time.sleep(0.1)


def test_jobs_over_the_limit_are_rescheduled_never_sent_in_excess(setup: tuple[Any, Upstream, str, Any]) -> None:
    from rq import Retry

    from rq.registry import FinishedJobRegistry

    jobs, upstream, prefix, queue = setup
    # The current window's calls are taken (not sent to the API): the first jobs are refused
    # whatever the workers' speed. (Whether later ones are depends on how fast the workers
    # are, which this test does not assume.)
    fill_next_window(jobs.api, LIMIT, WINDOW)
    for n in range(JOBS):
        queue.enqueue(jobs.call_upstream, n, retry=Retry(max=1))
    wait_for("every job done", lambda: jobs.log.llen(f"{prefix}:done") >= JOBS)
    done = [json.loads(d) for d in jobs.log.lrange(f"{prefix}:done", 0, -1)]

    assert sorted(d["job"] for d in done) == list(range(JOBS))  # each job once
    assert [d["status"] for d in done] == [200] * JOBS
    assert upstream.excess == 0 and not upstream.bad_stamps
    assert max(upstream.by_admission.values()) <= LIMIT
    total = sum(d["reschedules"] for d in done)
    assert total >= 1
    # A refused run is not a finished run (the job is scheduled again, under its id): each job
    # finished once.
    wait_for("the last result", lambda: FinishedJobRegistry(queue=queue).count >= JOBS)
    assert FinishedJobRegistry(queue=queue).count == JOBS
    pids = {d["pid"] for d in done}  # the rq worker that forked the work horse
    assert len(pids) >= 2
    print(f"\n{JOBS} jobs, {LIMIT}/{WINDOW:g}s: {total} reschedules over {len(pids)} RQ workers; "
          f"counted by arrival the API would have seen {upstream.arrival_spill()} spill-over call(s)")


def test_after_max_reschedules_the_job_fails_with_over_limit(setup: tuple[Any, Upstream, str, Any]) -> None:
    from rq.registry import FailedJobRegistry

    jobs, _, prefix, queue = setup
    first = queue.enqueue(jobs.always_refused, 1)
    registry = FailedJobRegistry(queue=queue)
    wait_for("the job to fail", lambda: registry.count >= 1)
    assert registry.get_job_ids() == [first.id]  # the same job all along
    failed = queue.fetch_job(first.id)
    assert failed.meta["ratekeeper_reschedules"] == 3
    assert "OverLimit" in (failed.latest_result().exc_string or "")
    runs = [int(r) for r in jobs.log.lrange(f"{prefix}:refused-runs", 0, -1)]
    assert runs == [0, 1, 2, 3]  # the first run, then max_reschedules = 3 reschedules


def test_a_refused_run_is_not_a_success(setup: tuple[Any, Upstream, str, Any]) -> None:
    """Issue #31, item 8: jobs that depend on a refused job wait for its real run, and its
    callbacks fire once, for the real run: on_success when it succeeds, on_failure when it fails
    (and then its dependents never run)."""
    from rq import Callback
    from rq.registry import FailedJobRegistry

    jobs, _, prefix, queue = setup
    callbacks = {"on_success": Callback(jobs.on_success), "on_failure": Callback(jobs.on_failure)}
    good = queue.enqueue(jobs.refused_once, 1, **callbacks)
    queue.enqueue(jobs.dependent, 1, depends_on=good)
    bad = queue.enqueue(jobs.refused_once, 2, True, **callbacks)
    after_bad = queue.enqueue(jobs.dependent, 2, depends_on=bad)

    def logged(name: str) -> list[Any]:
        return [json.loads(x) for x in jobs.log.lrange(f"{prefix}:{name}", 0, -1)]

    # Each real run happens once its refusal's delay has passed; the guard only bounds a hang.
    guard = time.monotonic() + 120
    while not (["dependent", 1] in logged("order") and bad.id in FailedJobRegistry(queue=queue).get_job_ids()
               and len(logged("callbacks")) >= 2):
        assert time.monotonic() < guard, f"hung: order {logged('order')}, callbacks {logged('callbacks')}"
        time.sleep(0.1)
    order = logged("order")
    assert order.index(["real", 1]) < order.index(["dependent", 1]), f"the dependent ran first: {order}"
    assert order.count(["dependent", 1]) == 1 and ["dependent", 2] not in order, order
    assert sorted(logged("callbacks")) == [["failure", 2], ["success", 1, "'ran'"]]
    assert sorted(logged("once-runs")) == [[1, 0], [1, 1], [2, 0], [2, 1]]
    good.refresh()
    assert (good.get_status(), good.meta["ratekeeper_reschedules"], good.return_value()) == ("finished", 1, "ran")
    assert after_bad.get_status() == "deferred", "a dependent of a failed job never runs"
