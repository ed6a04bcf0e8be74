"""Server time of the fixed-window `bucket` check (INFO commandstats), same run: today's script
against the script before the configuration fingerprint (commit be5c4f4), the one before the
fixed-window fast path (commit d14bed1) and today's body in the prelude before TIME was read once
per invocation and the hold check asked EXISTS first (commit 8760ad9), and today's script taken
apart (without the hold check, without the fingerprint, the wrapper alone, the bare invocation
with other argument and reply shapes) to show what each part costs; on one redis-server, rounds
interleaved.

    python3 bench/python/bucket_server_time.py [--quick]

Each round sends 20,000 pipelined checks per script (built before the first round) in three
modes: each call on a new key (the first check of a window: read, write, expire); calls on
1,000 keys already written in the current window (read, increment); and the same in batches of
64 calls per EVALSHA, as Node's 64 checks in flight reach the server (their arguments written
once, `batch-shared`, where the script knows it), where the token bucket's script runs beside
it for comparison. The arguments are the library's of each script's era
(`check`, the server's TIME, cost 1, limits that refuse nothing); the median of 11 rounds
counts. Needs only redis-server and git (the older scripts are read from the repository's
history); writes bench/results/bench-bucket-server-time.json.
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
ROUNDS, CALLS = (3, 5_000) if QUICK else (11, 20_000)
# The first check of a window (read, write, expire), and a check in a window already written
# (read, increment): the Node benchmark's calls are mostly the second.
NEW, SAME, BATCHED = "new key", "same window", "same window, 64 per batch"
MODES = (NEW, SAME, BATCHED)
HOT_KEYS = 1000
BATCH = 64


def git_show(commit: str, path: str) -> str:
    return subprocess.check_output(["git", "-C", str(REPO), "show", f"{commit}:{path}"], text=True)


def rust_const(source: str, name: str) -> str:
    match = re.search(r"const " + name + r': &str = r#"(.*?)"#;', source, re.S)
    assert match, name
    return match.group(1)


ENGINE = REPO / "core/src/engine"


def tree_script(lua: str, hold: str | None = None, token: bool | None = None, commit: str | None = None) -> str:
    """The script as core/src/engine/lua.rs assembles it today (wrapper.lua, the prelude and, for
    a token bucket's body (`token`, by default: a body naming bucket_state.lua's sections), its
    functions, the hold check, the body, the once-per-id settle); `hold` replaces the hold
    check's text; `commit` reads the shared parts as they were at that commit.
    peer_server_time.py checks it against the SHA1 the library sends."""
    def part(name: str) -> str:
        return git_show(commit, f"core/src/engine/{name}") if commit else (ENGINE / name).read_text()

    if token is None:
        token = "--@BUCKET_" in lua
    functions = ("settle_charge.lua",) if token else ()  # LuaScript::token_bucket
    prelude = "".join(part(f) for f in ("now.lua", *functions))
    for section in part("bucket_state.lua").split("\n--@")[1:]:  # lua.rs's `expand`
        name, text = section.split("\n", 1)
        lua = lua.replace(f"--@BUCKET_{name}@", text.rstrip("\n"), 1)
    return (part("wrapper.lua")
            .replace("--@PRELUDE@", prelude, 1)
            .replace("--@HOLD_CHECK@", part("hold_check.lua") if hold is None else hold, 1)
            .replace("--@BODY@", lua, 1)
            .replace("--@SETTLE_ONCE@", part("settle_once.lua"), 1))


def script(rust: str, lua: str, hold: str | None = None) -> str:
    """The script as core/src/engine/script.rs assembled it (before its parts moved to .lua
    files) (wrapper, now, hold check, body, settle) at
    any commit since the pause check (whose prelude was `PAUSE_PRELUDE` before blocks made it
    `HOLD_PRELUDE`); `hold` replaces the hold check's text."""
    text = rust_const(rust, "BATCH_WRAPPER").replace("__NOW__", rust_const(rust, "NOW_US"), 1)
    if "__SETTLE_CHARGE__" in text:  # an include_str! of its own file, which rust_const cannot read
        text = text.replace("__SETTLE_CHARGE__", (REPO / "core/src/engine/settle_charge.lua").read_text(), 1)
    for placeholder, const in (("__PAUSE__", "PAUSE_PRELUDE"), ("__HOLD__", "HOLD_PRELUDE"), ("__SETTLE__", "SETTLE")):
        if placeholder in text:
            text = text.replace(placeholder, hold if hold is not None and const != "SETTLE" else rust_const(rust, const), 1)
    return text.replace("__BODY__", lua, 1)


