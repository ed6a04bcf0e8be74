"""Python benchmark: ratekeeper against the peer `limits` on the same Redis, in one run.

    python -m venv /tmp/rk-bench && /tmp/rk-bench/bin/pip install ./py -r bench/python/requirements.txt
    /tmp/rk-bench/bin/python bench/python/bench.py            # ~2 minutes
    /tmp/rk-bench/bin/python bench/python/bench.py --quick    # ~20 s

(`pip install ./py` builds the extension in release.) Starts its own redis-server on a free
loopback port (never 6379, no persistence) and stops it by pid. Each scenario runs in rounds that
interleave the clients so that machine noise hits them alike; medians are printed, with ratios.
Not a test: nothing is asserted.

Scenarios:
- sync sequential, one call at a time on one key: ratekeeper `bucket` (fixed window) and
  `token_bucket` `check`, limits `FixedWindowRateLimiter.hit` and `MovingWindowRateLimiter.hit`
  (redis-py), and `redis-benchmark -c 1` running the exact EVALSHA ratekeeper sends (captured
  with MONITOR) — the floor of any client. A command with a NUL byte (the token bucket's spec is
  packed as MessagePack) cannot be passed to redis-benchmark through argv: its floor is
  `bench/floor_client.c -e` instead (built here with `cc`), a C client making redis-benchmark's
  system calls per request; the row's name says which floor ran.
- asyncio, 64 tasks each looping on its own key: ratekeeper `acheck` vs limits.aio
  `FixedWindowRateLimiter.hit` (coredis, limits' default, and redis-py asyncio).
- memory backend, sequential: ratekeeper `check` vs limits' MemoryStorage fixed window, with a
  floor row: a no-op native call on the same limiter object with the same arguments
  (`_validate("k")`: the method call, the argument conversion, no limiter work), and the
  limiter's own cost per call over that floor, in nanoseconds.

`--memory` runs only the memory scenario (no Redis needed), in about 15 s (`--quick`: 5 s).
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import limits
import limits.aio.storage
import limits.aio.strategies
import limits.storage
import limits.strategies

import ratekeeper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report as results  # noqa: E402  (bench/python/report.py, beside this file)

QUICK = "--quick" in sys.argv
MEMORY_ONLY = "--memory" in sys.argv
ROUNDS = 3 if QUICK else 7
ROUND_SECONDS = 1.0 if QUICK else 2.0
TASKS = 64
BIG = 10**9  # limits high enough that every call is admitted: we measure the call, not refusals


# ----------------------------------------------------------------------------------- the server


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != 6379:
            return port


class Server:
    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="rk-bench-redis-")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        self.url = f"redis://127.0.0.1:{self.port}"

    def stop(self) -> None:
        os.kill(self.proc.pid, signal.SIGTERM)
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


# ----------------------------------------------------------------------------------- measuring


def timed_sync(call: Callable[[], object], seconds: float) -> float:
    """Calls per second of `call` in a loop for about `seconds`."""
    n, start = 0, time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(200):
            call()
        n += 200
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start)


def timed_async(setup: Callable[[], Callable[[int], Callable[[], Awaitable[object]]]], seconds: float) -> float:
    """Calls per second of TASKS tasks each awaiting its call in a loop, for about `seconds`.
    `setup` runs inside the round's event loop (asyncio clients bind to the loop they start in)
    and returns the maker of each task's call."""

    async def main() -> float:
        make_call = setup()
        stop = False
        counts = [0] * TASKS

        async def worker(i: int) -> None:
            call = make_call(i)
            while not stop:
                await call()
                counts[i] += 1

        tasks = [asyncio.ensure_future(worker(i)) for i in range(TASKS)]
        await asyncio.sleep(0.2)  # warm up (connections, scripts)
        before, start = sum(counts), time.perf_counter()
        await asyncio.sleep(seconds)
        done, elapsed = sum(counts) - before, time.perf_counter() - start
        stop = True
        await asyncio.gather(*tasks)
        return done / elapsed

    return asyncio.run(main())


def redis_benchmark(port: int, command: list[bytes], seconds: float, rate_hint: float) -> float:
    n = max(2000, int(rate_hint * seconds))
    if b"\0" in b"".join(command):
        return floor_client(port, command, n)
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-c", "1", "-n", str(n), "--csv", *command],
                         capture_output=True, text=True, timeout=120).stdout
    rows = [line for line in out.splitlines() if line and not line.startswith('"test"')]
    return float(rows[-1].split(",")[1].strip('"'))


