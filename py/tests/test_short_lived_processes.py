"""Short-lived processes (one check each, then exit without calling `flush()`) on a real Redis:
the counts reach the fleet metrics exactly, through the flush the library runs at exit, and no
key per process outlives it by more than a minute; the registry keeps a bounded number of users per
limiter."""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import time

import ratekeeper

from .conftest import RedisServer, unique_prefix

# Lean by default: 200 forked children that exit as the interpreter does (running the atexit
# hooks), plus a few whole interpreters; RATEKEEPER_LONG_TESTS=1 runs 200 whole interpreters.
LONG = os.environ.get("RATEKEEPER_LONG_TESTS") == "1"
FORKED = 0 if LONG else 200
INTERPRETERS = 200 if LONG else 10
BATCH = 10
ONE_CHECK = (
    "import sys, ratekeeper\n"
    "backend = ratekeeper.Backend.redis(sys.argv[1], prefix=sys.argv[2], deadline=10)\n"
    "assert backend.window('short', 1_000_000, 3600).check().allowed\n"
)


def _forked_check(url: str, prefix: str) -> int:
    """A child that checks once and exits as a Python process does: the interpreter's exit runs
    the atexit hooks (`atexit._run_exitfuncs`), then the process ends."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            backend = ratekeeper.Backend.redis(url, prefix=prefix, deadline=10)
            code = 0 if backend.window("short", 1_000_000, 3600).check().allowed else 2
            atexit._run_exitfuncs()
        finally:
            os._exit(code)
    return pid


def _run_in_batches(url: str, prefix: str) -> None:
    for start in range(0, FORKED, BATCH):
        for pid in [_forked_check(url, prefix) for _ in range(start, min(start + BATCH, FORKED))]:
            assert os.waitpid(pid, 0)[1] == 0
    for start in range(0, INTERPRETERS, BATCH):
        batch = [subprocess.Popen([sys.executable, "-c", ONE_CHECK, url, prefix], stderr=subprocess.PIPE, text=True)
                 for _ in range(start, min(start + BATCH, INTERPRETERS))]
        for p in batch:
            _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err


def test_short_lived_processes_count_exactly_and_leave_no_key_per_process(redis_server: RedisServer) -> None:
    prefix = unique_prefix()
    started = time.monotonic()
    _run_in_batches(redis_server.url, prefix)
    elapsed = time.monotonic() - started
    backend = ratekeeper.Backend.redis(redis_server.url, prefix=prefix)
    fleet = {name: m for name, _, m in backend.metrics(fleet=True)}
    assert fleet["short"].allowed == (FORKED + INTERPRETERS), f"{fleet['short'].allowed} of {(FORKED + INTERPRETERS)} checks counted"
    keys = redis_server.cli("--scan", "--pattern", f"{prefix}*").split()
    print(f"{FORKED} forked and {INTERPRETERS} whole processes in {elapsed:.1f} s left {len(keys)} keys")
    # The limiter's state, its fleet metrics and history, the registry's names and entry; each
    # process's flush sequences go within a minute of its exit (not a day).
    sequences = [k for k in keys if "metrics-seq" in k]
    assert len(sequences) <= FORKED + INTERPRETERS
    for key in sequences:
        assert 0 < int(redis_server.cli("PTTL", key)) <= 60_000, key
    assert len(keys) - len(sequences) <= 7, sorted(keys)
    [info] = [i for i in backend.limiters() if i.name == "short"]
    assert info.processes == (FORKED + INTERPRETERS), "every process registered at exit"


def test_the_registry_keeps_the_latest_users_of_a_limiter(redis_server: RedisServer) -> None:
    """Pod churn names a new host per deploy: past 32 users, the oldest go."""
    prefix = unique_prefix()
    backend = ratekeeper.Backend.redis(redis_server.url, prefix=prefix)
    backend.window("churn", 10, 60).check()
    backend.flush()
    [entry] = [k for k in redis_server.cli("--scan", "--pattern", f"{prefix}*registry*churn*").split()]
    now_ms = int(time.time() * 1000)
    for i in range(40):
        redis_server.cli("HSET", entry, f"user:python 0.0.{i} pod-{i}", str(now_ms - 60_000 + i))
    # A process registers again (as it does each minute): the 32 latest users stay.
    ratekeeper.Backend.redis(redis_server.url, prefix=prefix).window("churn", 10, 60).check()
    subprocess.run([sys.executable, "-c", ONE_CHECK.replace("'short', 1_000_000, 3600", "'churn', 10, 60"),
                    redis_server.url, prefix], check=True)
    users = [i for i in backend.limiters() if i.name == "churn"][0].users
    assert len(users) == 32, users
    assert "python 0.0.39 pod-39" in users and "python 0.0.8 pod-8" not in users, users
