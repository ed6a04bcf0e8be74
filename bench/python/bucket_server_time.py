"""Server time of the fixed-window `bucket` check (INFO commandstats), same run: today's script
against the script before the configuration fingerprint (commit be5c4f4) and the one before the
fixed-window fast path (commit d14bed1), on one redis-server, rounds interleaved.

    python3 bench/python/bucket_server_time.py [--quick]

Each round sends 50,000 pipelined EVALSHA calls per script, each on a new key (the first check
of a window: read, write, expire), with the arguments the library sends (`check`, the server's
TIME, cost 1, limit 1,000 per minute). Needs only redis-server and git (the older scripts are
read from the repository's history); writes bench/results/bench-bucket-server-time.json.
"""

from __future__ import annotations

import os
import pathlib
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import report  # noqa: E402

QUICK = "--quick" in sys.argv
ROUNDS, CALLS = (3, 5_000) if QUICK else (7, 50_000)


def git_show(commit: str, path: str) -> str:
    return subprocess.check_output(["git", "-C", str(REPO), "show", f"{commit}:{path}"], text=True)


def rust_const(source: str, name: str) -> str:
    match = re.search(r"const " + name + r': &str = r#"(.*?)"#;', source, re.S)
    assert match, name
    return match.group(1)


def script(rust: str, lua: str) -> str:
    """The script as core/src/engine/script.rs assembles it (wrapper, now, pause check, body)."""
    return (rust_const(rust, "BATCH_WRAPPER").replace("__NOW__", rust_const(rust, "NOW_US"), 1)
            .replace("__PAUSE__", rust_const(rust, "PAUSE_PRELUDE"), 1).replace("__BODY__", lua, 1))


def scripts() -> dict[str, tuple[bool, str]]:
    """name -> (takes today's arguments, text)."""
    old_rust = git_show("be5c4f4", "core/src/backend/redis/scripts.rs")
    old = rust_const(old_rust, "BATCH_WRAPPER").replace("__BODY__", git_show("be5c4f4", "core/src/scripts/sliding.lua"), 1)
    return {
        "today": (True, script((REPO / "core/src/engine/script.rs").read_text(),
                               (REPO / "core/src/engine/sliding.lua").read_text())),
        "before the fixed-window fast path (d14bed1)": (
            True, script(git_show("d14bed1", "core/src/engine/script.rs"), git_show("d14bed1", "core/src/engine/sliding.lua"))),
        "before the configuration fingerprint (be5c4f4)": (False, old),
    }


def command(*args: object) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class Connection:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.reader = self.sock.makefile("rb")

    def read(self) -> object:
        line = self.reader.readline()
        kind, rest = line[:1], line[1:-2]
        if kind in (b"+", b":"):
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b"$":
            size = int(rest)
            return None if size < 0 else self.reader.read(size + 2)[:-2]
        return [self.read() for _ in range(int(rest))]

    def call(self, *args: object) -> object:
        self.sock.sendall(command(*args))
        return self.read()

    def pipeline(self, commands: list[bytes]) -> None:
        self.sock.sendall(b"".join(commands))
        for _ in commands:
            self.read()


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process (descheduled time is not counted, unlike commandstats')."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no"], cwd=tempfile.mkdtemp(prefix="rk-bench-bucket-"),
                              stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                conn = Connection(port)
                conn.call("PING")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        variants = scripts()
        shas = {name: conn.call("SCRIPT", "LOAD", text) for name, (_, text) in variants.items()}
        samples: dict[str, list[float]] = {name: [] for name in variants}
        cpu: dict[str, list[float]] = {name: [] for name in variants}
        key = 0
        for _ in range(ROUNDS):
            for name, (today, _) in variants.items():
                calls = []
                for _ in range(CALLS):
                    key += 1
                    tag = f"{{rk:{key:016x}}}"
                    if today:  # KEYS: the hash, the pause key; ARGV: op, now, cost, fingerprint, limits
                        calls.append(command("EVALSHA", shas[name], 2, f"{tag}:b:s", f"{tag}:b:p", "check", "", 1,
                                             "12345678901234567890", 1, 1000, 60_000_000, 60_000_000, 1))
                    else:  # KEYS: the hash; ARGV: op, now, cost, limits
                        calls.append(command("EVALSHA", shas[name], 1, f"{tag}:b:s", "check", "", 1, 1, 1000,
                                             60_000_000, 60_000_000, 1))
                conn.call("CONFIG", "RESETSTAT")
                cpu_before = cpu_seconds(server.pid)
                for i in range(0, CALLS, 1000):
                    conn.pipeline(calls[i:i + 1000])
                cpu[name].append((cpu_seconds(server.pid) - cpu_before) * 1e6 / CALLS)
                info = conn.call("INFO", "commandstats").decode()  # type: ignore[union-attr]
                found = re.search(r"cmdstat_evalsha:calls=(\d+),usec=(\d+)", info)
                assert found and int(found.group(1)) == CALLS, info
                samples[name].append(int(found.group(2)) / CALLS)
    finally:
        server.terminate()
        server.wait()
    medians = {name: statistics.median(v) for name, v in samples.items()}
    cpu_medians = {name: statistics.median(v) for name, v in cpu.items()}
    for name, v in samples.items():
        print(f"{name}: median {medians[name]:.2f} µs per call (redis-server CPU {cpu_medians[name]:.2f} µs), "
              f"rounds {' '.join(f'{x:.2f}' for x in v)}")
    today, before_fast, before_fp = medians.values()
    cpu_today, cpu_before_fast, cpu_before_fp = cpu_medians.values()
    rows = [
        report.row("today's script", today, "the script before the fingerprint", before_fp, unit="server µs per call",
                   target=0.99, headline=False, higher_is_better=False),
        report.row("today's script", today, "the script before the fast path", before_fast, unit="server µs per call",
                   higher_is_better=False),
        report.row("today's script, redis-server CPU (whole server, commands included)", cpu_today,
                   "the script before the fingerprint", cpu_before_fp, unit="µs per call", higher_is_better=False),
        report.row("today's script, redis-server CPU (whole server, commands included)", cpu_today,
                   "the script before the fast path", cpu_before_fast, unit="µs per call", higher_is_better=False),
    ]
    report.write("bench-bucket-server-time", "Redis", "Server time of a fixed-window `bucket` check on a new key",
                 "python3 bench/python/bucket_server_time.py",
                 f"INFO commandstats over {CALLS:,} pipelined EVALSHA calls per script and round, each on a new key, "
                 f"{ROUNDS} interleaved rounds, medians", rows)


if __name__ == "__main__":
    main()
