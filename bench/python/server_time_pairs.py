"""Two scripts for one job compared in pairs by redis-server's own CPU time, for a difference
smaller than a loaded machine's spread between rounds (the benchmarks page's "Ideas measured and
not taken"): a chunk of 2,000 pipelined calls of one script, then one of the other (their order
alternating), 80 times, each chunk timed by the server's main thread's time on a CPU (the
kernel's schedstat: a descheduled wait is not counted); the median of the chunk-by-chunk
differences is printed with its quartiles, in a window in use (500 keys) and on new keys.

    python bench/python/server_time_pairs.py [IDEA…]

IDEA is one of `fold` (the token bucket reading its state with the holds, peer_server_time.py's
idea row), `fixed-alone` (the `bucket`'s fixed-window path as a script of its own) and
`no-table-remove` (the hold check indexing KEYS instead of table.remove, both kinds),
`separate-spec` (the token bucket before its spec was packed into one argument: each number its
own, read with tonumber), `text-spec` (the packed spec written as text, parsed in Lua with
string.match), `separate-bucket-spec` and `separate-sliding-spec` (sliding.lua before its limits
were packed the same way, with their fields' prefixes made by the client: the `bucket`'s
fixed-window path, and a sliding window counter of one limit, 60 blocks); all by default. The
calls are the library's own, captured as peer_server_time.py does (it needs what that needs);
when only ideas of `MADE`'s calls are picked, those are made here in the library's form
(bucket_server_time.py's for the `bucket`) and nothing is captured. Prints only; writes
nothing.
"""

from __future__ import annotations

import pathlib
import statistics
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bucket_server_time as b  # noqa: E402
import peer_server_time as p  # noqa: E402

PAIRS, CHUNK, HOT_KEYS = 80, 2_000, 500


def direct(hold: str) -> str:
    """The hold check taking its keys off KEYS by index instead of table.remove."""
    out = hold.replace("""  local block_key = table.remove(KEYS)
  local pause_key = table.remove(KEYS)""", """  local n = #KEYS
  local block_key, pause_key = KEYS[n], KEYS[n - 1]
  KEYS[n], KEYS[n - 1] = nil, nil""")
    assert out != hold, "the hold check changed: update `direct`"
    return out


PACKED_LINE = "local tick, T, tau, max_ahead, actual = cmsgpack.unpack(ARGV[3])"
# gcra.lua before its spec was packed (each number its own argument, read with tonumber).
SEPARATE = "4e00860"
# sliding.lua before its spec was packed.
SLIDING_SEPARATE = "d71b3cc"


def text_spec(gcra: str) -> str:
    """gcra.lua reading its packed argument as text, `tick:T:tau:max_ahead:actual`, parsed in
    Lua (string.match and tonumber) instead of by cmsgpack."""
    out = gcra.replace(PACKED_LINE, """local tick, T, tau, max_ahead, actual = string.match(ARGV[3], '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
tick, T, tau, max_ahead, actual = tonumber(tick), tonumber(T), tonumber(tau), tonumber(max_ahead), tonumber(actual)""")
    assert out != gcra, "gcra.lua changed: update text_spec"
    return out


def as_text(args: list[str]) -> list[str]:
    """The token bucket's arguments with its packed spec written as text."""
    return [*args[:2], ":".join(map(str, b.unpacked(args[2].encode("utf-8", "surrogateescape")))), *args[3:]]


