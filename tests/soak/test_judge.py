"""The judge's bounds can fail: each is given admissions just at its limit (no excess) and one
more (the excess is named). Run by scripts/test-python before the soak itself."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from judge import Call, lease_excess, rate_excess, stall_during  # noqa: E402

S = 1_000_000


def test_token_bucket_bound_is_capacity_plus_refill() -> None:
    spec = {"kind": "token_bucket", "rate": 5, "capacity": 5}  # one token per 200 ms
    burst = [(10 * S, 1)] * 5
    assert rate_excess(spec, burst + [(10 * S + 200_000, 1)]) == []
    assert rate_excess(spec, burst + [(10 * S + 199_999, 1)])
    # Costs count: 2 + 2 + 2 > 5 at one instant.
    assert rate_excess(spec, [(S, 2), (S, 2), (S, 2)])
    assert rate_excess({"kind": "points", "capacity": 10, "refill": 2}, [(S, 3)] * 3 + [(S + 199_999, 1)]) == []
    assert rate_excess({"kind": "points", "capacity": 10, "refill": 2}, [(S, 3)] * 3 + [(S + 199_999, 2)])
    assert rate_excess({"kind": "leaky", "size": 3, "drain": 0.6}, [(S, 1)] * 3 + [(S + 199_999, 1)])


def test_window_bounds() -> None:
    window = {"kind": "window", "limit": 3, "interval": 0.5}
    assert rate_excess(window, [(S, 1), (S + 1, 1), (S + 2, 1), (S + 500_000, 1)]) == []
    assert rate_excess(window, [(S, 1), (S + 1, 1), (S + 2, 1), (S + 499_999, 1)])
    windows = {"kind": "windows", "windows": [[2, 0.2], [5, 1]]}
    spread = [(S + i * 100_000, 1) for i in range(5)]  # 2 per 200 ms, 5 per second
    assert rate_excess(windows, spread) == []
    assert len(rate_excess(windows, spread + [(S + 450_000, 1)])) == 2


def test_fixed_and_sub_bucket_windows() -> None:
    bucket = {"kind": "bucket", "limit": 3, "interval": 0.5}
    assert rate_excess(bucket, [(S + 499_999, 1)] * 3 + [(S + 500_000, 1)] * 3) == []
    assert rate_excess(bucket, [(S, 1)] * 3 + [(S + 499_999, 1)])
    sliding = {"kind": "sliding_window", "limits": [[1, 5, 0.1]]}
    # Blocks of 100 ms, 10 counted at a time: block 10 and block 19 are in one window.
    assert rate_excess(sliding, [(S, 3), (S + 900_000, 3)]) != []
    assert rate_excess(sliding, [(S, 3), (S + 1_000_000, 3)]) == []
    day = {"kind": "calendar", "limit": 2, "period": "day", "tz": "UTC"}
    midnight = 20_000 * 86_400 * S
    assert rate_excess(day, [(midnight - 1, 1), (midnight - 2, 1), (midnight, 1), (midnight + 5, 1)]) == []
    assert rate_excess(day, [(midnight, 1)] * 3)


def lease(worker: str, op: str, t0: int, granted: int, fencing: int) -> Call:
    return Call(worker, "python", "lease", "k0", op, "ok", t0, 100, granted, 1, fencing)


def test_leases_are_held_until_released_or_expired() -> None:
    calls = [lease("a", "c", 0, S, 1), lease("b", "c", 0, S + 10, 2), lease("a", "r", S + 100, 0, 1),
             lease("c", "c", 0, S + 100, 3)]
    assert lease_excess(calls, 2, 1_500_000)[0] == []
    assert lease_excess(calls[:2] + [lease("c", "c", 0, S + 99, 3)], 2, 1_500_000)[0]
    # Never released (a dead caller): free once lock_timeout is over, not before.
    dead = [lease("a", "c", 0, S, 1), lease("a", "c", 0, S, 2)]
    assert lease_excess(dead + [lease("b", "c", 0, S + 1_500_000, 3)], 2, 1_500_000)[0] == []
    assert lease_excess(dead + [lease("b", "c", 0, S + 1_499_999, 3)], 2, 1_500_000)[0]


def test_canary_stalls_overlapping_a_call() -> None:
    stalls = [(10 * S, 80_000), (20 * S, 30_000)]
    assert stall_during(stalls, 10 * S + 50_000, 10 * S + 300_000) == 80_000
    assert stall_during(stalls, 10 * S + 90_000, 10 * S + 300_000) == 0
    assert stall_during(stalls, 19 * S, 21 * S) == 30_000
    assert stall_during(stalls, 9 * S, 21 * S) == 110_000


def write_run(tmp: Path, logs: dict[str, list[str]], faults: list[dict[str, object]]) -> Path:
    """A run directory as soak.py leaves it: one log per process, run.json, an empty canary."""
    import json

    workers = []
    for worker, lines in logs.items():
        (tmp / f"{worker}.log").write_text("".join(line + "\n" for line in lines))
        workers.append({"id": worker, "language": "python", "log": str(tmp / f"{worker}.log")})
    (tmp / "canary.log").write_text("")
    run = {"seconds": 10, "processes": len(logs), "deadline": 0.2, "lease_limiter": "lease", "workers": workers,
           "canary": str(tmp / "canary.log"), "faults": faults,
           "limiters": [{"name": "lease", "spec": {"kind": "concurrent", "limit": 2, "lock_timeout": 1.5}}]}
    (tmp / "run.json").write_text(json.dumps(run))
    return tmp


def test_a_dead_callers_leases_must_come_back_within_a_second_of_expiring(tmp_path: Path) -> None:
    from judge import judge

    t = 100 * S
    kill = {"kind": "kill_worker", "start": (t + 100_000) / S, "end": (t + 110_000) / S, "victim": "victim0",
            "key": "k0"}
    victim = [f"lease k0 c ok {t} 100 {t} 1 {t}", f"lease k0 c ok {t + 10} 100 {t + 10} 1 {t + 10}"]
    refused = f"lease k0 c over {t + 200_000} 100 {t + 200_000} 1 0"

    def grants(*at: int) -> list[str]:
        return [f"lease k0 c ok {g} 100 {g} 1 {g}" for g in at]

    # Both slots are taken again just after the dead leases expire (1.5 s): passes.
    for name in ("ok", "late", "early"):
        (tmp_path / name).mkdir()
    ok = judge(write_run(tmp_path / "ok", {"victim0": victim, "w0": [refused] + grants(t + 1_500_100),
                                           "w1": grants(t + 1_500_200)}, [kill]))
    assert ok.failures == [] and ok.figures["dead_lease_reclaims"][0]["reclaim_ms"] == 0.2
    # An earlier lease the victim gave back late (LeaseLost: held past lock_timeout while alive)
    # is not one of the dead caller's.
    (tmp_path / "earlier").mkdir()
    lost = [f"lease k0 c ok {t - 5 * S} 100 {t - 5 * S} 1 7", f"lease k0 r LeaseLost {t - 3 * S} 100 0 0 7"]
    earlier = judge(write_run(tmp_path / "earlier", {"victim0": lost + victim, "w0": [refused] + grants(t + 1_500_100),
                                                     "w1": grants(t + 1_500_200)}, [kill]))
    assert earlier.failures == [] and earlier.figures["dead_lease_reclaims"][0]["dead_leases"] == 2
    # The second slot only comes back 1.2 s after its lease expired: fails.
    late = judge(write_run(tmp_path / "late", {"victim0": victim, "w0": [refused] + grants(t + 1_500_100),
                                               "w1": grants(t + 2_700_100)}, [kill]))
    assert any("held past lock_timeout" in f for f in late.failures), late.failures
    # Taken before they expired: an over-admission.
    early = judge(write_run(tmp_path / "early", {"victim0": victim, "w0": [refused] + grants(t + 1_000_000)}, [kill]))
    assert any("over-admission: lease" in f for f in early.failures), early.failures


def test_errors_must_belong_to_a_fault_and_end_within_a_second_of_it(tmp_path: Path) -> None:
    from judge import judge

    t = 100 * S
    pause = {"kind": "pause_master", "start": t / S, "end": (t + S) / S}
    calls = [f"lease k0 c ok {t - S} 100 {t - S} 1 {t - S}", f"lease k0 r ok {t - S + 10} 100 0 0 {t - S}",
             f"lease k0 c over {t - S + 20} 100 {t - S + 20} 1 0"]
    timeout = "lease k1 c Timeout {} 200000 0 1 0"
    (tmp_path / "a").mkdir()
    recovered = judge(write_run(tmp_path / "a", {"w0": calls + [timeout.format(t + 500_000), timeout.format(t + 1_700_000)]},
                                [pause]))
    assert recovered.failures == [] and recovered.figures["recoveries"][0]["recovery_ms"] == 900.0
    (tmp_path / "b").mkdir()
    slow = judge(write_run(tmp_path / "b", {"w0": calls + [timeout.format(t + 1_900_000)]}, [pause]))
    assert any("no recovery within 1 s" in f for f in slow.failures), slow.failures
    (tmp_path / "c").mkdir()
    stray = judge(write_run(tmp_path / "c", {"w0": calls + [timeout.format(t - 2 * S)]}, [pause]))
    assert any("error with no fault" in f for f in stray.failures), stray.failures
