"""The JSON a Python benchmark run leaves in `bench/results/` (the same shape as the Rust benches'
`bench/src/report.rs`), from which `bench/render.py` renders the tables."""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

RESULTS = pathlib.Path(os.environ.get("BENCH_RESULTS") or pathlib.Path(__file__).resolve().parents[1] / "results")


def row(scenario: str, ratekeeper: float, peer: str | None = None, peer_value: float | None = None, *,
        unit: str = "checks/s", target: float | None = None, headline: bool = False,
        higher_is_better: bool = True) -> dict[str, Any]:
    """One scenario: ratekeeper's same-run median and, when there is one, the peer's."""
    ratio = None
    if peer_value:
        ratio = round(ratekeeper / peer_value if higher_is_better else peer_value / ratekeeper, 3)
    return {
        "scenario": scenario, "unit": unit, "ratekeeper": ratekeeper, "peer": peer, "peer_value": peer_value,
        "ratio": ratio, "target": None if target is None else f"≥ {target:.2f}", "target_ratio": target,
        "met": None if ratio is None or target is None else ratio >= target, "headline": headline,
    }


def machine() -> dict[str, Any]:
    """Date, commit, load average and CPU count of this run."""
    try:
        commit = subprocess.run(["git", "-C", str(RESULTS.parent), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    with open("/proc/loadavg") as f:
        load = [float(v) for v in f.read().split()[:3]]
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": commit, "load": load, "cpus": os.cpu_count()}


def write(bench: str, area: str, title: str, command: str, method: str, rows: list[dict[str, Any]],
          language: str = "Python", **extra: Any) -> None:
    """Writes `bench/results/<bench>.json` (and says where on stderr)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {"bench": bench, "area": area, "language": language, "title": title, "command": command,
           "method": method, "quick": "--quick" in sys.argv or bool(os.environ.get("BENCH_QUICK")),
           "machine": machine(), "rows": rows, **extra}
    path = RESULTS / f"{bench}.json"
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    print(f"results written to {path}", file=sys.stderr)
