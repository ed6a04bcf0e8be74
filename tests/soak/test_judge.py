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