def floor_name(kind: str, command: list[bytes]) -> str:
    """The floor row's name: which client runs `command` (see `redis_benchmark`)."""
    client = "floor_client.c -e" if b"\0" in b"".join(command) else "redis-benchmark"
    return f"{client} -c 1, {kind} EVALSHA"


_FLOOR_CLIENT: list[str] = []


def floor_client(port: int, command: list[bytes], n: int) -> float:
    """Commands per second of floor_client.c sending `command` `n` times, one at a time."""
    if not _FLOOR_CLIENT:
        built = os.path.join(tempfile.mkdtemp(prefix="rk-bench-floor-"), "floor_client")
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "floor_client.c")
        subprocess.run([os.environ.get("CC", "cc"), "-O2", "-o", built, source], check=True)
        _FLOOR_CLIENT.append(built)
    with tempfile.NamedTemporaryFile(suffix=".resp") as resp:
        resp.write(b"*%d\r\n" % len(command) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in command))
        resp.flush()
        # -e: redis-benchmark's system calls per request, so that it stands in for it.
        out = subprocess.run([_FLOOR_CLIENT[0], "-e", str(port), str(n), resp.name],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    return float(out)


def captured_evalsha(server: Server, do_call: Callable[[], object]) -> list[bytes]:
    """The EVALSHA command ratekeeper sends for `do_call`, captured with MONITOR."""
    monitor = subprocess.Popen(["redis-cli", "-p", str(server.port), "MONITOR"], stdout=subprocess.PIPE, text=True)
    assert monitor.stdout is not None
    monitor.stdout.readline()  # OK
    do_call()
    line = ""
    while "EVALSHA" not in line.upper():
        line = monitor.stdout.readline()
    monitor.kill()
    monitor.wait()
    # 1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "sha" "1" "key" ...
    # MONITOR writes every byte outside printable ASCII as \xHH: latin-1 gives the bytes back.
    return [bytes(a, "utf-8").decode("unicode_escape").encode("latin-1")
            for a in re.findall(r'"((?:[^"\\]|\\.)*)"', line)]


class Row:
    def __init__(self, scenario: str, client: str) -> None:
        self.scenario, self.client, self.samples = scenario, client, []  # type: ignore[var-annotated]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def run_rounds(rows: list[tuple[Row, Callable[[], float]]]) -> None:
    for _ in range(ROUNDS):
        for row, measure in rows:
            row.samples.append(measure())


# ----------------------------------------------------------------------------------- scenarios


def main() -> None:
    if MEMORY_ONLY:
        print_table([memory_scenario()])
        return
    if shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None:
        sys.exit("redis-server and redis-benchmark are required (apt-get install redis-server redis-tools)")
    server = Server()
    try:
        report = scenarios(server)
    finally:
        server.stop()
    print_table(report)
    write_results(report)


def scenarios(server: Server) -> list[tuple[str, list[Row], str]]:
    rk = ratekeeper.Backend.redis(server.url, deadline=5.0, connect_timeout=5.0)
    rk_bucket = rk.bucket("bench-bucket", BIG, 60)
    rk_tb = rk.token_bucket("bench-tb", 1_000_000, BIG)
    rk_bucket.check("k"), rk_tb.check("k")

    sync_storage = limits.storage.storage_from_string(server.url)
    fixed = limits.strategies.FixedWindowRateLimiter(sync_storage)
    moving = limits.strategies.MovingWindowRateLimiter(sync_storage)
    item = limits.RateLimitItemPerMinute(BIG)
    small_item = limits.RateLimitItemPerMinute(1_000_000)  # the moving window keeps one entry per hit
    fixed.hit(item, "k"), moving.hit(small_item, "warm")

    evalsha_tb = captured_evalsha(server, lambda: rk_tb.check("k"))
    evalsha_bucket = captured_evalsha(server, lambda: rk_bucket.check("k"))
    FLOORS["token bucket"] = floor_name("token bucket", evalsha_tb)
    FLOORS["bucket"] = floor_name("bucket", evalsha_bucket)

    sync_rows = [
        (Row("sync", FLOORS["token bucket"]),
         lambda: redis_benchmark(server.port, evalsha_tb, ROUND_SECONDS, 20_000)),
        (Row("sync", "ratekeeper token_bucket.check"), lambda: timed_sync(lambda: rk_tb.check("k"), ROUND_SECONDS)),
        (Row("sync", FLOORS["bucket"]),
         lambda: redis_benchmark(server.port, evalsha_bucket, ROUND_SECONDS, 20_000)),
        (Row("sync", "ratekeeper bucket.check"), lambda: timed_sync(lambda: rk_bucket.check("k"), ROUND_SECONDS)),
        (Row("sync", "limits FixedWindow.hit (redis-py)"), lambda: timed_sync(lambda: fixed.hit(item, "k"), ROUND_SECONDS)),
        (Row("sync", "limits MovingWindow.hit (redis-py)"),
         lambda: timed_sync(lambda: moving.hit(small_item, "k"), ROUND_SECONDS / 2)),
    ]
    print(f"sync sequential on Redis ({ROUNDS} rounds of {ROUND_SECONDS} s)...", flush=True)
    run_rounds(sync_rows)  # type: ignore[arg-type]


    def rk_async(i: int) -> Callable[[], Awaitable[object]]:
        key = f"task-{i}"
        return lambda: rk_tb.acheck(key)

    def rk_async_bucket(i: int) -> Callable[[], Awaitable[object]]:
        key = f"task-{i}"
        return lambda: rk_bucket.acheck(key)

    def limits_async(implementation: str) -> Callable[[], Callable[[int], Callable[[], Awaitable[object]]]]:
        def setup() -> Callable[[int], Callable[[], Awaitable[object]]]:
            storage = limits.aio.storage.RedisStorage("async+" + server.url, implementation=implementation)
            strategy = limits.aio.strategies.FixedWindowRateLimiter(storage)

            def make(i: int) -> Callable[[], Awaitable[object]]:
                key = f"task-{i}"
                return lambda: strategy.hit(item, key)
            return make
        return setup

    aio_rows = [
        (Row("asyncio", "ratekeeper token_bucket.acheck"), lambda: timed_async(lambda: rk_async, ROUND_SECONDS)),
        (Row("asyncio", "ratekeeper bucket.acheck"), lambda: timed_async(lambda: rk_async_bucket, ROUND_SECONDS)),
        (Row("asyncio", "limits.aio FixedWindow.hit (coredis)"), lambda: timed_async(limits_async("coredis"), ROUND_SECONDS)),
        (Row("asyncio", "limits.aio FixedWindow.hit (redis-py)"), lambda: timed_async(limits_async("redispy"), ROUND_SECONDS)),
    ]
    print(f"asyncio, {TASKS} tasks on Redis...", flush=True)
    run_rounds(aio_rows)  # type: ignore[arg-type]

    return [
        ("sync sequential, Redis (one call at a time)", [r for r, _ in sync_rows], "limits FixedWindow.hit (redis-py)"),
        (f"asyncio, {TASKS} tasks, Redis", [r for r, _ in aio_rows], "limits.aio FixedWindow.hit (coredis)"),
        memory_scenario(),
    ]


FLOOR = "floor: no-op native call (_validate) on the same limiter"
# The sync scenario's floor rows by kind ("token bucket", "bucket"): their names say which client.
FLOORS: dict[str, str] = {}


def memory_scenario() -> tuple[str, list[Row], str]:
    item = limits.RateLimitItemPerMinute(BIG)
    mem = ratekeeper.Backend()
    mem_bucket = mem.bucket("bench", BIG, 60)
    mem_tb = mem.token_bucket("bench", 1_000_000, BIG)
    mem_fixed = limits.strategies.FixedWindowRateLimiter(limits.storage.MemoryStorage())

    def rk_mem_async() -> float:
        async def main() -> float:
            n, start = 0, time.perf_counter()
            while time.perf_counter() - start < ROUND_SECONDS:
                for _ in range(200):
                    await mem_tb.acheck("k")
                n += 200
            return n / (time.perf_counter() - start)
        return asyncio.run(main())

    mem_rows = [
        (Row("memory", FLOOR), lambda: timed_sync(lambda: mem_tb._validate("k"), ROUND_SECONDS)),
        (Row("memory", "ratekeeper token_bucket.check"), lambda: timed_sync(lambda: mem_tb.check("k"), ROUND_SECONDS)),
        (Row("memory", "ratekeeper bucket.check"), lambda: timed_sync(lambda: mem_bucket.check("k"), ROUND_SECONDS)),
        (Row("memory", "ratekeeper token_bucket.acheck (awaited)"), rk_mem_async),
        (Row("memory", "limits FixedWindow.hit (MemoryStorage)"), lambda: timed_sync(lambda: mem_fixed.hit(item, "k"), ROUND_SECONDS)),
    ]
    print("memory backend, sequential...", flush=True)
    run_rounds(mem_rows)  # type: ignore[arg-type]

    return ("memory backend, sequential", [r for r, _ in mem_rows], "limits FixedWindow.hit (MemoryStorage)")


def write_results(report: list[tuple[str, list[Row], str]]) -> None:
    """Writes bench/results/bench-python.json: each ratekeeper row against its peer or floor."""
    medians = {(scenario, r.client): r.median for scenario, rows, _ in report for r in rows}
    sync, aio, mem = (scenario for scenario, _, _ in report)
    pairs = [
        (sync, "ratekeeper token_bucket.check", FLOORS["token bucket"], 0.9, False),
        (sync, "ratekeeper bucket.check", FLOORS["bucket"], 0.9, False),
        (sync, "ratekeeper token_bucket.check", "limits FixedWindow.hit (redis-py)", None, False),
        (sync, "ratekeeper bucket.check", "limits FixedWindow.hit (redis-py)", None, False),
        (aio, "ratekeeper token_bucket.acheck", "limits.aio FixedWindow.hit (coredis)", 5.0, True),
        (aio, "ratekeeper bucket.acheck", "limits.aio FixedWindow.hit (coredis)", None, False),
        (aio, "ratekeeper token_bucket.acheck", "limits.aio FixedWindow.hit (redis-py)", None, False),
        (mem, "ratekeeper token_bucket.check", "limits FixedWindow.hit (MemoryStorage)", None, False),
        (mem, "ratekeeper bucket.check", "limits FixedWindow.hit (MemoryStorage)", None, False),
        (mem, "ratekeeper token_bucket.acheck (awaited)", "limits FixedWindow.hit (MemoryStorage)", None, False),
    ]
    rows = [results.row(f"{scenario}: {client.removeprefix('ratekeeper ')}", medians[(scenario, client)], peer,
                        medians[(scenario, peer)], target=target, headline=headline)
            for scenario, client, peer, target, headline in pairs]
    results.write("bench-python", "Python", f"Python against limits {limits.__version__} on the same Redis",
                  "python bench/python/bench.py", f"median of {ROUNDS} interleaved rounds of {ROUND_SECONDS} s; "
                  f"asyncio: {TASKS} tasks; python {sys.version.split()[0]}", rows)


def print_table(report: list[tuple[str, list[Row], str]]) -> None:
    print()
    print(f"ratekeeper {ratekeeper.__version__} vs limits {limits.__version__}; medians of {ROUNDS} rounds;"
          f" python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print()
    print("| scenario | client | checks/s | vs limits |")
    print("|---|---|---:|---:|")
    for scenario, rows, baseline_name in report:
        baseline = next(r for r in rows if r.client == baseline_name).median
        for row in rows:
            print(f"| {scenario} | {row.client} | {row.median:,.0f} | {row.median / baseline:.2f}x |")
    for scenario, rows, _ in report:
        floor = next((r for r in rows if r.client == FLOOR), None)
        if floor is None:
            continue
        print()
        for row in rows:
            # The awaited rows also pay for the coroutine's await: they are not against this floor.
            if row.client.startswith("ratekeeper") and "acheck" not in row.client:
                # Paired per round, like the Redis floors below: the cost over the floor in ns.
                over = statistics.median(1e9 / a - 1e9 / b for a, b in zip(row.samples, floor.samples))
                print(f"{scenario}: {row.client} costs {over:.0f} ns per call over the floor "
                      f"({1e9 / row.median:.0f} ns against {1e9 / floor.median:.0f} ns)")
    if report[0][0].startswith("memory"):
        print("command: " + " ".join(shlex.quote(a) for a in sys.argv))
        return
    sync_rows = report[0][1]
    rows = {r.client: r for r in sync_rows}
    print()
    for kind, raw_name, rk_name in [
        ("token bucket", FLOORS["token bucket"], "ratekeeper token_bucket.check"),
        ("bucket", FLOORS["bucket"], "ratekeeper bucket.check"),
    ]:
        rk_row, raw_row = rows[rk_name], rows[raw_name]
        # Paired: each round measures the two one right after the other, so a round's ratio
        # cancels the machine's slow drifts that the ratio of medians keeps.
        paired = statistics.median(a / b for a, b in zip(rk_row.samples, raw_row.samples))
        print(f"sync {kind}: ratekeeper at {paired:.0%} of {raw_name}, median of "
              f"{len(rk_row.samples)} paired rounds ({rk_row.median / raw_row.median:.0%} as a ratio of "
              f"medians; target >= 90%)")
    print("command: " + " ".join(shlex.quote(a) for a in sys.argv))


if __name__ == "__main__":
    main()
