"""Several processes on one limiter (judged by the server's time of each decision), and
fork safety."""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ratekeeper

from .conftest import RedisServer, unique_prefix

WORKER = Path(__file__).parent / "workers" / "hammer.py"


def test_eight_processes_never_over_admit(redis_server: RedisServer) -> None:
    prefix, seconds = unique_prefix(), 1.5
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), redis_server.url, prefix, str(seconds)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        start_at = time.time() + 0.3
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(f"{start_at}\n")
            p.stdin.flush()
        reports = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(r["calls"] > 0 for r in reports)

    def merged(name: str) -> list[int]:
        return sorted(t for r in reports for t in r["admitted"][name])

    # window: never more than 20 admissions in any 0.25 s span.
    window = merged("window")
    assert all(window[i + 20] - window[i] >= 250_000 for i in range(len(window) - 20))
    # bucket: at most 20 per fixed 0.25 s window aligned to the epoch.
    counts: dict[int, int] = {}
    for t in merged("bucket"):
        counts[t // 250_000] = counts.get(t // 250_000, 0) + 1
    assert max(counts.values()) <= 20
    # token bucket (80/s, burst 10): admissions i..j (inclusive) fit capacity + elapsed * rate.
    tb = merged("token_bucket")
    emission_us = 1_000_000 // 80
    for i in range(len(tb)):
        for j in range(i, len(tb)):
            assert j - i + 1 <= 10 + (tb[j] - tb[i]) // emission_us, (i, j)
    # The limits were actually reached: the processes together admitted about what they allow.
    assert len(window) >= 20 * seconds / 0.25 * 0.6
    assert len(tb) >= (10 + 80 * seconds) * 0.6


def _child(fn: "object", timeout: float = 30.0) -> dict[str, object]:
    """Forks; the child runs `fn` and reports its result (or error) through a pipe."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read)
        try:
            result = {"ok": fn()}  # type: ignore[operator]
        except BaseException as e:
            result = {"error": repr(e)}
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], timeout)
    if not ready:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(read)
        pytest.fail(f"the forked child did not answer within {timeout} s")
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(data)  # type: ignore[no-any-return]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_child_and_parent_keep_working(redis_server: RedisServer) -> None:
    prefix = unique_prefix()
    memory = ratekeeper.Backend().token_bucket("mem", 1, 100)
    redis = ratekeeper.Backend.redis(redis_server.url, prefix=prefix, deadline=5.0, connect_timeout=5.0)
    shared = redis.token_bucket("shared", 1, 100)
    mutex = redis.concurrent("mutex", 1)
    # The parent has used both backends (runtime started, Redis connected, asyncio bridge made).
    assert memory.check("k").remaining == 99 and shared.check("k").remaining == 99

    async def parent_async() -> int:
        return (await shared.acheck("k")).remaining

    assert asyncio.run(parent_async()) == 98

    def in_child() -> list[int]:
        async def child_async() -> int:
            return (await shared.acheck("k")).remaining

        out = [memory.check("k").remaining, shared.check("k").remaining, asyncio.run(child_async())]
        d = mutex.acquire(None, 1, 1)
        assert d.lease is not None
        mutex.release(d.lease)
        return out

    child = _child(in_child)
    assert child == {"ok": [98, 97, 96]}, child  # the child's memory is its own copy
    # The parent keeps working, and sees the child's Redis calls.
    assert memory.check("k").remaining == 98
    assert shared.check("k").remaining == 95
    assert asyncio.run(parent_async()) == 94
    # A child of a process that forked before ever touching the runtime works too.
    assert _child(lambda: ratekeeper.Backend().bucket("b", 3, 60).check().remaining) == {"ok": 2}