# The hold check's keys taken off KEYS without reading them: what the script costs without it.
NO_HOLD = "if ARGV[1] == 'check' or ARGV[1] == 'peek' then table.remove(KEYS) table.remove(KEYS) end"
# A body that reads the clock and answers as an empty window would: the wrapper's own cost.
EMPTY_BODY = "local now = now_us(ARGV)\nreturn {now, 0, 0, -1, -1}\n"
# The same reply without reading the clock: what invoking a script costs the server.
CONSTANT_BODY = "return {1, 0, 0, -1, -1}\n"
# A one-integer reply: what the reply's five elements cost beyond one.
ONE_INTEGER_BODY = "return 1\n"


def without_fingerprint(lua: str) -> str:
    """Today's fixed-window path with the fingerprint neither read nor written (a stored window
    passes for one of this configuration)."""
    stripped = (lua.replace("local got = redis.call('HMGET', h, 'cfg', p .. 'c', p .. 'n')",
                            "local got = redis.call('HMGET', h, p .. 'c', p .. 'n')")
                .replace("local cfg, c, stored = got[1], tonumber(got[2]), tonumber(got[3])",
                         "local c, stored = tonumber(got[1]), tonumber(got[2])\n  local cfg = got[2] and ARGV[4]")
                .replace("if cfg_changes then redis.call('HSET', h, 'cfg', ARGV[4]) end", "")
                .replace(", 'cfg', ARGV[4])", ")"))
    assert "'cfg'" not in stripped and "got[3]" not in stripped, "the fixed-window path changed: update without_fingerprint"
    return stripped


# How each variant is called: the keys and arguments of its era.
OLD, PAUSE, HOLD = "hash only, no fingerprint", "hash and pause key", "hash, pause and block keys"
TOKEN = "the token bucket today"
# Called with today's keys and arguments, but not run in batches (it has no batch wrapper).
BARE = "today's calls, no wrapper"
# Today's keys with the arguments packed into one delimited string (not run in batches).
PACKED = "today's keys, one packed argument, no wrapper"
# The prelude (wrapper, now, hold check) before TIME was read once per invocation and the hold
# check asked EXISTS first.
PREVIOUS_PRELUDE = "8760ad9"
# Today's script in batches that write every call's arguments (`batch-same`), as before the
# calls of a batch with the same arguments wrote them once (`batch-shared`).
ARGS_PER_CALL = "today's script, batched with every call's arguments (batch-same)"


def with_flags(text: str) -> str:
    """`text` with the flags today's bodies set (`refused`, `dry`) declared, for a wrapper of an
    era before them."""
    if "local refused, dry" in text:
        return text
    return text.replace("local function run(", "local refused, dry = false, false\nlocal function run(", 1)


