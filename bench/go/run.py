#!/usr/bin/env python3
"""Builds the Go benchmark (bench/go/main.go) against the release libratekeeper and Debian's Go
peers, runs it against a redis-server of the shared fixture and writes bench/results/bench-go.json
(through bench/python/report.py).

Offline build: the peers are Debian's packages (golang-golang-x-time-dev,
golang-github-gomodule-redigo-dev) under /usr/share/gocode, which has no module proxy behind it
(redigo's go.mod names testify, which Debian does not ship), so the program builds in GOPATH mode
(GO111MODULE=off) with GOPATH = a scratch directory linking the module at its import path, then
/usr/share/gocode.

    python3 bench/go/run.py [--quick]
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "python"))
import report  # noqa: E402


def main() -> None:
    quick = "--quick" in sys.argv
    subprocess.check_call(["nice", "cargo", "build", "--quiet", "--release", "--locked", "-p", "ratekeeper-ffi", "--lib"],
                          cwd=REPO)
    meta = json.loads(subprocess.check_output(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=REPO))
    target = pathlib.Path(meta["target_directory"])
    # The library as scripts/package ships it, where the module looks (go/lib, gitignored;
    # scripts/test-go puts its debug build back).
    lib = REPO / "go" / "lib"
    (lib / "linux_amd64").mkdir(parents=True, exist_ok=True)
    (lib / "include").mkdir(parents=True, exist_ok=True)
    subprocess.check_call([str(REPO / "ffi-c" / "make-static-library"), str(target / "release" / "libratekeeper.a"),
                           str(lib / "linux_amd64" / "libratekeeper.a")])
    shutil.copy(REPO / "include" / "ratekeeper.h", lib / "include" / "ratekeeper.h")
    work = pathlib.Path(tempfile.mkdtemp(prefix="rk-bench-go-"))
    gopath = work / "gopath"
    (gopath / "src" / "github.com" / "ratekeeper" / "ratekeeper").mkdir(parents=True)
    (gopath / "src" / "github.com" / "ratekeeper" / "ratekeeper" / "go").symlink_to(REPO / "go")
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": f"{gopath}:/usr/share/gocode", "GOFLAGS": ""}
    binary = work / "bench-go"
    subprocess.check_call(["go", "build", "-o", str(binary), "main.go"], cwd=HERE, env=env)

    fixture = target / "debug" / "rk-test-redis"
    subprocess.check_call(["cargo", "build", "--quiet", "--locked", "-p", "ratekeeper-test-support", "--bin", "rk-test-redis"],
                          cwd=REPO)
    server = json.loads(subprocess.check_output([str(fixture), "start", "--json"]))["servers"][0]
    try:
        args = ["-redis", server["url"]] + (["-seconds", "0.5", "-rounds", "3"] if quick else [])
        out = subprocess.check_output([str(binary), *args], text=True)
    finally:
        subprocess.call([str(fixture), "stop", str(server["pid"])])
        shutil.rmtree(work)  # the scratch GOPATH and the 20 MB binary
    print(out, end="")
    v = {k: float(x) for k, x in (line.split("\t") for line in out.splitlines())}

    def ns(name: str) -> str:
        return f"{1e9 / v[name]:.0f} ns"

    cost = (f"Where a memory Check's time goes, per call in the same run: x/time/rate's Allow {ns('xrate_allow')}; "
            f"an empty cgo call {ns('memory_cgo_empty')}; a cgo call with a Check's arguments and result, the module's "
            f"way (key as a Go string copied onto the C stack, result returned by value) "
            f"{ns('memory_cgo_same_args')}, the usual way (C.CString and free, result through a pointer) "
            f"{ns('memory_cgo_cstring_args')}; the library's check called from a C loop (no cgo) "
            f"{ns('memory_c_check')}, one per cgo call (no module) {ns('memory_cgo_check')}, one per cgo call through "
            f"the module's C side (go/rkgo.h) {ns('memory_rkgo_check')}; the "
            f"module's Check on the unlimited limiter {ns('memory_check_unlimited')}, on the token bucket "
            f"{ns('memory_check')}")
    report.write(
        "bench-go", "Go", "The Go module beside golang.org/x/time/rate and a redigo GCRA script", "python3 bench/go/run.py",
        f"memory: one key, one goroutine, the contenders timed in short batches taken in turn (about 0.5 ms each, "
        f"{int(v['batches_memory_check'])} per contender), medians of the batches; Redis: medians of "
        f"{int(v['rounds'])} alternating rounds of {v['seconds']:g} s; "
        "a token bucket against go-redis/redis_rate's GCRA script run by redigo's EVALSHA (a pool of 64) on the "
        f"same redis-server. {cost}. With 64 goroutines, one Redis "
        "check at a time is made on its caller's thread and the others are started (rk_limiter_check_start) and wait "
        f"in Go's scheduler: ratekeeper's rounds created {int(v['threads_redis_64_ratekeeper'])} OS threads, redigo's "
        f"{int(v['threads_redis_64_redigo'])}. While they ran, a goroutine sleeping 1 ms woke at most "
        f"{v['sleep_1ms_late_worst_us']:.0f} µs late (p99 {v['sleep_1ms_late_p99_us']:.0f} µs)",
        [
            report.row("memory token bucket, Check", v["memory_check"], "x/time/rate Allow", v["xrate_allow"], target=0.5,
                       headline=True),
            report.row("memory token bucket, Check", v["memory_check"], "an empty cgo call", v["memory_cgo_empty"]),
            report.row("cgo call with a Check's arguments: key as a Go string", v["memory_cgo_same_args"],
                       "key as C.CString", v["memory_cgo_cstring_args"]),
            report.row("memory token bucket, Check", v["memory_check"], "rk_limiter_check from a C loop (the library alone)",
                       v["memory_c_check"]),
            report.row("memory token bucket, Check", v["memory_check"],
                       "rk_limiter_check, one per cgo call (cgo and the library, no module)", v["memory_cgo_check"]),
            report.row("memory token bucket, Check", v["memory_check"],
                       "the module's C side alone (rkgo_check, one per cgo call)", v["memory_rkgo_check"]),
            report.row("Redis token bucket, sequential", v["redis_seq_ratekeeper"], "redigo GCRA script",
                       v["redis_seq_redigo"], target=0.9, headline=True),
            report.row("Redis token bucket, 64 goroutines", v["redis_64_ratekeeper"], "redigo GCRA script, pool of 64",
                       v["redis_64_redigo"], target=1.0, headline=True),
        ],
        language="Go",
    )


if __name__ == "__main__":
    main()
