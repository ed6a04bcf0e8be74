"""HTTP middleware benchmark: each framework's app served by a real server and driven by wrk, in
one run — no limiter (the floor), ratekeeper's middleware on Redis, and the peer's middleware on
the same Redis (slowapi for FastAPI, flask-limiter for Flask, django-ratelimit for Django).

    python -m venv /tmp/rk-http && /tmp/rk-http/bin/pip install ./py -r bench/python/http/requirements.txt
    /tmp/rk-http/bin/python bench/python/http/bench.py            # ~2 minutes
    /tmp/rk-http/bin/python bench/python/http/bench.py --quick    # ~40 s

(`pip install ./py` builds the extension in release.) Needs wrk (Debian's `wrk` package) and
redis-server. Starts its own redis-server on a free loopback port (never 6379, no persistence)
and stops it by pid; servers are uvicorn (FastAPI) and gunicorn (Flask, Django), one worker
process each, so the numbers compare middleware, not process counts. The variants run in rounds
that interleave them, so machine noise hits them alike; the median of the rounds is reported.
Prints requests/s, ratekeeper's ratio to the peer, each variant's overhead over the floor, and
writes bench/results/http-python.json. Not a test: nothing is asserted.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(HERE.parent))
import report  # noqa: E402  (bench/python/report.py)
FRAMEWORKS = {"fastapi": "slowapi 0.1.10", "flask": "flask-limiter 4.1.1", "django": "django-ratelimit 4.1.0"}
VARIANTS = ("floor", "ratekeeper", "peer")


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != 6379:
            return port


def wait_listening(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def start_server(framework: str, variant: str, redis_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "BENCH_FRAMEWORK": framework, "BENCH_VARIANT": variant, "BENCH_REDIS": redis_url,
           "PYTHONPATH": str(HERE)}
    if framework == "fastapi":
        argv = [str(BIN / "uvicorn"), "apps:app", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                "--log-level", "warning", "--no-access-log"]
    else:
        argv = [str(BIN / "gunicorn"), "apps:app", "--bind", f"127.0.0.1:{port}", "--workers", "1",
                "--log-level", "warning"]
    proc = subprocess.Popen(argv, cwd=HERE, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    wait_listening(port, proc, f"{framework}/{variant}")
    return proc, f"http://127.0.0.1:{port}/"


def wrk(url: str, seconds: int, connections: int) -> tuple[float, int, int]:
    """``(requests/s, requests, non-2xx responses)`` of one wrk run."""
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", url], capture_output=True, text=True,
                         check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return rps, total, int(bad.group(1)) if bad else 0


def main() -> None:
    quick = "--quick" in sys.argv
    rounds, seconds, connections = (2, 3, 8) if quick else (3, 5, 8)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is required: apt-get install wrk")
    workdir = tempfile.mkdtemp(prefix="ratekeeper-http-bench-")
    redis_port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no"], cwd=workdir, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    redis_url = f"redis://127.0.0.1:{redis_port}"
    results: dict[str, dict[str, object]] = {}
    try:
        wait_listening(redis_port, redis, "redis-server")
        for framework, peer in FRAMEWORKS.items():
            servers = {v: start_server(framework, v, redis_url) for v in VARIANTS}
            try:
                samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
                for _, url in servers.values():
                    wrk(url, 1, connections)  # warm-up: imports, connections, scripts loaded
                for _ in range(rounds):
                    for variant, (_, url) in servers.items():
                        rps, _, bad = wrk(url, seconds, connections)
                        if bad:
                            raise SystemExit(f"{framework}/{variant}: {bad} non-2xx responses (the limit was reached?)")
                        samples[variant].append(rps)
            finally:
                for proc, _ in servers.values():
                    stop(proc)
            median = {v: statistics.median(samples[v]) for v in VARIANTS}
            results[framework] = {
                "peer": peer,
                "requests_per_second": median,
                "samples": samples,
                "ratekeeper_to_peer": median["ratekeeper"] / median["peer"],
                "overhead_over_floor": {v: 1 - median[v] / median["floor"] for v in ("ratekeeper", "peer")},
            }
    finally:
        stop(redis)
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"\n{'framework':<9} {'floor':>9} {'ratekeeper':>11} {'peer':>9}  {'rk/peer':>7}  "
          f"{'rk overhead':>11}  {'peer overhead':>13}  peer")
    for framework, r in results.items():
        m = r["requests_per_second"]
        o = r["overhead_over_floor"]
        assert isinstance(m, dict) and isinstance(o, dict)
        print(f"{framework:<9} {m['floor']:>9.0f} {m['ratekeeper']:>11.0f} {m['peer']:>9.0f}  "
              f"{r['ratekeeper_to_peer']:>6.2f}x  {o['ratekeeper']:>10.1%}  {o['peer']:>13.1%}  {r['peer']}")
    rows = []
    for framework, r in results.items():
        m = r["requests_per_second"]
        assert isinstance(m, dict)
        rows.append(report.row(f"{framework}, against the peer", m["ratekeeper"], str(r["peer"]),
                               m["peer"], unit="requests/s", target=1.0))
        rows.append(report.row(f"{framework}, against the same app with no limiter", m["ratekeeper"],
                               "no limiter (floor)", m["floor"], unit="requests/s"))
    report.write("http-python", "HTTP middleware", "Python HTTP middleware against each framework's rate-limit package",
                 "python bench/python/http/bench.py",
                 f"requests/s of one app per framework, one server worker, wrk -t1 -c{connections}, {rounds} rounds "
                 f"of {seconds} s, medians; every request admitted; Python {platform.python_version()}",
                 rows, details=results)
    out = report.RESULTS / "http-python.json"
    print(f"\nwrote {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
