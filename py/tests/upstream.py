"""A real third-party API for the worker tests: a local HTTP server (a thread of the test
process) allowing `limit` calls per fixed window of `window` seconds and answering 429 beyond.

Which window does a call belong to? A real API counts by arrival; the limiter counts by
admission (Redis's clock, at the check). Arrival = admission + the time to send the request, so
an API whose windows line up with the limiter's would still see a call admitted at the end of
window k arrive in window k+1: spill-over of up to the calls in flight, which in production is
the margin one leaves between the limiter's limit and the API's. To make "the API never sees an
excess" an exact assertion rather than a race, this server files each call under the window of
its admission stamp (`X-Admitted-Us`: the admitting decision's `decided_at_us`, Redis `TIME`),
and checks the stamp is honest: not after the call's arrival (same host, same clock) and not
older than `max_age` seconds (a stamp reused from an earlier admission). Arrival windows are
counted too, for the report, not asserted.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class Upstream:
    def __init__(self, limit: int, window: float, max_age: float = 60.0) -> None:
        self.limit = limit
        self.window_us = round(window * 1e6)
        self.max_age_us = round(max_age * 1e6)
        self.lock = threading.Lock()
        self.by_admission: Counter[int] = Counter()
        self.by_arrival: Counter[int] = Counter()
        self.calls: list[str] = []  # job ids, in arrival order
        self.excess = 0  # calls answered 429
        self.bad_stamps: list[str] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                arrival_us = time.time_ns() // 1000
                job = parse_qs(urlparse(self.path).query).get("job", ["?"])[0]
                stamp = self.headers.get("X-Admitted-Us")
                status = upstream.record(job, stamp, arrival_us)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def record(self, job: str, stamp: str | None, arrival_us: int) -> int:
        with self.lock:
            self.calls.append(job)
            self.by_arrival[arrival_us // self.window_us] += 1
            try:
                admitted_us = int(stamp or "")
            except ValueError:
                self.bad_stamps.append(f"{job}: no stamp")
                return 400
            if not arrival_us - self.max_age_us <= admitted_us <= arrival_us:
                self.bad_stamps.append(f"{job}: admitted {admitted_us}, arrived {arrival_us}")
                return 400
            window = admitted_us // self.window_us
            self.by_admission[window] += 1
            if self.by_admission[window] > self.limit:
                self.excess += 1
                return 429
            return 200

    def arrival_spill(self) -> int:
        """Calls beyond the limit had the server counted by arrival (informational)."""
        return sum(max(0, n - self.limit) for n in self.by_arrival.values())

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def fill_next_window(limiter: object, limit: int, window: float) -> None:
    """Takes all `limit` calls of a fresh window (not sent to the API), at its very start, so
    the jobs sent right after are refused at first whatever the workers' speed. Waits for the
    next window boundary (the limiter's buckets are aligned to the epoch; Redis runs on this
    host, so its TIME is this clock)."""
    time.sleep(window - time.time() % window)
    decision = limiter.check(None, limit)  # type: ignore[attr-defined]
    assert decision.allowed
