"""A server that accepts connections and never answers: sync and async calls, standalone and
cluster, all raise the same Timeout at the deadline (not before, not much after)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest

import ratekeeper

DEADLINE = 2.0


@pytest.fixture
def hung_url() -> Iterator[str]:
    """A loopback listener that accepts and never writes, closed after the test."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for s in held:
        s.close()
    listener.close()


@pytest.mark.parametrize("mode", ["redis", "cluster"])
@pytest.mark.parametrize("style", ["sync", "async"])
def test_hung_server_times_out_at_the_deadline(hung_url: str, mode: str, style: str) -> None:
    if mode == "redis":
        backend = ratekeeper.Backend.redis(hung_url, deadline=DEADLINE)
    else:
        backend = ratekeeper.Backend.cluster([hung_url], deadline=DEADLINE)
    limiter = backend.window("hung", 10, 60)

    async def acheck() -> None:
        await limiter.acheck("k")

    for _ in range(2):
        began = time.monotonic()
        with pytest.raises(ratekeeper.Timeout) as caught:
            if style == "sync":
                limiter.check("k")
            else:
                asyncio.run(acheck())
        took = time.monotonic() - began
        assert took >= DEADLINE, f"timed out after {took:.3f}s, before the deadline"
        assert took < DEADLINE + 1, f"timed out after {took:.3f}s"
        assert str(caught.value) == "timed out: Redis did not answer within 2s"
