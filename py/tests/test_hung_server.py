"""A server that accepts connections and never answers: sync and async calls, standalone and
cluster, all raise the same Timeout at the deadline: not before, and by themselves — before a
watchdog ends the hang by closing the held connections (an ordering, not a latency bound)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

import ratekeeper

DEADLINE = 2.0
# When the watchdog ends the hang: long against the deadline, so that a call still running then
# waited on the server rather than its deadline. It bounds nothing measured.
END_HANG_AFTER = DEADLINE * 4 + 2


@dataclass
class Hung:
    url: str
    end_hang: Callable[[], None]


@pytest.fixture
def hung() -> Iterator[Hung]:
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

    def end_hang() -> None:
        for s in list(held):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield Hung(f"redis://127.0.0.1:{listener.getsockname()[1]}", end_hang)
    stop.set()
    thread.join()
    for s in held:
        s.close()
    listener.close()


@pytest.mark.parametrize("mode", ["redis", "cluster"])
@pytest.mark.parametrize("style", ["sync", "async"])
def test_hung_server_times_out_at_the_deadline(hung: Hung, mode: str, style: str) -> None:
    if mode == "redis":
        backend = ratekeeper.Backend.redis(hung.url, deadline=DEADLINE)
    else:
        backend = ratekeeper.Backend.cluster([hung.url], deadline=DEADLINE)
    limiter = backend.window("hung", 10, 60)

    async def acheck() -> None:
        await limiter.acheck("k")

    for _ in range(2):
        ended_hang = threading.Event()

        def watchdog() -> None:
            hung.end_hang()
            ended_hang.set()

        timer = threading.Timer(END_HANG_AFTER, watchdog)
        timer.start()
        began = time.monotonic()
        try:
            with pytest.raises(ratekeeper.Timeout) as caught:
                if style == "sync":
                    limiter.check("k")
                else:
                    asyncio.run(acheck())
            # Ordering: the Timeout came while the connections still hung.
            assert not ended_hang.is_set(), "the call ended only after the hang was ended"
        finally:
            timer.cancel()
        took = time.monotonic() - began
        assert took >= DEADLINE, f"timed out after {took:.3f}s, before the deadline"
        server = hung.url.removeprefix("redis://")
        assert str(caught.value) == (
            f"timed out: Redis at {server} did not answer within 2s; is it reachable from here and not overloaded? A slow link needs a longer deadline"
        )
