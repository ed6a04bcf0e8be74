"""Redis server time per check (INFO commandstats), ratekeeper against each peer's script for the
same job, on one redis-server, in one run, rounds interleaved, medians (issue #48, target 1):

| job | ratekeeper | peer |
|---|---|---|
| fixed window | `bucket` (sliding.lua's fixed-window path) | rate-limiter-flexible's `RateLimiterRedis.consume`; `limits`' fixed window |
| exact sliding window | `window` (log.lua) | `limits`' moving window |
| sliding window counter | `slidingWindow` (sliding.lua, sub-buckets) | `limits`' sliding window counter |
| token bucket | `tokenBucket` (gcra.lua) | the cheapest GCRA a user could write (bench/lua/hand_written_gcra.lua) |

    python bench/python/peer_server_time.py [--quick]

The calls are each library's own: one real check per job is made by ratekeeper's Node binding
and by rate-limiter-flexible + ioredis (bench/node/server-time-calls.js: needs `npm ci` in
bench/node and node/ built) and by `limits` (this process: bench/python/requirements.txt), all
watched with MONITOR; each EVALSHA seen (its keys, arguments and script, whose SHA1 is checked)
is then replayed, 20,000 pipelined calls per script and mode: on new keys (the first check of a
window) and on 1,000 keys already written (a check in a window in use). ratekeeper's scripts of
`BEFORE` (default 845f39d, main before this change) run beside today's with the same calls
("before"). With the same calls again:
- the `bucket` and token bucket checks taken apart, each part adding one thing to the one
  before: an EVALSHA returning 1; our keys and arguments; the wrapper; TIME; the hold check;
  the body (a one-integer reply); the reply's shape (the script itself);
- our scripts without a guarantee the peers do not give (bench only, never shipped): without the
  hold check, on the client's clock (the manual-clock argument, as `limits` sends its own, so
  no TIME), without the fingerprint (`bucket`), and without them all, each against the peers;
- `bucket`'s fixed-window path as a script of its own (without the sliding engine after it);
- each peer's floor: the peer's own script after only what the contract and the holds require
  that the peer lacks (bench/lua/floor_prologue.lua: the server's TIME, the hold check), with the
  peer's keys and arguments plus the pause and block keys; for a peer that reads no clock (its
  window rides on the key's TTL), also the hold check alone (TIME read only when a hold exists).
  Peer ÷ floor below 1.0 means no script keeping these guarantees can cost the server what the
  peer does; floor ÷ ours, how much of the gap is ours.
Writes bench/results/bench-peer-server-time.json and prints the load average before and after.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bucket_server_time as b  # noqa: E402
import report  # noqa: E402

QUICK = "--quick" in sys.argv
ROUNDS, CALLS = (3, 5_000) if QUICK else (11, 20_000)
HOT_KEYS = 1000
NEW, SAME = "new key", "same window"
MODES = (NEW, SAME)
BEFORE = os.environ.get("BEFORE", "845f39d")  # main before the parts were taken apart and cut (issue #48)

# The cheapest GCRA a user could write (shown on the benchmarks page).
GCRA_LUA = (HERE.parent / "lua" / "hand_written_gcra.lua").read_text()


def unescape(token: str) -> str:
    """A MONITOR argument (sdscatrepr's quoting) back to its text (a binary one's bytes kept as
    surrogates, which bucket_server_time.command writes back as they were)."""
    out, i = bytearray(), 0
    raw = token.encode("latin-1")
    simple = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("a"): 7, ord("b"): 8, ord('"'): 34, ord("\\"): 92}
    while i < len(raw):
        if raw[i] == 92 and i + 1 < len(raw):
            if raw[i + 1] == ord("x"):
                out.append(int(raw[i + 2:i + 4], 16))
                i += 4
                continue
            out.append(simple.get(raw[i + 1], raw[i + 1]))
            i += 2
            continue
        out.append(raw[i])
        i += 1
    return out.decode("utf-8", "surrogateescape")


def capture(port: int) -> tuple[list[list[str]], dict]:
    """Every command of one real check per job and library, as MONITOR saw it, and what the Node
    helper printed."""
    mon = b.Connection(port)
    mon.sock.sendall(b.command("MONITOR"))
    assert mon.reader.readline().startswith(b"+OK")
    helper = subprocess.run(["node", str(HERE.parent / "node" / "server-time-calls.js"), str(port)],
                            cwd=HERE.parent / "node", check=True, capture_output=True, text=True)
    printed = json.loads(helper.stdout.strip().splitlines()[-1])
    from limits import parse, strategies
    from limits.storage import RedisStorage
    store = RedisStorage(f"redis://127.0.0.1:{port}")
    strategies.FixedWindowRateLimiter(store).hit(parse("1000000000/minute"), "k-limits-fixed")
    strategies.MovingWindowRateLimiter(store).hit(parse("1000/minute"), "k-limits-moving")
    strategies.SlidingWindowCounterRateLimiter(store).hit(parse("1000000000/minute"), "k-limits-sliding")
    printed["limits_lua"] = {name: text.decode() if isinstance(text, bytes) else text for name, text in (
        ("incr_expire", store.lua_incr_expire.script),
        ("acquire_moving_window", store.lua_acquire_moving_window.script),
        ("acquire_sliding_window", store.lua_acquire_sliding_window.script))}
    import limits
    printed["limits_version"] = limits.__version__
    b.Connection(port).call("ECHO", "capture: done")
    commands = []
    while True:
        line = mon.reader.readline().decode("latin-1")
        tokens = [unescape(t) for t in re.findall(r'"((?:[^"\\]|\\.)*)"', line)]
        if tokens[:2] == ["ECHO", "capture: done"]:
            break
        commands.append(tokens)
    mon.sock.close()
    return commands, printed


def evalsha_of(commands: list[list[str]], marker: str) -> tuple[str, list[str], list[str]]:
    """The last EVALSHA (or EVAL: a client's first call, or its fallback on NOSCRIPT) whose keys
    name `marker`: (the script's SHA1, keys, args)."""
    for tokens in reversed(commands):
        if tokens and tokens[0].upper() in ("EVALSHA", "EVAL"):
            n = int(tokens[2])
            keys, args = tokens[3:3 + n], tokens[3 + n:]
            if any(marker in k for k in keys):
                return tokens[1] if tokens[0].upper() == "EVALSHA" else sha1(tokens[1]), keys, args
    raise SystemExit(f"no EVALSHA of {marker} was seen")


# How gcra.lua read its spec before the spec was packed into one argument.
SEPARATE_SPEC = "tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])"


def separate_spec(args: list[str]) -> list[str]:
    """The token bucket's arguments (op, now, [tick, T, tau, max_ahead, actual], cost[, at]) as
    a script before the packed spec takes them: op, now, tick, T, tau, max_ahead, cost, actual[,
    at]."""
    op, now, spec, cost, *rest = args
    tick, emission, tau, max_ahead, actual = b.unpacked(raw(spec))
    return [op, now, *map(str, (tick, emission, tau, max_ahead)), cost, str(actual), *rest]


# How sliding.lua read its spec before the spec was packed into one argument.
SLIDING_SEPARATE_SPEC = "local n = tonumber(ARGV[5])"


def raw(arg: str | bytes) -> bytes:
    """An argument's bytes (a captured one is text with its binary bytes kept as surrogates)."""
    return arg if isinstance(arg, bytes) else arg.encode("utf-8", "surrogateescape")


def separate_sliding_spec(args: list) -> list:
    """sliding.lua's arguments (op, now, cost, fingerprint, [n, then per limit its prefix
    `index:duration:precision:`, limit, precision, blocks, then a settle's actual and at]) as a
    script before the packed spec takes them: n, then per limit limit, duration, precision,
    blocks, each its own argument (a settle's two after them)."""
    n, *rest = b.unpacked(raw(args[4]))
    limits = []
    for i in range(int(n)):
        prefix, limit, precision, blocks = rest[4 * i:4 * i + 4]
        limits += [limit, str(prefix).split(":")[1], precision, blocks]
    return [*args[:4], *map(str, (n, *limits, *rest[4 * int(n):]))]


def before_args(before: str, args: list) -> list:
    """`args` (today's) as the script `before` takes them."""
    if SEPARATE_SPEC in before:
        return separate_spec(args)
    if SLIDING_SEPARATE_SPEC in before:
        return separate_sliding_spec(args)
    return args


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


# job -> the peers' scripts for it.
PEERS = {"bucket": ["rate-limiter-flexible consume", "limits fixed window"],
         "window": ["limits moving window"], "sliding window": ["limits sliding window counter"],
         "token bucket": ["hand-written GCRA (GET, SET, TIME)"]}
PEER_JOBS = {peer: job for job, names in PEERS.items() for peer in names}
# The peers that read no clock: a window rides on its key's TTL (the server's clock).
CLOCKLESS = {"rate-limiter-flexible consume", "limits fixed window", "limits sliding window counter"}

STATE_WITH_HOLDS = "idea: token bucket reading its state with the holds (one MGET, not EXISTS then GET)"


def state_with_holds(script: str) -> str:
    """The token bucket's script with its state read in the hold check's round: one MGET of the
    pause key, the block key and the state, the body taking the state from it; when the MGET
    found none, the body's GET still runs (MGET answers nil for a key of another type too, which
    GET refuses, WRONGTYPE, and the SET would overwrite: calls' batch test
    a_failing_call_in_a_batch_fails_alone holds a check to refusing it)."""
    hold = (b.ENGINE / "hold_check.lua").read_text()
    changed = hold.replace("""  if redis.call('EXISTS', pause_key, block_key) > 0 then
    local held = redis.call('MGET', pause_key, block_key)""", """  local held = redis.call('MGET', pause_key, block_key, KEYS[1])
  prefetched = held[3]
  if held[1] or held[2] then""")
    text = script.replace(hold, "local prefetched\n" + changed).replace(
        "local raw = redis.call('GET', KEYS[1])", "local raw = prefetched\nif not raw then raw = redis.call('GET', KEYS[1]) end")
    assert changed != hold and "prefetched = held[3]" in text and "if not raw" in text, "the hold check or gcra.lua changed"
    return text


# The contract's floor: the server's clock and the hold check, before a peer's own script.
FLOOR_LUA = (HERE.parent / "lua" / "floor_prologue.lua").read_text()
FLOOR_TIME = "local t = redis.call('TIME')\nlocal now = t[1] * 1000000 + t[2]\n"
HOLD_ONLY = "hold check only, TIME read when a hold exists"


def floor_name(peer: str, hold_only: bool = False) -> str:
    """The name of `peer`'s floor: what it adds to the peer's script."""
    if hold_only:
        return f"floor of {peer} ({HOLD_ONLY})"
    added = {"limits moving window": "the server's TIME for the client's clock", "hand-written GCRA (GET, SET, TIME)": None}
    clock = added.get(peer, "+ TIME")
    return f"floor of {peer} ({clock + ', ' if clock else ''}+ the hold check)"


def floor_script(peer_lua: str, hold_only: bool = False) -> str:
    """`peer_lua` after the floor's prologue: the server's TIME (a peer that reads it already, the
    hand-written GCRA, reads it once, the prologue's; a peer on the client's clock, `limits`'
    moving window, decides on the server's instead) and the hold check. `hold_only`: the TIME
    is read only when a hold exists (for a peer that reads no clock)."""
    assert FLOOR_TIME in FLOOR_LUA, "floor_prologue.lua changed: update FLOOR_TIME"
    body = peer_lua.replace(FLOOR_TIME, "", 1)
    body = body.replace("local timestamp = tonumber(ARGV[1])", "local timestamp = now / 1000000", 1)
    prologue = FLOOR_LUA
    if hold_only:
        assert "now" not in body, "a peer reading a clock has no floor without TIME"
        prologue = prologue.replace(FLOOR_TIME, "local now\n", 1).replace(
            "  local held = redis.call('MGET', KEYS[n - 1], KEYS[n])\n",
            "  local held = redis.call('MGET', KEYS[n - 1], KEYS[n])\n"
            "  local t = redis.call('TIME')\n  now = t[1] * 1000000 + t[2]\n", 1)
        assert "local now\n" in prologue and prologue.count("TIME") == 2
    return prologue + body


def hold_keys(key: str) -> list[str]:
    """The pause and block keys of a peer's key, in its Cluster slot: its own hash tag, or the
    whole key as one (a key without a tag hashes as a whole, as `{key}` does)."""
    base = key if re.search(r"\{[^}]+\}", key) else "{" + key + "}"
    return [base + ":p", base + ":b"]


FIXED_ALONE = "idea: bucket's fixed-window path as a script of its own (no sliding engine after it)"
# A variant run on the client's clock: the manual-clock argument (ARGV[2]) holds this process's
# instant, as `limits` sends its own, so the script never reads TIME.
CLIENT_CLOCK = "on the client's clock"


def parts(body: str, reply: str, token: bool, keys: list[str], args: list[str]) -> dict[str, tuple[list[str], list[str], str]]:
    """Our check taken apart, each part adding one thing to the one before (name -> keys,
    arguments, script); the last, with the reply's shape, is the script itself."""
    time_only = "local now = now_us(ARGV)\nreturn 1\n"
    return {
        "part 1, an EVALSHA returning 1 (no keys, no arguments)": ([], [], "return 1\n"),
        "part 2, + our keys and arguments": (keys, args, "return 1\n"),
        "part 3, + the wrapper (hold keys taken off KEYS, not read)": (keys, args, b.tree_script("return 1\n", b.NO_HOLD, token)),
        "part 4, + TIME": (keys, args, b.tree_script(time_only, b.NO_HOLD, token)),
        "part 5, + the hold check": (keys, args, b.tree_script(time_only, None, token)),
        "part 6, + the body (a one-integer reply)": (keys, args, b.tree_script(body.replace(reply, reply.split("return")[0] + "return 1" + reply.split("}")[1]), None, token)),
    }


def stripped(job: str, body: str, fast: str, token: bool) -> dict[str, str]:
    """Our script without a guarantee the peers do not give (bench only, never shipped): what each
    costs the server. The client's clock is in the name (CLIENT_CLOCK): `build` sends it."""
    out = {
        "without the hold check": b.tree_script(body, b.NO_HOLD, token),
        f"{CLIENT_CLOCK}": b.tree_script(body, None, token),
    }
    if job == "bucket":
        # (The fixed-window path alone, which FIXED_ALONE shows costs what the whole script does.)
        out["without the fingerprint"] = b.tree_script(b.without_fingerprint(fast))
        out[f"without the hold check and the fingerprint, {CLIENT_CLOCK}"] = b.tree_script(b.without_fingerprint(fast), b.NO_HOLD)
    else:
        out[f"without the hold check, {CLIENT_CLOCK}"] = b.tree_script(body, b.NO_HOLD, token)
    return out


def main() -> None:
    server, conn, port = b.start_server("rk-bench-peers-")
    load_before = os.getloadavg()
    try:
        version = conn.call("INFO", "server").decode()  # type: ignore[union-attr]
        redis_version = re.search(r"redis_version:(\S+)", version).group(1)  # type: ignore[union-attr]
        commands, printed = capture(port)
        engine = b.REPO / "core/src/engine"
        ours = {"bucket": ("k-bucket", "sliding.lua"), "token bucket": ("k-token", "gcra.lua"),
                "window": ("k-log", "log.lua"), "sliding window": ("k-sliding", "sliding.lua")}
        # name -> (verb, script text, marker, keys, args, job)
        variants: dict[str, tuple[str, str, str, list[str], list[str], str]] = {}
        for job, (marker, lua) in ours.items():
            sha, keys, args = evalsha_of(commands, marker)
            text = b.tree_script((engine / lua).read_text())
            assert sha1(text) == sha, f"{job}: the script assembled from the tree is not the one the library sends"
            variants[f"ratekeeper {job}"] = ("EVALSHA", text, marker, keys, args, job)
            before = b.tree_script(b.git_show(BEFORE, f"core/src/engine/{lua}"), commit=BEFORE)
            if before != text:  # (a script this change left as it was is measured once)
                variants[f"ratekeeper {job}, before ({BEFORE})"] = ("EVALSHA", before, marker, keys,
                                                                    before_args(before, args), job)
        sliding = (engine / "sliding.lua").read_text()
        fast = sliding[:sliding.index("local fmt = function")]  # the fixed-window path a `bucket` takes
        gcra = (engine / "gcra.lua").read_text()
        # (The last reply of the fixed-window path, and of gcra.lua: an admitted check's.)
        for job, body, reply, token in (("bucket", sliding, "\n  return {now, mismatch, total, newest, newest}\nend\n", False),
                                        ("token bucket", gcra, "\nreturn {tat_us, tat_ns, now}", True)):
            _, keys, args = evalsha_of(commands, ours[job][0])
            marker = ours[job][0]
            assert body.count(reply) == 1, f"{job}: its reply changed: update the parts"
            for name, (ks, a, text) in parts(body, reply, token, keys, args).items():
                variants[f"{job}: {name}"] = ("EVALSHA", text, marker, ks, a, job)
            for name, text in stripped(job, body, fast, token).items():
                variants[f"{job}: {name}"] = ("EVALSHA", text, marker, keys, args, job)
        _, keys, args = evalsha_of(commands, "k-token")
        variants[STATE_WITH_HOLDS] = ("EVALSHA", state_with_holds(variants["ratekeeper token bucket"][1]), "k-token",
                                      keys, args, "token bucket")
        variants[FIXED_ALONE] = ("EVALSHA", b.tree_script(fast), "k-bucket", *evalsha_of(commands, "k-bucket")[1:], "bucket")
        sha, keys, args = evalsha_of(commands, "rlf:k-rlf")
        assert sha1(printed["rlf_lua"]) == sha
        variants["rate-limiter-flexible consume"] = ("EVALSHA", printed["rlf_lua"], "k-rlf", keys, args, "bucket")
        for name, script, marker, job in (("limits fixed window", "incr_expire", "k-limits-fixed", "bucket"),
                                          ("limits moving window", "acquire_moving_window", "k-limits-moving", "window"),
                                          ("limits sliding window counter", "acquire_sliding_window", "k-limits-sliding",
                                           "sliding window")):
            sha, keys, args = evalsha_of(commands, marker)
            assert sha1(printed["limits_lua"][script]) == sha
            variants[name] = ("EVALSHA", printed["limits_lua"][script], marker, keys, args, job)
        # The hand-written GCRA: 10^6 tokens per second (T = 1 µs), a burst no run exhausts.
        variants["hand-written GCRA (GET, SET, TIME)"] = ("EVALSHA", GCRA_LUA, "k-gcra", ["k-gcra"],
                                                          ["1", str(10**15)], "token bucket")
        for peer in [name for name in variants if name in PEER_JOBS]:
            _, lua, marker, keys, args, job = variants[peer]
            floor_keys = keys + hold_keys(keys[0])
            variants[floor_name(peer)] = ("EVALSHA", floor_script(lua), marker, floor_keys, args, job)
            # (A peer on the client's clock decides on the server's in its floor.)
            assert peer in CLOCKLESS or FLOOR_TIME in lua or "now / 1000000" in variants[floor_name(peer)][1], peer
            if peer in CLOCKLESS:
                variants[floor_name(peer, True)] = ("EVALSHA", floor_script(lua, True), marker, floor_keys, args, job)

        shas = {name: conn.call("SCRIPT", "LOAD", text) for name, (_, text, *_rest) in variants.items()}

        def build(name: str, mode: str) -> list[bytes]:
            verb, _, marker, keys, args, _ = variants[name]
            out = []
            for i in range(CALLS):
                tag = f"{marker}-{i if mode == NEW else i % HOT_KEYS}"
                ks = [k.replace(marker, tag) for k in keys]
                a = list(args)
                if marker == "k-limits-moving":
                    a[0] = repr(time.time())  # its client's clock: the instant of this round
                elif CLIENT_CLOCK in name:
                    a[1] = str(int(time.time() * 1e6))
                out.append(b.command(verb, shas[name], len(ks), *ks, *a))
            return out

        # redis-server's own CPU time over the same calls (its main thread's, from the kernel's
        # schedstat: a descheduled wait is not counted, unlike commandstats' wall clock), parsing
        # and I/O included: what sizes a primary, and steadier on a loaded machine.
        def cpu_ns() -> int:
            return int(pathlib.Path(f"/proc/{server.pid}/schedstat").read_text().split()[0])

        samples: dict[tuple[str, str], list[float]] = {(n, m): [] for n in variants for m in MODES}
        cpu: dict[tuple[str, str], list[float]] = {(n, m): [] for n in variants for m in MODES}
        for _ in range(ROUNDS):
            for mode in MODES:
                for name, (verb, *_rest) in variants.items():
                    commands_ = build(name, mode)
                    if mode == NEW:
                        conn.call("FLUSHALL", "SYNC")
                    else:
                        conn.pipeline(commands_[:HOT_KEYS])
                    conn.call("CONFIG", "RESETSTAT")
                    started = cpu_ns()
                    for i in range(0, len(commands_), 2000):
                        conn.pipeline(commands_[i:i + 2000])
                    cpu[name, mode].append((cpu_ns() - started) / CALLS / 1000)
                    info = conn.call("INFO", "commandstats").decode()  # type: ignore[union-attr]
                    found = re.search(r"cmdstat_" + verb.lower() + r":calls=(\d+),usec=(\d+)", info)
                    assert found and int(found.group(1)) == CALLS, info
                    samples[name, mode].append(int(found.group(2)) / CALLS)
    finally:
        server.terminate()
        server.wait()
    load_after = os.getloadavg()
    med = {k: statistics.median(v) for k, v in samples.items()}
    # The lowest round too: on a shared machine a round only gains time (a descheduled call
    # counts its wait), so the lowest is the steadier figure of what a call costs.
    low = {k: min(v) for k, v in samples.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"redis-server {redis_version}; rate-limiter-flexible {printed['rlf_version']}; limits {printed['limits_version']}")
    print(f"load average before {' '.join(f'{x:.2f}' for x in load_before)}, after {' '.join(f'{x:.2f}' for x in load_after)}")
    for (name, mode), v in samples.items():
        print(f"{mode}: {name}: median {med[name, mode]:.2f} server µs per check, redis-server CPU "
              f"{cpu_med[name, mode]:.2f} µs; rounds {' '.join(f'{x:.2f}' for x in v)}")
    peers = PEERS
    rows = []

    def add(name: str, base: str, key: str | None = None) -> None:
        """A row of `name` (its figures under `key`, by default the name) against `base`."""
        key = key or name
        rows.append(report.row(f"{mode}: {name}", med[key, mode], base, med[base, mode],
                               unit="server µs per check", higher_is_better=False))
        rows[-1].update(ratekeeper_lowest=low[key, mode], peer_lowest=low[base, mode],
                        ratekeeper_cpu=cpu_med[key, mode], peer_cpu=cpu_med[base, mode])
        print(f"| {mode} | {name} | {base} | {med[key, mode]:.2f} | {med[base, mode]:.2f} | "
              f"{med[key, mode] / med[base, mode]:.2f} | {low[key, mode]:.2f}, {low[base, mode]:.2f}, "
              f"{low[key, mode] / low[base, mode]:.2f} |")

    print("\n| mode | ratekeeper | peer | ratekeeper µs | peer µs | ratekeeper ÷ peer | lowest rounds: ratekeeper, peer, ÷ |"
          "\n|---|---|---|---:|---:|---:|---:|")
    for mode in MODES:
        for job, names in peers.items():
            for ours_name in (f"ratekeeper {job}", f"ratekeeper {job}, before ({BEFORE})"):
                if ours_name not in variants:
                    continue
                for peer in names:
                    rows.append(report.row(f"{mode}: {ours_name}", med[ours_name, mode], peer, med[peer, mode],
                                           unit="server µs per check", target=1.0, higher_is_better=False))
                    rows[-1].update(ratekeeper_lowest=low[ours_name, mode], peer_lowest=low[peer, mode],
                                    ratekeeper_cpu=cpu_med[ours_name, mode], peer_cpu=cpu_med[peer, mode])
                    print(f"| {mode} | {ours_name} | {peer} | {med[ours_name, mode]:.2f} | {med[peer, mode]:.2f} | "
                          f"{med[ours_name, mode] / med[peer, mode]:.2f} | {low[ours_name, mode]:.2f}, "
                          f"{low[peer, mode]:.2f}, {low[ours_name, mode] / low[peer, mode]:.2f} |")
        # The contract's floor: peer ÷ floor (below 1.0: no script keeping the guarantees reaches
        # the peer), then floor ÷ ours (how much of the gap is ours).
        for job, names in peers.items():
            for peer in names:
                for hold_only in (False, True):
                    if floor_name(peer, hold_only) in variants:
                        add(floor_name(peer, hold_only), peer)
                        add(f"ratekeeper {job}", floor_name(peer, hold_only))
        for name in variants:
            if name.startswith("idea:"):
                base = f"ratekeeper {variants[name][5]}"
                add(name, base)
        # Our check taken apart: each part against the one before it (the last is the script).
        for job in ("bucket", "token bucket"):
            steps = [n for n in variants if n.startswith(f"{job}: part ")] + [f"ratekeeper {job}"]
            add(steps[0], peers[job][0])
            for before, name in zip(steps, steps[1:]):
                add(name if name.startswith(job) else f"{name} (part 7, + the reply's shape)", before, name)
            # Our script without a guarantee the peers do not give, against the peers.
            for name in variants:
                if name.startswith(f"{job}: without") or name.startswith(f"{job}: {CLIENT_CLOCK}"):
                    add(name, f"ratekeeper {job}")
                    for peer in peers[job]:
                        add(name, peer)
    print("\n| mode | peer | peer | floor | ratekeeper | peer ÷ floor | ratekeeper ÷ floor |"
          "\n|---|---|---:|---:|---:|---:|---:|")
    for mode in MODES:
        for figures, label in ((med, "commandstats µs"), (cpu_med, "CPU µs")):
            for peer, job in PEER_JOBS.items():
                for hold_only in (False, True):
                    floor = floor_name(peer, hold_only)
                    if floor in variants:
                        p_, f_, o_ = figures[peer, mode], figures[floor, mode], figures[f"ratekeeper {job}", mode]
                        print(f"| {mode}, {label} | {peer}{' (hold check only)' if hold_only else ''} | {p_:.2f} | "
                              f"{f_:.2f} | {o_:.2f} | {p_ / f_:.2f} | {o_ / f_:.2f} |")
    report.write("bench-peer-server-time", "Redis",
                 "Redis server time per check: ratekeeper against each peer's script for the same job",
                 "python bench/python/peer_server_time.py",
                 f"INFO commandstats over {CALLS:,} pipelined calls per script and mode (each library's own EVALSHA, "
                 f"captured with MONITOR), {ROUNDS} interleaved rounds, medians; redis-server {redis_version}; "
                 f"rate-limiter-flexible {printed['rlf_version']}, limits {printed['limits_version']}; load average "
                 f"before {load_before[0]:.2f}, after {load_after[0]:.2f} (a shared 2-CPU machine: server µs are "
                 f"far less sensitive to load than throughput); ratekeeper_cpu and peer_cpu: redis-server's own CPU µs "
                 f"per check over the same calls (its main thread's schedstat, parsing and I/O included), medians", rows,
                 gcra_lua=GCRA_LUA, before=BEFORE)


if __name__ == "__main__":
    main()
