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
`BEFORE` (default bee60ed, main before this change) run beside today's with the same calls
("before"), and so do variants that try the issue's ideas (FCALL, no hold check, no
fingerprint, the token bucket's state read with the holds). Writes
bench/results/bench-peer-server-time.json and prints the load average before and after.
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
BEFORE = os.environ.get("BEFORE", "bee60ed")  # main before the hold-lua change

# The cheapest GCRA a user could write (shown on the benchmarks page).
GCRA_LUA = (HERE.parent / "lua" / "hand_written_gcra.lua").read_text()


def unescape(token: str) -> str:
    """A MONITOR argument (sdscatrepr's quoting) back to its text."""
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
    return out.decode()


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


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


STATE_WITH_HOLDS = "idea: token bucket reading its state with the holds (one MGET, not EXISTS then GET)"


def state_with_holds(script: str) -> str:
    """The token bucket's script with its state read in the hold check's round: one MGET of the
    pause key, the block key and the state, the body taking the state from it."""
    hold = (b.ENGINE / "hold_check.lua").read_text()
    changed = hold.replace("""  if redis.call('EXISTS', pause_key, block_key) > 0 then
    local held = redis.call('MGET', pause_key, block_key)""", """  local held = redis.call('MGET', pause_key, block_key, KEYS[1])
  prefetched = held[3] or false
  if held[1] or held[2] then""")
    text = script.replace(hold, "local prefetched\n" + changed).replace(
        "local raw = redis.call('GET', KEYS[1])", "local raw = prefetched\nif raw == nil then raw = redis.call('GET', KEYS[1]) end")
    assert changed != hold and "prefetched = held[3]" in text and "if raw == nil" in text, "the hold check or gcra.lua changed"
    return text


