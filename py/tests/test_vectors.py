"""The shared conformance vectors (tests/vectors/*.json) through the Python binding, on memory,
Redis and Redis Cluster, with the sync methods and with their asyncio forms.

A port of core/tests/support/vectors.rs: each case gets a fresh backend driven by a
ManualClock starting at the case's ``start_us``; every failing step is reported before the test
fails, and the totals are asserted so that deleting vectors fails too.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from typing import Any

import pytest

import ratekeeper
from ratekeeper import Limiter

from .conftest import VECTORS, MakeBackend

KINDS = ["concurrent", "bucket", "window", "sliding_window", "token_bucket", "leaky", "points", "calendar", "unlimited"]
MIN_PER_KIND = 15
MIN_TOTAL = 120

ERROR_KINDS: dict[type[Exception], str] = {
    ratekeeper.OverLimit: "over_limit",
    ratekeeper.Shed: "shed",
    ratekeeper.LeaseLost: "lease_lost",
    ratekeeper.InvalidArgument: "invalid_argument",
    ratekeeper.BackendUnavailable: "backend_unavailable",
    ratekeeper.Timeout: "timeout",
}


class Malformed(Exception):
    pass


def number(value: Any) -> Any:
    """A JSON number (kept exact: ints stay ints), or "NaN"/"Infinity"/"-Infinity"."""
    if isinstance(value, str):
        if value in ("NaN", "Infinity", "-Infinity"):
            return float(value.replace("Infinity", "inf"))
        raise Malformed(f"expected a number, got the string {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Malformed(f"expected a number, got {value!r}")
    return value


def interval(value: Any) -> Any:
    if isinstance(value, str) and value not in ("NaN", "Infinity", "-Infinity"):
        return value
    return number(value)


def build_limiter(backend: ratekeeper.Backend, spec: dict[str, Any]) -> Limiter:
    limiter = build_kind(backend, spec)
    # Shadow mode is an option of every kind: a named constructor's limiter takes it by
    # `with_shadow`, a spec as data as a field.
    return limiter.with_shadow(True) if spec.get("shadow") is True else limiter


def build_kind(backend: ratekeeper.Backend, spec: dict[str, Any]) -> Limiter:
    kind = spec["kind"]
    name = spec.get("name")
    if "block_for" in spec or "colocate" in spec:
        # A limiter option (`block_for`, `colocate`) is carried by the spec as data: build it
        # from the data.
        return backend.limiter(name, {k: v for k, v in spec.items() if k != "name"})
    if kind == "concurrent":
        return backend.concurrent(name, number(spec["limit"]), number(spec["lock_timeout"]))
    if kind == "bucket":
        return backend.bucket(name, number(spec["limit"]), interval(spec["interval"]))
    if kind == "window":
        if "windows" in spec:
            return backend.windows(name, [(number(w["limit"]), interval(w["interval"])) for w in spec["windows"]])
        return backend.window(name, number(spec["limit"]), interval(spec["interval"]))
    if kind == "sliding_window":
        limits = [tuple(number(x) for x in limit) for limit in spec["limits"]]
        return backend.sliding_window(name, limits)  # type: ignore[arg-type]
    if kind == "token_bucket":
        return backend.token_bucket(name, number(spec["rate"]), number(spec["capacity"]))
    if kind == "leaky":
        return backend.leaky(name, number(spec["size"]), number(spec["drain"]))
    if kind == "points":
        return backend.points(name, number(spec["capacity"]), number(spec["refill"]))
    if kind == "calendar":
        return backend.calendar(name, number(spec["limit"]), spec["period"], spec["tz"], spec.get("anchor"))
    if kind == "unlimited":
        return backend.unlimited(name) if name is not None else ratekeeper.unlimited()
    # Any other kind is built from its spec as data, as the bindings build every kind: a new kind
    # needs no runner code (a misspelt kind is refused by the spec's parser, naming `kind`).
    return backend.limiter(name, {k: v for k, v in spec.items() if k != "name"})


def decision_json(d: ratekeeper.Decision) -> dict[str, Any]:
    v: dict[str, Any] = {
        "allowed": d.allowed,
        "limit": d.limit,
        "remaining": d.remaining,
        "retry_after_us": d.retry_after_us,
        "reset_after_us": d.reset_after_us,
    }
    if d.limits is not None:
        v["limits"] = [
            {"window_us": s.window_us, "limit": s.limit, "remaining": s.remaining,
             "retry_after_us": s.retry_after_us, "reset_after_us": s.reset_after_us}
            for s in d.limits
        ]
    if d.lease is not None:
        v["fencing_token"] = d.lease.fencing_token
    if d.shadow_refused:
        v["shadow_refused"] = True
    # The float forms agree with the exact ones.
    assert math.isclose(d.retry_after, d.retry_after_us / 1e6) and math.isclose(d.reset_after, d.reset_after_us / 1e6)
    return v


def error_json(e: Exception) -> dict[str, Any]:
    kind = next((k for cls, k in ERROR_KINDS.items() if isinstance(e, cls)), type(e).__name__)
    v: dict[str, Any] = {"kind": kind}
    if isinstance(e, ratekeeper.InvalidArgument):
        v["parameter"] = e.parameter
    return v


def error_matches(expected: dict[str, Any], e: Exception) -> bool:
    if expected["kind"] == "invalid_argument" and "parameter" not in expected:
        raise Malformed("an invalid_argument expectation must name its `parameter`")
    actual = error_json(e)
    return actual["kind"] == expected["kind"] and (
        "parameter" not in expected or actual.get("parameter") == expected["parameter"])


def key_of(step: dict[str, Any]) -> str | None:
    key = step.get("key")
    if isinstance(key, dict):
        return str(key["repeat"]) * int(key["times"])
    return key


class Calls:
    """The calls a step makes: sync methods, or their asyncio forms awaited."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    async def __call__(self, limiter: Limiter, method: str, *args: Any) -> Any:
        if self.mode == "sync":
            return getattr(limiter, method)(*args)
        return await getattr(limiter, "a" + method)(*args)


