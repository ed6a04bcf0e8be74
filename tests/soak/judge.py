"""The soak's judge: reads every process's log (tests/soak/config.py) and the driver's fault
timeline, and proves, from the admitted calls and the server's clock alone:

- no over-admission on any limiter and key, by each kind's own bound on the server times of
  the admitted calls (exact: no tolerance);
- no call past its deadline + 50 ms;
- recovery within 1 s of each fault (the last error its fault caused ends within 1 s of the
  fault's end, and no error happens away from a fault);
- no lease held past lock_timeout by a dead caller: once the killed process's leases have
  expired, the next caller is granted within 1 s.

A call whose answer was lost (an error) may or may not have been counted by Redis, so only the
admissions a caller saw are held to the bound: the judge can miss an over-admission hidden in a
lost answer, never report one that did not happen. A concurrent lease is counted held from its
`granted_at_us` until its release was sent (the earliest moment Redis can have freed it) or its
lock_timeout ended, so overlapping leases are a real excess too.

`python judge.py DIR` judges a kept run (`soak.py --keep DIR`)."""

from __future__ import annotations

import bisect
import heapq
import json
import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEADLINE_SLACK_US = 50_000
RECOVERY_US = 1_000_000
DAY_US = 86_400 * 1_000_000


@dataclass
class Call:
    worker: str
    language: str
    name: str
    key: str
    op: str
    status: str
    t0: int
    dur: int
    decided: int
    cost: int
    fencing: int

    @property
    def end(self) -> int:
        return self.t0 + self.dur

    @property
    def answered(self) -> bool:
        return self.status in ("ok", "over")


def read_log(path: Path, worker: str, language: str) -> list[Call]:
    calls = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 9:  # a line cut by a kill
            continue
        name, key, op, status, t0, dur, decided, cost, fencing = parts
        calls.append(Call(worker, language, name, key, op, status, int(t0), int(dur), int(decided), int(cost),
                          int(fencing)))
    return calls


def us(seconds: float) -> int:
    return round(seconds * 1_000_000)


def _rk_test_redis() -> str:
    """The shared judge's binary: ``RK_TEST_REDIS`` (the test scripts set it), else the debug
    build in the workspace's target directory, built on first use."""
    given = os.environ.get("RK_TEST_REDIS")
    if given:
        return given
    repo = Path(__file__).resolve().parents[2]
    built = repo / "target" / "debug" / "rk-test-redis"
    if not built.exists():
        subprocess.run(["cargo", "build", "--quiet", "-p", "ratekeeper-test-support", "--bin", "rk-test-redis"],
                       cwd=repo, check=True)
    return str(built)


