"""A fleet pauses on a partner's 429: 8 processes (4 Python, 4 Node) share one Redis limiter and
call a real local HTTP server only when `check` admits them, `observe`-ing every response. Once
every process has sent a request, the server answers the next one with 429 + Retry-After: 3; its
own log then shows the fleet stopped for 3 s and came back.

Which requests may still arrive after the 429 is exact, not a timing allowance: the pause exists
in Redis from instant P (Redis time) on, written by the worker that received the 429 once it has
read it. A check decided before P may have been admitted, and its request may reach the server
after the 429 was sent: such a request was already in flight. Each request carries the Redis time
of the check that admitted it, and each paused refusal its Redis time and retry_after, which give
the pause's end (P + 3 s) to the microsecond. So:
- every request the server saw between the 429 and 3 s after it (its clock) was admitted before
  P (Redis clock); since P comes after the 429 was sent and the pause ends 3 s after P, any check
  admitted after the pause arrives after the window, so the window holds only in-flight requests;
- no check was admitted in [P, P + 3 s): not one, in any process;
- every process was refused by the pause, and requests resumed once it ended.
"""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import RedisServer, unique_prefix

WORKERS = Path(__file__).parent / "workers"
NODE_PACKAGE = Path(__file__).resolve().parents[2] / "node"
PAUSE_S = 3
WORKER_COUNT = 8  # the 429 answers the first request once every worker has sent one
AFTER_PAUSE = 24  # requests seen after the pause before the server tells workers to stop


@dataclass
class Arrival:
    at: float  # the server's clock (time.monotonic) when the request arrived
    worker: str
    decided_at_us: int  # the Redis time of the check that admitted it
    status: int  # what the server answered


class Partner(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.log: list[Arrival] = []
        self.sent_429_at: float | None = None

    def answer(self, worker: str, decided_at_us: int) -> int:
        with self.lock:
            now = time.monotonic()
            if self.sent_429_at is None and len({a.worker for a in self.log}) == WORKER_COUNT:
                status = 429
                self.sent_429_at = now
            elif self.sent_429_at is not None and now >= self.sent_429_at + PAUSE_S and sum(
                1 for a in self.log if a.at >= self.sent_429_at + PAUSE_S
            ) >= AFTER_PAUSE:
                status = 410
            else:
                status = 200
            self.log.append(Arrival(now, worker, decided_at_us, status))
            return status


class Handler(http.server.BaseHTTPRequestHandler):
    server: Partner

    def do_GET(self) -> None:
        status = self.server.answer(self.headers["X-Worker"], int(self.headers["X-Decided-At"]))
        self.send_response(status)
        if status == 429:
            self.send_header("Retry-After", str(PAUSE_S))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def node_available() -> bool:
    return shutil.which("node") is not None and (NODE_PACKAGE / "ratekeeper.node").exists()


def test_eight_processes_stop_for_the_partners_retry_after(redis_server: RedisServer) -> None:
    if not node_available():
        if os.environ.get("RK_REQUIRE_NODE"):
            pytest.fail("node or node/ratekeeper.node is missing")
        pytest.skip("the Node addon is not built (scripts/test-node runs this test once it is)")
    server = Partner()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/charges"
    prefix = unique_prefix()
    commands = [[sys.executable, str(WORKERS / "upstream_worker.py")]] * (WORKER_COUNT // 2) + [
        ["node", str(WORKERS / "upstream_worker.cjs")]
    ] * (WORKER_COUNT // 2)
    procs = [
        subprocess.Popen([*cmd, redis_server.url, prefix, url, f"w{i}"], stdout=subprocess.PIPE, text=True)
        for i, cmd in enumerate(commands)
    ]
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=60)
            assert proc.returncode == 0, out
            outputs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        server.shutdown()
        server.server_close()

    assert all(out.rstrip().endswith("done") for out in outputs), outputs
    t429 = server.sent_429_at
    assert t429 is not None, "the server never answered 429"
    assert [a.status for a in server.log].count(429) == 1

    # The pause's end in Redis time, from the refusals it caused (all of one pause).
    ends = {
        int(decided) + int(retry)
        for out in outputs
        for line in out.splitlines()
        if line.startswith("refused ")
        for decided, retry in [line.split()[1:3]]
    }
    assert len(ends) == 1, f"one pause, one end: {sorted(ends)}"
    end_us = ends.pop()
    paused_from_us = end_us - PAUSE_S * 1_000_000
    for i, out in enumerate(outputs):
        assert "refused " in out, f"worker w{i} ({commands[i][0]}) was never refused by the pause"

    admitted_during_pause = [a for a in server.log if paused_from_us <= a.decided_at_us < end_us]
    assert admitted_during_pause == [], "checks admitted while the pause was in Redis"
    in_window = [a for a in server.log if t429 < a.at < t429 + PAUSE_S]
    late = [a for a in in_window if a.decided_at_us >= paused_from_us]
    assert late == [], f"requests in the 3 s after the 429 that were not in flight: {late}"
    resumed = [a for a in server.log if a.at >= t429 + PAUSE_S]
    assert len(resumed) >= AFTER_PAUSE, "requests resumed after the pause"
    assert any(a.decided_at_us >= end_us for a in resumed), "admitted again once the pause ended"
    print(f"{len(in_window)} request(s) in flight when the pause was recorded; {len(resumed)} after it")