async def run_case(case: dict[str, Any], make_backend: MakeBackend, calls: Calls,
                   report: Callable[[str], None]) -> list[str]:
    kinds = sorted({spec["kind"] for spec in case["limiters"].values()})
    clock = ratekeeper.ManualClock(case["start_us"])
    backend = make_backend(clock=clock)
    built: dict[str, Limiter] = {}
    build_error: tuple[str, Exception] | None = None
    for lid, spec in sorted(case["limiters"].items()):
        try:
            built[lid] = build_limiter(backend, spec)
        except ratekeeper.RatekeeperError as e:
            build_error = build_error or (lid, e)
    if "limiter_error" in case:
        if case["steps"]:
            raise Malformed("a case with `limiter_error` must have no steps")
        expected = case["limiter_error"]
        if build_error is None:
            report(f"expected limiter error {expected}, but every limiter was built")
        elif not error_matches(expected, build_error[1]):
            report(f"building {build_error[0]}: expected error {expected}, got {error_json(build_error[1])} "
                   f"({build_error[1]})")
        return kinds
    if build_error is not None:
        report(f"building {build_error[0]}: expected success, got {error_json(build_error[1])} ({build_error[1]})")
        return kinds

    leases: dict[str, ratekeeper.Lease] = {}
    decisions: dict[str, ratekeeper.Decision] = {}  # saved by `save_decision`, for `settle`
    for index, step in enumerate(case["steps"]):
        op = step["op"]
        if op == "advance":
            clock.advance_us(step["us"])
            continue
        if op == "check_all":
            await check_all_step(backend, built, step, index, calls.mode, leases, report)
            continue
        limiter = built[step["limiter"]]
        key = key_of(step)
        outcome: Any
        try:
            if op == "check":
                outcome = await calls(limiter, "check", key, number(step["cost"]) if "cost" in step else 1)
            elif op == "peek":
                outcome = await calls(limiter, "peek", key)
            elif op == "reset":
                outcome = await calls(limiter, "reset", key)
            elif op == "points_used":
                outcome = await calls(limiter, "points_used", number(step["estimate"]), number(step["actual"]), key)
            elif op == "block":
                await calls(limiter, "block", number(step["seconds"]), key)
                outcome = None
            elif op == "unblock":
                await calls(limiter, "unblock", key)
                outcome = None
            elif op == "settle":
                if step["decision"] not in decisions:
                    raise Malformed(f"step {index}: no decision saved as {step['decision']!r}")
                outcome = await calls(limiter, "settle", decisions[step["decision"]], number(step["actual"]))
            elif op == "release":
                if step["lease"] not in leases:
                    raise Malformed(f"step {index}: no lease saved as {step['lease']!r}")
                # No key is the key "" (as in every binding): pass it explicitly, since a bare
                # release(lease) would use the key the lease was granted for.
                outcome = await calls(limiter, "release", leases[step["lease"]], "" if key is None else key)
            else:
                raise Malformed(f"step {index}: unknown op {op!r}")
        except ratekeeper.RatekeeperError as e:
            outcome = e

        def fail(message: str) -> None:
            report(f"step {index}: {op} on {step['limiter']}: {message}")

        if "error" in step:
            if isinstance(outcome, Exception):
                if not error_matches(step["error"], outcome):
                    fail(f"expected error {step['error']}, got error {error_json(outcome)} ({outcome})")
            else:
                fail(f"expected error {step['error']}, got {outcome!r}")
            continue
        if isinstance(outcome, Exception):
            fail(f"expected success, got error {error_json(outcome)} ({outcome})")
            continue
        if "expect" not in step:
            if outcome is not None:
                raise Malformed(f"step {index}: `{op}` needs an `expect` or an `error`")
            continue
        expected = dict(step["expect"])
        actual = decision_json(outcome)
        wants_lease = op == "check" and limiter.kind == "concurrent" and outcome.allowed and not outcome.shadow_refused
        if (outcome.lease is not None) != wants_lease:
            fail(f"lease present: {outcome.lease is not None}, expected {wants_lease}")
        if "fencing_token" not in expected:
            actual.pop("fencing_token", None)
        if expected != actual:
            fail(f"expected {json.dumps(expected, sort_keys=True)}\n         actual   {json.dumps(actual, sort_keys=True)}")
        if "save_decision" in step:
            decisions[step["save_decision"]] = outcome
        if "save_lease" in step:
            if outcome.lease is None:
                fail(f"expected a lease to save as {step['save_lease']!r}, got none")
            else:
                leases[step["save_lease"]] = outcome.lease
    return kinds