def rules(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Each kind's bounds, as rules of the over-admission judge every suite shares
    (``test-support/src/judge.rs``): ``span`` (exact sliding window: any span of the interval),
    ``blocks`` (fixed windows, sliding sub-bucket windows and calendar days: consecutive aligned
    blocks) and ``rate`` (token bucket, leaky, points: capacity + elapsed / emission)."""
    kind = spec["kind"]

    def rate(capacity: int, emission: float) -> dict[str, Any]:
        return {"rule": "rate", "capacity": capacity, "emission_us": us(emission)}

    def span(limit: int, interval: float) -> dict[str, Any]:
        return {"rule": "span", "limit": limit, "interval_us": us(interval)}

    def blocks(limit: int, block_us: int, count: int) -> dict[str, Any]:
        return {"rule": "blocks", "limit": limit, "block_us": block_us, "blocks": count}

    if kind == "token_bucket":
        return [rate(spec["capacity"], 1 / spec["rate"])]
    if kind == "leaky":
        return [rate(spec["size"], spec["drain"] / spec["size"])]
    if kind == "points":
        return [rate(spec["capacity"], spec["refill"] / spec["capacity"])]
    if kind == "bucket":
        return [blocks(spec["limit"], us(spec["interval"]), 1)]
    if kind == "window":
        return [span(spec["limit"], spec["interval"])]
    if kind == "windows":
        return [span(limit, interval) for limit, interval in spec["windows"]]
    if kind == "sliding_window":
        found = []
        for duration, limit, *precision in spec["limits"]:
            p = precision[0] if precision else duration
            found.append(blocks(limit, us(p), round(duration / p)))
        return found
    if kind == "calendar":
        assert spec["period"] == "day" and spec.get("tz", "UTC") == "UTC", "the judge knows UTC days"
        return [blocks(spec["limit"], DAY_US, 1)]
    raise ValueError(f"the judge has no bound for {kind}")


def rate_excess(spec: dict[str, Any], admitted: list[tuple[int, int]]) -> list[str]:
    """The excesses the shared judge finds in one limiter and key's admitted calls
    [(server time µs, cost)] (none: no over-admission; exact, no tolerance)."""
    cases = [{"rule": rule, "admitted": admitted} for rule in rules(spec)]
    out = subprocess.run([_rk_test_redis(), "judge"], input=json.dumps(cases), capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"rk-test-redis judge failed: {out.stderr.strip()}")
    return [found for found in json.loads(out.stdout) if found]


def lease_excess(calls: list[Call], limit: int,
                 lock_timeout_us: int) -> tuple[list[str], list[tuple[int, int, str, bool]]]:
    """Concurrent: at each grant, the leases granted and not yet given back (release sent, or
    lock_timeout over) are at most `limit`. Returns the excesses and the leases as
    (granted, held until, worker, whether a release was sent)."""
    released: dict[tuple[str, int], int] = {}
    for c in calls:
        if c.op == "r":
            released[(c.worker, c.fencing)] = c.t0
    leases = []
    for c in calls:
        if c.op == "c" and c.status == "ok":
            until = min(released.get((c.worker, c.fencing), c.decided + lock_timeout_us), c.decided + lock_timeout_us)
            leases.append((c.decided, until, c.worker, (c.worker, c.fencing) in released))
    leases.sort()
    excess = []
    ends: list[int] = []
    for granted, until, _, _ in leases:
        while ends and ends[0] <= granted:
            heapq.heappop(ends)
        heapq.heappush(ends, until)
        if len(ends) > limit:
            excess.append(f"{len(ends)} leases held at {granted} (limit {limit})")
    return excess, leases


def read_canary(path: Path) -> list[tuple[int, int]]:
    """The canary's late sleeps: (start µs, how late µs), by start."""
    if not path.exists():
        return []
    return sorted((int(a), int(b)) for a, b in (line.split() for line in path.read_text().splitlines()
                                                 if len(line.split()) == 2))


def stall_during(stalls: list[tuple[int, int]], start: int, end: int) -> int:
    """How long the canary was kept waiting, in total, by its late sleeps overlapping
    [start, end] (a sleep of 5 ms that began at t and ended `late` late covers
    [t, t + 5 ms + late]): the time the machine left a ready process unrun."""
    first = bisect.bisect_left(stalls, (start - 5_000 - 10_000_000, 0))
    total = 0
    for t, late in stalls[first:]:
        if t > end:
            break
        if t + 5_000 + late >= start:
            total += late
    return total


@dataclass
class Verdict:
    failures: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


def judge(run_dir: Path) -> Verdict:
    run = json.loads((run_dir / "run.json").read_text())
    verdict = Verdict()
    calls: list[Call] = []
    for w in run["workers"]:
        calls += read_log(Path(w["log"]), w["id"], w["language"])
    specs = {l["name"]: l["spec"] for l in run["limiters"]}
    deadline_us = us(run["deadline"])
    faults = run["faults"]

    # 1. No over-admission.
    per_stream: dict[tuple[str, str], list[Call]] = defaultdict(list)
    for c in calls:
        per_stream[(c.name, c.key)].append(c)
    per_limiter: dict[str, dict[str, int]] = {name: defaultdict(int) for name in specs}
    all_leases: dict[str, list[tuple[int, int, str, bool]]] = {}
    for (name, key), stream in sorted(per_stream.items()):
        spec = specs[name]
        counts = per_limiter[name]
        for c in stream:
            if c.op == "c":
                counts["admitted" if c.status == "ok" else "refused" if c.status == "over" else "errors"] += 1
        if spec["kind"] == "concurrent":
            excess, leases = lease_excess(stream, spec["limit"], us(spec["lock_timeout"]))
            all_leases[key] = leases
        else:
            admitted = sorted((c.decided, c.cost) for c in stream if c.op == "c" and c.status == "ok")
            excess = rate_excess(spec, admitted)
        verdict.failures += [f"over-admission: {name} key {key}: {e}" for e in excess]
    for name, counts in per_limiter.items():
        if not counts["admitted"] or not counts["refused"]:
            verdict.failures.append(f"{name} never reached its limit (admitted {counts['admitted']}, refused "
                                    f"{counts['refused']}): the soak did not test it")

    stalls = read_canary(Path(run["canary"]))

    # 2. Deadlines.
    worst: dict[str, Call] = {}
    for c in calls:
        if c.language not in worst or c.dur > worst[c.language].dur:
            worst[c.language] = c
    late = [c for c in calls if c.dur > deadline_us + DEADLINE_SLACK_US]
    stalled, library_late = [], []
    for c in late:
        excess = c.dur - deadline_us - DEADLINE_SLACK_US
        (stalled if stall_during(stalls, c.t0, c.end) >= excess else library_late).append(c)
    for c in library_late[:10]:
        verdict.failures.append(f"past deadline + 50 ms: {c.worker} {c.name} {c.key} {c.op} {c.status} took "
                                f"{c.dur / 1000:.1f} ms at {c.t0} (the canary saw a stall of "
                                f"{stall_during(stalls, c.t0, c.end) / 1000:.0f} ms then)")
    if len(library_late) > 10:
        verdict.failures.append(f"... {len(library_late) - 10} more calls past deadline + 50 ms")

    # 3. Recovery: every error belongs to a fault (from 300 ms before it starts to the next
    # fault), and the last one ends within 1 s of its fault's end.
    errors = sorted((c for c in calls if not c.answered and c.status != "LeaseLost"), key=lambda c: c.end)
    starts = [us(f["start"]) for f in faults]
    recoveries = []
    by_fault: dict[int, list[Call]] = defaultdict(list)
    unexplained = []
    stalled_errors = 0
    for c in errors:
        i = bisect.bisect_right(starts, c.end + 300_000) - 1
        # Away from any fault (before the first, or past its recovery time), only a machine
        # that ran nothing for half the deadline (the canary saw it) explains a timeout.
        in_stall = stall_during(stalls, c.t0, c.end) >= deadline_us // 2
        if i >= 0 and (c.t0 <= us(faults[i]["end"]) + RECOVERY_US or not in_stall):
            by_fault[i].append(c)
        elif in_stall:
            stalled_errors += 1
        else:
            unexplained.append(c)
    for i, f in enumerate(faults):
        end = us(f["end"])
        mine = by_fault.get(i, [])
        last = max((c.end for c in mine), default=end)
        recovery = max(0, last - end)
        kinds = sorted({c.status for c in mine})
        recoveries.append({"fault": f["kind"], "errors": len(mine), "statuses": kinds,
                           "recovery_ms": round(recovery / 1000, 1), "lasted_ms": round((end - us(f["start"])) / 1000, 1)})
        if recovery > RECOVERY_US:
            verdict.failures.append(f"no recovery within 1 s of {f['kind']} #{i} ({f.get('detail', '')}): errors "
                                    f"until {recovery / 1000:.0f} ms after it ended")
    for c in unexplained[:10]:
        verdict.failures.append(f"error with no fault: {c.worker} {c.name} {c.key} {c.status} at {c.t0}")

    # 4. Dead callers' leases: after they expire, the next caller is granted within 1 s.
    reclaims = []
    lease_spec = specs[run["lease_limiter"]]
    lock_timeout_us = us(lease_spec["lock_timeout"])
    for f in faults:
        if f["kind"] != "kill_worker":
            continue
        victim, key, kill = f["victim"], f["key"], us(f["start"])
        leases = all_leases.get(key, [])
        dead = [(g, u) for g, u, w, released in leases if w == victim and not released and g <= kill]
        if len(dead) < lease_spec["limit"]:
            reclaims.append({"victim": victim, "dead_leases": len(dead), "reclaim_ms": None})
            verdict.failures.append(f"kill_worker: {victim} held {len(dead)} leases when killed, not all "
                                    f"{lease_spec['limit']}: the dead-caller check was not exercised")
            continue
        # The victim held every slot, so the k-th dead lease to expire is surely free again at
        # the first grant after which other callers hold k leases at once: that moment must
        # come within 1 s of its expiry (never before it: the over-admission check).
        expiries = sorted(g + lock_timeout_us for g, _ in dead)
        others = [(g, u) for g, u, w, _ in leases if w != victim and u > kill]
        delays = []
        for k, expiry in enumerate(expiries, start=1):
            reached = next((g for g, _ in others if g > kill and sum(1 for s, u in others if s <= g < u) >= k), None)
            delays.append(None if reached is None else reached - expiry)
        delay = None if None in delays else max(d for d in delays if d is not None)
        reclaims.append({"victim": victim, "dead_leases": len(dead),
                         "reclaim_ms": None if delay is None else round(delay / 1000, 1)})
        if delay is None or delay > RECOVERY_US:
            verdict.failures.append(f"a dead caller's leases ({victim}) held past lock_timeout: "
                                    f"{'never all granted again' if delay is None else f'granted again {delay / 1000:.0f} ms after they expired'}")

    answered = sum(1 for c in calls if c.answered)
    verdict.figures = {
        "seconds": run["seconds"],
        "processes": run["processes"],
        "workers": dict(sorted(_count(w["language"] for w in run["workers"] if not w["id"].startswith("victim"))
                               .items())),
        "victims": sum(1 for w in run["workers"] if w["id"].startswith("victim")),
        "attempts": len(calls),
        "answered": answered,
        "errors": len(errors),
        "errors_during_a_machine_stall_away_from_faults": stalled_errors,
        "lease_lost": sum(1 for c in calls if c.status == "LeaseLost"),
        "faults": dict(sorted(_count(f["kind"] for f in faults).items())),
        "worst_latency_ms": {lang: round(c.dur / 1000, 1) for lang, c in sorted(worst.items())},
        "past_deadline_plus_50ms": len(late),
        "of_which_during_a_machine_stall": len(stalled),
        "worst_canary_stall_ms": round(max((late for _, late in stalls), default=0) / 1000, 1),
        "canary_late_ms_per_s": round(sum(late for _, late in stalls) / 1000 / run["seconds"], 1),
        "worst_recovery_ms": {k: max((r["recovery_ms"] for r in recoveries if r["fault"] == k), default=0.0)
                              for k in sorted({f["kind"] for f in faults})},
        "recoveries": recoveries,
        "dead_lease_reclaims": reclaims,
        "limiters": {name: dict(c) for name, c in per_limiter.items()},
    }
    return verdict


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for i in items:
        out[i] += 1
    return out


def main() -> None:
    verdict = judge(Path(sys.argv[1]))
    print(json.dumps(verdict.figures, indent=1))
    for f in verdict.failures:
        print("FAIL:", f)
    sys.exit(1 if verdict.failures else 0)


if __name__ == "__main__":
    main()
