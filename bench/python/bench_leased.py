"""Python benchmark: leased checks per second against the 1M/s target, beside the memory
backend's token bucket, in one run.

    python bench/python/bench_leased.py            # ~30 s
    python bench/python/bench_leased.py --quick    # ~8 s

Needs ratekeeper installed in release (`pip install ./py`). Starts its own redis-server on a
free loopback port (never 6379, no persistence) and stops it by pid. Both limiters refill
1,000,000 per second with a burst of 10^9 (every call admitted), `check()` in a plain loop, with
no key and then with one key (`check("k")`, through the keyed lease); rounds alternate memory,
leased, ...; medians are printed. Not a test: nothing is asserted.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import ratekeeper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report as results  # noqa: E402  (bench/python/report.py, beside this file)

QUICK = "--quick" in sys.argv
ROUNDS = 3 if QUICK else 7
ROUND_SECONDS = 1.0 if QUICK else 2.0
TARGET = 1_000_000


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != 6379:
            return port


def rate_of(limiter: ratekeeper.Limiter, seconds: float, key: str | None = None) -> float:
    check = limiter.check
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        if key is None:
            for _ in range(10_000):
                check()
        else:
            for _ in range(10_000):
                check(key)
        calls += 10_000
    return calls / elapsed


def medians(memory: ratekeeper.Limiter, leased: ratekeeper.Limiter, key: str | None) -> tuple[float, float]:
    """The median rates of alternating rounds, memory first, after a short warm-up of each."""
    rate_of(memory, ROUND_SECONDS / 4, key)
    rate_of(leased, ROUND_SECONDS / 4, key)
    m, l = [], []
    for _ in range(ROUNDS):
        m.append(rate_of(memory, ROUND_SECONDS, key))
        l.append(rate_of(leased, ROUND_SECONDS, key))
    return statistics.median(m), statistics.median(l)


def main() -> None:
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tempfile.mkdtemp(prefix="rk-bench-leased-"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        memory = ratekeeper.Backend.memory().token_bucket("bench", 1_000_000, 10**9)
        leased = ratekeeper.Backend.redis(f"redis://127.0.0.1:{port}").leased(
            "bench", 1_000_000, 10**9, lease_ttl=10)
        mm, lm = medians(memory, leased, None)
        km, kl = medians(memory, leased, "k")
        leased.close()
        print(f"| limiter (Python, check) | checks/s (median of {ROUNDS}) | vs 1M/s target |")
        print("|---|---:|---:|")
        print(f"| memory token_bucket | {mm:,.0f} | {mm / TARGET:.2f}x |")
        print(f"| leased on Redis | {lm:,.0f} | {lm / TARGET:.2f}x |")
        print(f"| memory token_bucket, one key | {km:,.0f} | {km / TARGET:.2f}x |")
        print(f"| leased on Redis, one key | {kl:,.0f} | {kl / TARGET:.2f}x |")
        print(f"leased / memory = {lm / mm:.2f}; one key: {kl / km:.2f}")
        results.write("bench-python-leased", "leased", "Leased token bucket on Redis against the memory token bucket (Python, check)",
                      "python bench/python/bench_leased.py", f"median of {ROUNDS} alternating rounds of {ROUND_SECONDS} s",
                      [results.row("leased on Redis, check", lm, "memory token bucket", mm),
                       results.row("leased on Redis, check, against the 1M/s target", lm, "1M/s target", TARGET, target=1.0),
                       results.row("leased on Redis, check of one key", kl, "memory token bucket, one key", km)])
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
