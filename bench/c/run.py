#!/usr/bin/env python3
"""Builds libratekeeper in release, builds bench/c/bench.c against it, runs it and writes
bench/results/bench-c.json (through bench/python/report.py, the Python benches' writer).

    python3 bench/c/run.py [--quick]
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "python"))
import report  # noqa: E402


def main() -> None:
    subprocess.check_call(["nice", "cargo", "build", "--quiet", "--release", "--locked", "-p", "ratekeeper-ffi", "--lib"],
                          cwd=REPO)
    meta = json.loads(subprocess.check_output(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=REPO))
    lib = pathlib.Path(meta["target_directory"]) / "release"
    binary = pathlib.Path(tempfile.mkdtemp(prefix="rk-bench-c-")) / "bench-c"
    subprocess.check_call(["gcc", "-O2", "-I", str(REPO / "include"), str(HERE / "bench.c"), "-L", str(lib),
                           f"-Wl,-rpath,{lib}", "-lratekeeper", "-lpthread", "-lm", "-ldl", "-o", str(binary)])
    out = subprocess.check_output([str(binary), *sys.argv[1:]], text=True)
    values = dict(line.split("\t") for line in out.splitlines())
    print(out, end="")
    ours, floor = float(values["token_bucket"]), float(values["unlimited"])
    report.write("bench-c", "C", "The C API's memory check against its floor", "python3 bench/c/run.py",
                 f"median of {values['rounds']} alternating rounds of {values['seconds']} s, one key, one thread; "
                 "the floor is an unlimited limiter's rk_limiter_check (the call and the decision, no limiter work)",
                 [report.row("memory token bucket, rk_limiter_check", ours, "unlimited limiter (the C API's floor)", floor,
                             headline=True)], language="C")


if __name__ == "__main__":
    main()
