"""A Sentinel-managed primary through the Python binding, on real processes (``rk-test-redis
start --sentinel``: a primary, two replicas, three ``redis-server --sentinel``, down-after 1 s):
``Backend.sentinel`` and the ``redis+sentinel://`` URL, sync and asyncio; the conformance
vectors; a SIGKILLed primary followed to the promoted replica with its count; ``replica_acks``.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import ratekeeper
from .conftest import REDIS_CLI, REDIS_OPTIONS, _start, rk_test_redis, unique_prefix
from .test_vectors import run_all

SERVICE = "rkprimary"
# How long after the sentinels name the promoted replica both call styles must answer again.
ANSWER_AFTER_PROMOTION = 1.0
GIVE_UP = 30.0


def acheck(limiter: ratekeeper.Limiter, key: str) -> ratekeeper.Decision:
    """``limiter.acheck(key)`` awaited in an event loop of its own."""
    async def call() -> ratekeeper.Decision:
        return await limiter.acheck(key)
    return asyncio.run(call())


def cli(port: int, *args: str) -> str:
    out = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(port), *args],
                         capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


class SentinelGroup:
    """The group ``rk-test-redis`` starts: data nodes first (the primary first), then sentinels."""

    def __init__(self) -> None:
        servers: list[dict[str, Any]] = _start("--sentinel")
        self.nodes = [s for s in servers if "--sentinel" not in s["args"]]
        self.sentinels = [s for s in servers if "--sentinel" in s["args"]]
        self.stopped: set[int] = set()

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{s['port']}" for s in self.sentinels]

    def primary_port(self) -> int | None:
        for s in self.sentinels:
            if s["pid"] in self.stopped:
                continue
            answer = cli(s["port"], "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE).splitlines()
            if len(answer) == 2:
                return int(answer[1])
        return None

    def kill_node(self, port: int) -> None:
        node = next(n for n in self.nodes if n["port"] == port)
        rk_test_redis("stop", str(node["pid"]))
        self.stopped.add(node["pid"])

    def stop(self) -> None:
        pids = [str(s["pid"]) for s in self.nodes + self.sentinels if s["pid"] not in self.stopped]
        rk_test_redis("stop", *pids)


@pytest.fixture()
def sentinel_group() -> Iterator[SentinelGroup]:
    group = SentinelGroup()
    yield group
    group.stop()


def test_backend_sentinel_and_the_url_form_sync_and_asyncio(sentinel_group: SentinelGroup) -> None:
    prefix = unique_prefix()
    backend = ratekeeper.Backend.sentinel(sentinel_group.addresses, SERVICE, prefix=prefix, **REDIS_OPTIONS)
    assert backend.kind == "sentinel"
    limiter = backend.window("w", 10, 60)
    assert limiter.check("k").allowed
    assert acheck(limiter, "k").allowed
    url = f"redis+sentinel://{','.join(sentinel_group.addresses)}/{SERVICE}"
    same = ratekeeper.Backend.redis(url, prefix=prefix, **REDIS_OPTIONS)
    assert same.window("w", 10, 60).peek("k").remaining == 8

    # The vectors, sync and asyncio, on the Sentinel backend.
    def make(**kw: Any) -> ratekeeper.Backend:
        return ratekeeper.Backend.sentinel(sentinel_group.addresses, SERVICE,
                                           **{**REDIS_OPTIONS, "prefix": unique_prefix(), **kw})
    for mode in ("sync", "async"):
        total, per_kind, failures = asyncio.run(run_all(make, mode))
        print(f"vectors on sentinel ({mode}): {total} cases, {len(failures)} failures, {per_kind}")
        assert total > 0 and not failures, failures[:5]


def test_a_killed_primary_is_followed_with_its_count(sentinel_group: SentinelGroup) -> None:
    backend = ratekeeper.Backend.sentinel(sentinel_group.addresses, SERVICE, prefix=unique_prefix(), deadline=1.0)
    limiter = backend.window("w", 1000, 3600)
    for _ in range(10):
        assert limiter.check("k").allowed
        assert acheck(limiter, "k").allowed
    old = sentinel_group.primary_port()
    assert old is not None
    assert cli(old, "WAIT", "2", "10000") == "2", "both replicas hold the 20"

    answered: dict[str, float] = {}

    def first_answer(style: str) -> None:
        began = time.monotonic()
        while time.monotonic() - began < GIVE_UP:
            try:
                ok = limiter.check("k").allowed if style == "sync" else acheck(limiter, "k").allowed
            except ratekeeper.RatekeeperError:
                ok = False
            if ok:
                answered[style] = time.monotonic()
                return
            time.sleep(0.01)

    sentinel_group.kill_node(old)
    threads = [threading.Thread(target=first_answer, args=(style,)) for style in ("sync", "async")]
    for t in threads:
        t.start()
    began = time.monotonic()
    while (new := sentinel_group.primary_port()) in (None, old) or not cli(new, "ROLE").startswith("master"):
        assert time.monotonic() - began < GIVE_UP, "no failover"
        time.sleep(0.02)
    promoted = time.monotonic()
    for t in threads:
        t.join()
    print(f"promoted {new} after {promoted - began:.2f}s; answered after the promotion: "
          f"{ {s: round(max(0.0, a - promoted), 3) for s, a in answered.items()} }")
    assert set(answered) == {"sync", "async"}, "a call style never answered again"
    for style, at in answered.items():
        assert at - promoted <= ANSWER_AFTER_PROMOTION, f"{style} answered {at - promoted:.2f}s after the promotion"
    assert limiter.peek("k").remaining == 1000 - 22, "the promoted replica held the 20; each style added one"


def test_replica_acks_on_a_sentinel_backend(sentinel_group: SentinelGroup) -> None:
    backend = ratekeeper.Backend.sentinel(sentinel_group.addresses, SERVICE, prefix=unique_prefix(),
                                          replica_acks=2, **REDIS_OPTIONS)
    limiter = backend.window("w", 10, 60)
    assert limiter.check("k").allowed and acheck(limiter, "k").allowed
    # Three replicas never acknowledge (there are two): the call fails, and fail_open admits it.
    too_many = ratekeeper.Backend.sentinel(sentinel_group.addresses, SERVICE, prefix=unique_prefix(),
                                           replica_acks=3, deadline=1.0, connect_timeout=5.0)
    with pytest.raises(ratekeeper.BackendUnavailable, match="2 of the 3 replicas"):
        too_many.window("w", 10, 60).check("k")
    admitting = ratekeeper.Backend.sentinel(sentinel_group.addresses, SERVICE, prefix=unique_prefix(),
                                            replica_acks=3, deadline=1.0, connect_timeout=5.0,
                                            failure_policy="fail_open")
    assert admitting.window("w", 10, 60).check("k").allowed
    assert admitting.stats().failed_open == 1