def scripts() -> dict[str, tuple[str, str]]:
    """name -> (how it is called, text). The first three are the committed comparison; the others
    take today's script apart to show what each part costs."""
    old_rust = git_show("be5c4f4", "core/src/backend/redis/scripts.rs")
    old = rust_const(old_rust, "BATCH_WRAPPER").replace("__BODY__", git_show("be5c4f4", "core/src/scripts/sliding.lua"), 1)
    lua = (REPO / "core/src/engine/sliding.lua").read_text()
    fast = lua[:lua.index("local fmt = function")]  # the fixed-window path, which every call here takes
    return {
        "today": (HOLD, tree_script(lua)),
        "before the fixed-window fast path (d14bed1)": (
            PAUSE, script(git_show("d14bed1", "core/src/engine/script.rs"), git_show("d14bed1", "core/src/engine/sliding.lua"))),
        "before the configuration fingerprint (be5c4f4)": (OLD, old),
        f"today's body in the prelude before one TIME per invocation and EXISTS ({PREVIOUS_PRELUDE})": (
            HOLD, with_flags(script(git_show(PREVIOUS_PRELUDE, "core/src/engine/script.rs"), lua))),
        ARGS_PER_CALL: (HOLD, tree_script(lua)),
        "today without the hold check": (HOLD, tree_script(lua, NO_HOLD)),
        "today without the fingerprint": (HOLD, tree_script(without_fingerprint(fast))),
        "today without the hold check and the fingerprint": (HOLD, tree_script(without_fingerprint(fast), NO_HOLD)),
        "the wrapper, the hold check and TIME (no body)": (HOLD, tree_script(EMPTY_BODY)),
        "the wrapper and TIME (no hold check, no body)": (HOLD, tree_script(EMPTY_BODY, NO_HOLD)),
        "the wrapper alone (no TIME, no hold check, no body)": (HOLD, tree_script(CONSTANT_BODY, NO_HOLD)),
        "the invocation alone (a script that returns the same reply)": (BARE, CONSTANT_BODY),
        "the invocation alone, one packed argument (same keys, same reply)": (PACKED, CONSTANT_BODY),
        "the invocation alone, a one-integer reply (same keys and arguments)": (BARE, ONE_INTEGER_BODY),
        "the token bucket's script (gcra.lua), same calls": (TOKEN, tree_script((REPO / "core/src/engine/gcra.lua").read_text())),
    }