async def check_all_step(backend: ratekeeper.Backend, built: dict[str, Limiter], step: dict[str, Any], index: int,
                         mode: str, leases: dict[str, ratekeeper.Lease], report: Callable[[str], None]) -> None:
    """A `check_all` step: `parts` (each `{limiter, key, cost}`), then `expect` (`allowed`,
    `retry_after_us` and one decision per part) or `error`. Admitted concurrent parts hold
    leases, saved (in order) under the names of `save_leases` when given."""
    parts = [(built[p["limiter"]], key_of(p), number(p["cost"]) if "cost" in p else 1) for p in step["parts"]]

    def fail(message: str) -> None:
        report(f"step {index}: check_all: {message}")

    outcome: Any
    try:
        outcome = backend.check_all(parts) if mode == "sync" else await backend.acheck_all(parts)
    except ratekeeper.RatekeeperError as e:
        outcome = e
    if "error" in step:
        if not isinstance(outcome, Exception):
            fail(f"expected error {step['error']}, got allowed: {outcome.allowed}")
        elif not error_matches(step["error"], outcome):
            fail(f"expected error {step['error']}, got error {error_json(outcome)} ({outcome})")
        return
    if isinstance(outcome, Exception):
        fail(f"expected success, got error {error_json(outcome)} ({outcome})")
        return
    if "expect" not in step:
        raise Malformed(f"step {index}: `check_all` needs an `expect` or an `error`")
    expect = step["expect"]
    retry = round(outcome.retry_after * 1e6)
    if outcome.allowed != expect["allowed"] or retry != expect["retry_after_us"]:
        fail(f"expected allowed {expect['allowed']}, retry_after_us {expect['retry_after_us']}; "
             f"got {outcome.allowed}, {retry}")
    if len(expect["parts"]) != len(outcome.parts):
        raise Malformed(f"step {index}: expect one decision per part")
    saved = []
    for i, (expected, decision, (limiter, _, _)) in enumerate(zip(expect["parts"], outcome.parts, parts)):
        actual = decision_json(decision)
        wants_lease = outcome.allowed and limiter.kind == "concurrent"
        if (decision.lease is not None) != wants_lease:
            fail(f"parts[{i}]: lease present: {decision.lease is not None}, expected {wants_lease}")
        if "fencing_token" not in expected:
            actual.pop("fencing_token", None)
        if dict(expected) != actual:
            fail(f"parts[{i}]: expected {json.dumps(expected, sort_keys=True)}\n"
                 f"         actual   {json.dumps(actual, sort_keys=True)}")
        if decision.lease is not None:
            saved.append(decision.lease)
    if "save_leases" in step:
        if len(step["save_leases"]) != len(saved):
            fail(f"expected {len(step['save_leases'])} leases to save, got {len(saved)}")
        leases.update(zip(step["save_leases"], saved))


async def run_all(make_backend: MakeBackend, mode: str) -> tuple[int, dict[str, int], list[str]]:
    calls = Calls(mode)
    failures: list[str] = []
    per_kind = {k: 0 for k in KINDS}
    total = 0
    # Vectors of calls not every binding has yet live in subdirectories (`check_all/`).
    files = sorted(VECTORS.glob("*.json")) + sorted(VECTORS.glob("check_all/*.json"))
    assert files, f"no vectors in {VECTORS}"
    for path in files:
        doc = json.loads(path.read_text())
        assert doc.get("description") and isinstance(doc.get("cases"), list), f"{path.name}: malformed file"
        for case in doc["cases"]:
            total += 1
            name = case.get("name", "<unnamed>")

            def report(message: str, file: str = path.name, case_name: str = name) -> None:
                failures.append(f"FAIL {file} / {case_name!r}: {message}")

            try:
                for kind in await run_case(case, make_backend, calls, report):
                    per_kind[kind] = per_kind.get(kind, 0) + 1
            except (Malformed, KeyError) as e:
                report(f"malformed vector: {e!r}")
    return total, per_kind, failures


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_conformance_vectors(make_backend: MakeBackend, mode: str) -> None:
    total, per_kind, failures = asyncio.run(run_all(make_backend, mode))
    print(f"vectors ({mode}): {total} cases, {len(failures)} failures, {per_kind}")
    problems = list(failures)
    if total < MIN_TOTAL:
        problems.append(f"only {total} conformance vector cases; at least {MIN_TOTAL} are required")
    # The minimum holds for the kinds every vector file covers (a kind seen only as a bad part of
    # a combination, e.g. `leased`, is not one of them).
    for kind in KINDS:
        n = per_kind[kind]
        if n < MIN_PER_KIND:
            problems.append(f"only {n} cases exercise {kind} limiters; at least {MIN_PER_KIND} are required")
    assert not problems, "\n".join(problems)