def ideas() -> dict[str, list[tuple]]:
    """idea -> [(the calls' marker, today's script, the idea's[, the idea's arguments from
    today's])]."""
    sliding, gcra = (b.ENGINE / "sliding.lua").read_text(), (b.ENGINE / "gcra.lua").read_text()
    hold = (b.ENGINE / "hold_check.lua").read_text()
    return {
        "fold": [("k-token", b.tree_script(gcra), p.state_with_holds(b.tree_script(gcra)))],
        "fixed-alone": [("k-bucket", b.tree_script(sliding), b.tree_script(sliding[:sliding.index("local fmt = function")]))],
        "no-table-remove": [("k-token", b.tree_script(gcra), b.tree_script(gcra, direct(hold))),
                            ("k-bucket", b.tree_script(sliding), b.tree_script(sliding, direct(hold)))],
        "separate-spec": [("k-token", b.tree_script(gcra), b.tree_script(b.git_show(SEPARATE, "core/src/engine/gcra.lua")),
                           p.separate_spec)],
        "text-spec": [("k-token", b.tree_script(gcra), b.tree_script(text_spec(gcra)), as_text)],
        "separate-bucket-spec": [("k-bucket", b.tree_script(sliding),
                                  b.tree_script(b.git_show(SLIDING_SEPARATE, "core/src/engine/sliding.lua")),
                                  p.separate_sliding_spec)],
        "separate-sliding-spec": [("k-sliding", b.tree_script(sliding),
                                   b.tree_script(b.git_show(SLIDING_SEPARATE, "core/src/engine/sliding.lua")),
                                   p.separate_sliding_spec)],
    }


# Calls made here rather than captured: marker -> (keys, args). The sliding window counter: its
# hash and sub-buckets, the pause and block keys; 10^9 a minute in one-second blocks.
MADE = {"k-bucket": b.call(b.HOLD, "{k-bucket}"),
        "k-sliding": ([f"{{k-sliding}}:{k}" for k in ("h", "b", "p", "bk")],
                      ["check", "", 1, "5211818389484841", b.packed(1, "0:60000000:1000000:", 10**9, 1_000_000, 60)])}


def main() -> None:
    table = ideas()
    picked = sys.argv[1:] or list(table)
    unknown = [a for a in picked if a not in table]
    if unknown:
        sys.exit(f"unknown idea(s) {', '.join(unknown)}; ideas: {' '.join(table)}")
    server, conn, port = b.start_server("rk-bench-pairs-")

    def cpu_ns() -> int:
        return int(pathlib.Path(f"/proc/{server.pid}/schedstat").read_text().split()[0])

    try:
        # (No capture when every call picked can be made here.)
        made_only = all(marker in MADE for idea in picked for marker, *_ in table[idea])
        commands = [] if made_only else p.capture(port)[0]
        for idea in picked:
            for marker, today, other, *changed in table[idea]:
                keys, args = MADE[marker] if made_only else p.evalsha_of(commands, marker)[1:]
                calls_args = {"today": args, idea: changed[0](args) if changed else args}
                shas = {"today": conn.call("SCRIPT", "LOAD", today), idea: conn.call("SCRIPT", "LOAD", other)}
                for mode in ("window in use", "new keys"):
                    times: dict[str, list[float]] = {name: [] for name in shas}
                    for r in range(PAIRS):
                        chunks = {}
                        for j, (name, sha) in enumerate(shas.items()):
                            first = (2 * r + j) * CHUNK
                            chunks[name] = [b.command("EVALSHA", sha, len(keys), *[
                                k.replace(marker, f"{marker}-{first + i if mode == 'new keys' else i % HOT_KEYS}")
                                for k in keys], *calls_args[name]) for i in range(CHUNK)]
                        if r == 0 and mode == "window in use":
                            conn.pipeline(chunks["today"][:HOT_KEYS])
                        for name in (shas if r % 2 == 0 else reversed(list(shas))):
                            started = cpu_ns()
                            conn.pipeline(chunks[name])
                            times[name].append((cpu_ns() - started) / CHUNK / 1000)
                    diffs = [o - t for t, o in zip(times["today"], times[idea])]
                    q1, _, q3 = statistics.quantiles(diffs, n=4)
                    print(f"{idea} ({marker}, {mode}): today {statistics.median(times['today']):.2f}, "
                          f"the idea {statistics.median(times[idea]):.2f} CPU µs per check; the idea's difference "
                          f"{statistics.median(diffs):+.3f} µs (quartiles {q1:+.3f}, {q3:+.3f})")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