def command(*args: object) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        # (surrogateescape: a binary argument read back from MONITOR as text keeps its bytes.)
        data = arg if isinstance(arg, bytes) else str(arg).encode("utf-8", "surrogateescape")
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
        """Sends `commands` and a PING, and reads up to the PING's reply without parsing the
        others (so that this process takes as little CPU from the server as it can), refusing
        an error among them. No script reply holds a simple string, so `+PONG` ends them."""
        self.sock.sendall(b"".join(commands) + command("PING"))
        received = bytearray()
        while not received.endswith(b"+PONG\r\n"):
            received += self.reader.read1(1 << 20)
        assert not received.startswith(b"-") and b"\r\n-" not in received, bytes(received[:300])


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process (descheduled time is not counted, unlike commandstats')."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(prefix: str) -> tuple[subprocess.Popen, "Connection", int]:
    """A redis-server on a free loopback port (no persistence), once it answers: the process,
    a connection to it and its port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no"], cwd=tempfile.mkdtemp(prefix=prefix),
                              stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            conn = Connection(port)
            conn.call("PING")
            return server, conn, port
        except OSError:
            if time.monotonic() > deadline:
                server.terminate()
                raise
            time.sleep(0.05)


def main() -> None:
    server, conn, _ = start_server("rk-bench-bucket-")
    try:
        variants = scripts()
        shas = {name: conn.call("SCRIPT", "LOAD", text) for name, (_, text) in variants.items()}
        samples: dict[tuple[str, str], list[float]] = {(n, m): [] for n in variants for m in MODES}
        cpu: dict[tuple[str, str], list[float]] = {(n, m): [] for n in variants for m in MODES}
        # Every command is built once, before the first round: the measured rounds send bytes only.
        runs = {}
        for mode in MODES:
            for name, (era, _) in variants.items():
                if mode == BATCHED and era not in (HOLD, TOKEN):
                    continue  # the older scripts (and the bare one) are compared one call at a time
                if mode != BATCHED and name == ARGS_PER_CALL:
                    continue  # one call at a time it is today's script
                # New keys (the server is emptied before each round), or HOT_KEYS keys of this
                # variant, written before the clock starts, in the window they were written in.
                calls = [call(era, f"{{rk:{name}:{i if mode == NEW else i % HOT_KEYS}}}") for i in range(CALLS)]
                if mode == BATCHED:
                    # As 64 checks in flight travel from Node: one batched invocation (see
                    # wrapper.lua in core/src/engine).
                    shared = "batch-shared" in variants[name][1] and name != ARGS_PER_CALL
                    runs[name, mode] = [batched(shas[name], calls[i:i + BATCH], shared) for i in range(0, CALLS, BATCH)]
                else:
                    runs[name, mode] = [command("EVALSHA", shas[name], len(k), *k, *a) for k, a in calls]
        for _ in range(ROUNDS):
            for (name, mode), commands in runs.items():
                if mode == NEW:
                    conn.call("FLUSHALL", "SYNC")
                else:
                    conn.pipeline(commands[:HOT_KEYS // (BATCH if mode == BATCHED else 1)])
                conn.call("CONFIG", "RESETSTAT")
                cpu_before = cpu_seconds(server.pid)
                for i in range(0, len(commands), 2000):
                    conn.pipeline(commands[i:i + 2000])
                cpu[name, mode].append((cpu_seconds(server.pid) - cpu_before) * 1e6 / CALLS)
                info = conn.call("INFO", "commandstats").decode()  # type: ignore[union-attr]
                found = re.search(r"cmdstat_evalsha:calls=(\d+),usec=(\d+)", info)
                assert found and int(found.group(1)) == len(commands), info
                samples[name, mode].append(int(found.group(2)) / CALLS)
    finally:
        server.terminate()
        server.wait()
    medians = {k: statistics.median(v) for k, v in samples.items() if v}
    cpu_medians = {k: statistics.median(v) for k, v in cpu.items() if v}
    for (name, mode), v in samples.items():
        if v:
            print(f"{mode}: {name}: median {medians[name, mode]:.2f} µs per call "
                  f"(redis-server CPU {cpu_medians[name, mode]:.2f} µs), rounds {' '.join(f'{x:.2f}' for x in v)}")
    names = list(variants)
    today, before_fast, before_fp, before_prelude = names[:4]
    token = next(name for name, (era, _) in variants.items() if era == TOKEN)
    rows = []
    for mode in MODES:
        if mode != BATCHED:
            rows += [
                report.row(f"{mode}: today's script", medians[today, mode], "the script before the fingerprint",
                           medians[before_fp, mode], unit="server µs per call", target=0.99 if mode == NEW else None,
                           headline=False, higher_is_better=False),
                report.row(f"{mode}: today's script", medians[today, mode], "the script before the fast path",
                           medians[before_fast, mode], unit="server µs per call", higher_is_better=False),
            ]
        rows.append(report.row(f"{mode}: today's script", medians[today, mode],
                               f"the prelude before one TIME per invocation and EXISTS ({PREVIOUS_PRELUDE})",
                               medians[before_prelude, mode], unit="server µs per call", higher_is_better=False))
        rows.append(report.row(f"{mode}: today's script, redis-server CPU (whole server, commands included)",
                               cpu_medians[today, mode], *((("the script before the fingerprint",
                                                              cpu_medians[before_fp, mode]) if mode != BATCHED else
                                                             ("the token bucket's script", cpu_medians[token, mode]))),
                               unit="µs per call", higher_is_better=False))
        # The parts: each stripped script (and the token bucket's) against today's whole one.
        rows += [report.row(f"{mode}: {name}", medians[name, mode], "today's whole script", medians[today, mode],
                            unit="server µs per call", higher_is_better=False) for name in names[4:]
                 if (name, mode) in medians]
    report.write("bench-bucket-server-time", "Redis", "Server time of a fixed-window `bucket` check, and of its parts",
                 "python3 bench/python/bucket_server_time.py",
                 f"INFO commandstats over {CALLS:,} pipelined checks per script, mode and round, "
                 f"{ROUNDS} interleaved rounds, medians; run under bench/quiet (other processes paused)", rows)


def call(era: str, tag: str) -> tuple[list[str], list[object]]:
    """One check's keys and arguments as the library of `era` sends them: cost 1; the bucket
    10^9 per minute, the token bucket 10^6 per second (the Node benchmark's) with a burst no run
    exhausts, so no check is refused; the server's TIME."""
    if era == OLD:  # KEYS: the hash; ARGV: op, now, cost, limits
        return [f"{tag}:b:s"], ["check", "", 1, 1, 10**9, 60_000_000, 60_000_000, 1]
    if era == PACKED:
        keys, args = call(HOLD, tag)
        return keys, ["|".join(a.decode("latin-1") if isinstance(a, bytes) else str(a) for a in args)]
    if era == BARE:
        era = HOLD
    if era == TOKEN:  # KEYS: the state, the pause and block keys; ARGV: op, now, [tick, T, tau, max ahead, 0], cost
        return [f"{tag}:t:s", f"{tag}:t:p", f"{tag}:t:bk"], ["check", "", packed(1, 1000, 10**15, 16 * 10**15, 0), 1]
    keys = [f"{tag}:b:s", f"{tag}:b:p"] + ([f"{tag}:b:k"] if era == HOLD else [])
    # ARGV: op, now, cost, fingerprint, then the limits: packed since issue #48 (n, then per limit
    # its prefix, limit, precision, blocks), each number its own argument before (n, then per
    # limit: limit, duration, precision, blocks)
    if era == HOLD:
        return keys, ["check", "", 1, "5211818389484841", packed(1, "0:60000000:60000000:", 10**9, 60_000_000, 1)]
    return keys, ["check", "", 1, "5211818389484841", 1, 10**9, 60_000_000, 60_000_000, 1]


def packed(*values: int | str) -> bytes:
    """Unsigned integers and texts as one argument, MessagePack's smallest form each, one after
    the other (core/src/engine/packed.rs): the token bucket's and sliding.lua's specs."""
    out = bytearray()
    for v in values:
        if isinstance(v, str):
            text = v.encode()
            out += (bytes([0xa0 | len(text)]) if len(text) < 32 else bytes([0xd9, len(text)])) + text
        elif v < 0x80:
            out.append(v)
        else:
            width = next(w for w in (1, 2, 4, 8) if v < 1 << (8 * w))
            out += bytes([{1: 0xcc, 2: 0xcd, 4: 0xce, 8: 0xcf}[width]]) + v.to_bytes(width, "big")
    return bytes(out)


def unpacked(data: bytes) -> list[int | str]:
    """`packed`'s values back."""
    out: list[int | str] = []
    i = 0
    while i < len(data):
        if data[i] < 0x80:
            out.append(data[i])
            i += 1
            continue
        if data[i] & 0xe0 == 0xa0 or data[i] == 0xd9:
            length, at = (data[i] & 0x1f, i + 1) if data[i] != 0xd9 else (data[i + 1], i + 2)
            out.append(data[at:at + length].decode())
            i = at + length
            continue
        width = {0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8}[data[i]]
        out.append(int.from_bytes(data[i + 1:i + 1 + width], "big"))
        i += 1 + width
    return out


def batched(sha: bytes, calls: list[tuple[list[str], list[object]]], shared: bool) -> bytes:
    """Calls of one shape as one batched invocation, as `scripts::batch` in the Redis backend
    writes them: `batch-shared` (the arguments once) when `shared` and every call has the same,
    else `batch-same` (every call's arguments)."""
    keys = [k for ks, _ in calls for k in ks]
    if shared and all(a_s == calls[0][1] for _, a_s in calls):
        return command("EVALSHA", sha, len(keys), *keys, "batch-shared", len(calls), len(calls[0][0]),
                       len(calls[0][1]), *calls[0][1])
    args = [a for _, a_s in calls for a in a_s]
    return command("EVALSHA", sha, len(keys), *keys, "batch-same", len(calls), len(calls[0][0]), len(calls[0][1]), *args)


if __name__ == "__main__":
    main()
