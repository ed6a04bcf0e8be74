"""Checks that log.lua, which reads each instant of the log once per call, answers and writes
exactly as the script of `BEFORE` (default bee60ed, main before this change), which read them
again each time: random `window`/`windows` calls (check, peek, cost 0 and above the limit,
clocks going back, two windows, two configuration fingerprints) on twin keys of one
redis-server; replies, logs and TTL-carrying keys must match. A tool beside the server-time
bench (bench/python/peer_server_time.py), not a test of the suite (the vectors in
tests/vectors/window.json run the shipped script).

    python3 bench/python/log_calls_check.py     (SEED=n for another sequence)
"""
import os
import pathlib
import random
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bucket_server_time as b  # noqa: E402

BEFORE = os.environ.get("BEFORE", "bee60ed")  # main before the hold-lua change
new = b.tree_script((b.ENGINE / "log.lua").read_text())
old = b.script(b.git_show(BEFORE, "core/src/engine/script.rs"), b.git_show(BEFORE, "core/src/engine/log.lua"))
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                          stdout=subprocess.DEVNULL, cwd=tempfile.mkdtemp())
time.sleep(0.5)
try:
    c = b.Connection(port)
    shas = {"new": c.call("SCRIPT", "LOAD", new), "old": c.call("SCRIPT", "LOAD", old)}
    rnd = random.Random(int(os.environ.get("SEED", "7")))
    calls = 0
    for trial in range(200):
        windows = rnd.choice([[(3, 10_000_000)], [(5, 1_000_000), (8, 60_000_000)], [(1, 2_000_000)]])
        longest = max(i for _, i in windows)
        now = 1_800_000_000_000_000 + rnd.randrange(10**9)
        for step in range(40):
            now += rnd.choice([0, 1, 1000, 400_000, 3_000_000, 20_000_000, -2_000_000])
            op = rnd.choice(["check"] * 5 + ["peek"])
            cost = rnd.choice([0, 1, 1, 2, 9])
            fp = rnd.choice(["111", "222"])
            args = [op, now, cost, longest, fp, len(windows)] + [x for w in windows for x in w]
            replies = {}
            for side in ("new", "old"):
                tag = f"{{t{trial}:{side}}}"
                keys = [f"{tag}:z", f"{tag}:d", f"{tag}:l", f"{tag}:p", f"{tag}:bk"]
                replies[side] = c.call("EVALSHA", shas[side], len(keys), *keys, *args)
                replies[side + " state"] = (c.call("ZRANGE", f"{tag}:z", 0, -1, "WITHSCORES"),
                                            c.call("GET", f"{tag}:d"), c.call("GET", f"{tag}:l"),
                                            c.call("PTTL", f"{tag}:z") is not None)
            calls += 1
            assert replies["new"] == replies["old"], (trial, step, args, replies)
            assert replies["new state"] == replies["old state"], (trial, step, args, replies)
    print(f"{calls} calls: log.lua answers and writes as {BEFORE}'s did")
finally:
    server.terminate()