def fcall_library(name: str, script: str) -> str:
    """`script` as a Redis Function (called by FCALL instead of EVALSHA)."""
    return f"#!lua name={name}\nredis.register_function('{name}', function(KEYS, ARGV)\n{script}\nend)\n"


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
            before = b.script(b.git_show(BEFORE, "core/src/engine/script.rs"), b.git_show(BEFORE, f"core/src/engine/{lua}"))
            variants[f"ratekeeper {job}, before ({BEFORE})"] = ("EVALSHA", before, marker, keys, args, job)
        _, keys, args = evalsha_of(commands, "k-bucket")
        sliding = (engine / "sliding.lua").read_text()
        fast = sliding[:sliding.index("local fmt = function")]
        idea = {
            "idea: bucket by FCALL (a Redis Function) instead of EVALSHA": ("FCALL", variants["ratekeeper bucket"][1]),
            "idea: bucket without the hold check (what keeping holds in the key's own hash could save at most)":
                ("EVALSHA", b.tree_script(sliding, b.NO_HOLD)),
            "idea: bucket without the fingerprint (what checking it only on a new key could save at most)":
                ("EVALSHA", b.tree_script(b.without_fingerprint(fast))),
        }
        for name, (verb, text) in idea.items():
            variants[name] = (verb, text, "k-bucket", keys, args, "bucket")
        _, keys, args = evalsha_of(commands, "k-token")
        variants[STATE_WITH_HOLDS] = ("EVALSHA", state_with_holds(variants["ratekeeper token bucket"][1]), "k-token",
                                      keys, args, "token bucket")
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

        shas = {}
        for name, (verb, text, *_rest) in variants.items():
            if verb == "FCALL":
                conn.call("FUNCTION", "LOAD", "REPLACE", fcall_library("rk_bucket", text))
                shas[name] = b"rk_bucket"
            else:
                shas[name] = conn.call("SCRIPT", "LOAD", text)

        def build(name: str, mode: str) -> list[bytes]:
            verb, _, marker, keys, args, _ = variants[name]
            out = []
            for i in range(CALLS):
                tag = f"{marker}-{i if mode == NEW else i % HOT_KEYS}"
                ks = [k.replace(marker, tag) for k in keys]
                a = list(args)
                if name == "limits moving window":
                    a[0] = repr(time.time())  # its client's clock: the instant of this round
                out.append(b.command(verb, shas[name], len(ks), *ks, *a))
            return out

        samples: dict[tuple[str, str], list[float]] = {(n, m): [] for n in variants for m in MODES}
        for _ in range(ROUNDS):
            for mode in MODES:
                for name, (verb, *_rest) in variants.items():
                    commands_ = build(name, mode)
                    if mode == NEW:
                        conn.call("FLUSHALL", "SYNC")
                    else:
                        conn.pipeline(commands_[:HOT_KEYS])
                    conn.call("CONFIG", "RESETSTAT")
                    for i in range(0, len(commands_), 2000):
                        conn.pipeline(commands_[i:i + 2000])
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
    print(f"redis-server {redis_version}; rate-limiter-flexible {printed['rlf_version']}; limits {printed['limits_version']}")
    print(f"load average before {' '.join(f'{x:.2f}' for x in load_before)}, after {' '.join(f'{x:.2f}' for x in load_after)}")
    for (name, mode), v in samples.items():
        print(f"{mode}: {name}: median {med[name, mode]:.2f} server µs per check; rounds {' '.join(f'{x:.2f}' for x in v)}")
    peers = {"bucket": ["rate-limiter-flexible consume", "limits fixed window"],
             "window": ["limits moving window"], "sliding window": ["limits sliding window counter"],
             "token bucket": ["hand-written GCRA (GET, SET, TIME)"]}
    rows = []
    print("\n| mode | ratekeeper | peer | ratekeeper µs | peer µs | ratekeeper ÷ peer | lowest rounds: ratekeeper, peer, ÷ |"
          "\n|---|---|---|---:|---:|---:|---:|")
    for mode in MODES:
        for job, names in peers.items():
            for ours_name in (f"ratekeeper {job}", f"ratekeeper {job}, before ({BEFORE})"):
                for peer in names:
                    rows.append(report.row(f"{mode}: {ours_name}", med[ours_name, mode], peer, med[peer, mode],
                                           unit="server µs per check", target=1.0, higher_is_better=False))
                    rows[-1].update(ratekeeper_lowest=low[ours_name, mode], peer_lowest=low[peer, mode])
                    print(f"| {mode} | {ours_name} | {peer} | {med[ours_name, mode]:.2f} | {med[peer, mode]:.2f} | "
                          f"{med[ours_name, mode] / med[peer, mode]:.2f} | {low[ours_name, mode]:.2f}, "
                          f"{low[peer, mode]:.2f}, {low[ours_name, mode] / low[peer, mode]:.2f} |")
        for name in variants:
            if name.startswith("idea:"):
                base = f"ratekeeper {variants[name][5]}"
                rows.append(report.row(f"{mode}: {name}", med[name, mode], f"{base} today", med[base, mode],
                                       unit="server µs per check", higher_is_better=False))
                rows[-1].update(ratekeeper_lowest=low[name, mode], peer_lowest=low[base, mode])
                print(f"| {mode} | {name} | {base} today | {med[name, mode]:.2f} | {med[base, mode]:.2f} | "
                      f"{med[name, mode] / med[base, mode]:.2f} | {low[name, mode]:.2f}, {low[base, mode]:.2f}, "
                      f"{low[name, mode] / low[base, mode]:.2f} |")
    report.write("bench-peer-server-time", "Redis",
                 "Redis server time per check: ratekeeper against each peer's script for the same job",
                 "python bench/python/peer_server_time.py",
                 f"INFO commandstats over {CALLS:,} pipelined calls per script and mode (each library's own EVALSHA, "
                 f"captured with MONITOR), {ROUNDS} interleaved rounds, medians; redis-server {redis_version}; "
                 f"rate-limiter-flexible {printed['rlf_version']}, limits {printed['limits_version']}; load average "
                 f"before {load_before[0]:.2f}, after {load_after[0]:.2f} (a shared 2-CPU machine: server µs are "
                 f"far less sensitive to load than throughput)", rows,
                 gcra_lua=GCRA_LUA, before=BEFORE)


if __name__ == "__main__":
    main()
