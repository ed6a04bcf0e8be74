"""A Python process of the soak (tests/soak/soak.py): reads the run's config (see config.py),
calls every limiter on every key at the configured pace until the stop time, and writes one line
per call to its log (format in config.py), flushed line by line so that a killed process leaves
every call it saw an answer to.

`python worker.py CONFIG` runs a worker; with `mode victim` in the config it only takes every
slot of the concurrent limiter on one key and holds them, so the driver can kill it holding
leases."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ratekeeper  # noqa: E402
from config import Config, log_line  # noqa: E402


def now_us() -> int:
    return time.time_ns() // 1000


class Caller:
    """Times one call and writes its line."""

    def __init__(self, out: object) -> None:
        self.out = out

    def check(self, name: str, limiter: ratekeeper.Limiter, key: str, cost: int) -> ratekeeper.Decision | None:
        t0, m0 = now_us(), time.perf_counter_ns()
        decision = None
        try:
            decision = limiter.check(key, cost)
            status = "ok" if decision.allowed else "over"
        except ratekeeper.RatekeeperError as e:
            status = type(e).__name__
        dur = (time.perf_counter_ns() - m0) // 1000
        lease = decision.lease if decision is not None else None
        decided = lease.granted_at_us if lease is not None else (decision.decided_at_us if decision else 0)
        fencing = lease.fencing_token if lease is not None else 0
        self.out.write(log_line(name, key, "c", status, t0, dur, decided, cost, fencing))  # type: ignore[attr-defined]
        return decision

    def release(self, name: str, limiter: ratekeeper.Limiter, key: str, lease: ratekeeper.Lease) -> None:
        t0, m0 = now_us(), time.perf_counter_ns()
        try:
            limiter.release(lease, key)
            status = "ok"
        except ratekeeper.RatekeeperError as e:
            status = type(e).__name__
        dur = (time.perf_counter_ns() - m0) // 1000
        self.out.write(log_line(name, key, "r", status, t0, dur, 0, 0, lease.fencing_token))  # type: ignore[attr-defined]


def main() -> None:
    config = Config.read(sys.argv[1])
    backend = ratekeeper.Backend.cluster(config.seeds, prefix=config.prefix, failure_policy="fail_closed",
                                         deadline=config.deadline, connect_timeout=config.deadline * 5)
    limiters = {l.name: (l, backend.limiter(l.name, l.spec_json)) for l in config.limiters}
    rng = random.Random(config.seed)
    with open(config.log, "a", buffering=1) as out:
        caller = Caller(out)
        warm_up(config, [limiter for _, limiter in limiters.values()])
        while time.time() < config.start:
            time.sleep(0.001)
        if config.mode == "victim":
            victim(config, limiters[config.lease_limiter][1], caller)
            return
        pairs = [(name, key) for name in limiters for key in config.keys]
        pause = 1.0 / config.rate
        next_at = time.monotonic()
        while time.time() < config.stop:
            rng.shuffle(pairs)
            for name, key in pairs:
                if time.time() >= config.stop:
                    break
                spec, limiter = limiters[name]
                d = caller.check(name, limiter, key, rng.randint(1, spec.max_cost))
                if d is not None and d.lease is not None:
                    time.sleep(rng.uniform(0, config.hold_ms / 1000))
                    caller.release(name, limiter, key, d.lease)
                next_at = max(next_at + pause, time.monotonic())
                time.sleep(max(0.0, next_at - time.monotonic()))


def warm_up(config: Config, limiters: list[ratekeeper.Limiter]) -> None:
    """Connects to every master before the start (a peek on each limiter and key, not logged):
    the soak judges calls under faults, not a fleet's first connections on a loaded machine."""
    for limiter in limiters:
        for key in config.keys:
            while time.time() < config.start:
                try:
                    limiter.peek(key)
                    break
                except ratekeeper.RatekeeperError:
                    time.sleep(0.05)


def victim(config: Config, limiter: ratekeeper.Limiter, caller: Caller) -> None:
    """Takes every slot of the lease limiter on its first key, holds them, gives them back."""
    key, limit = config.keys[0], config.lease_limit
    while time.time() < config.stop:
        held: list[ratekeeper.Lease] = []
        while len(held) < limit and time.time() < config.stop:
            d = caller.check(config.lease_limiter, limiter, key, 1)
            if d is not None and d.lease is not None:
                held.append(d.lease)
            else:
                time.sleep(0.01)
        time.sleep(config.victim_hold_ms / 1000)
        for lease in held:
            caller.release(config.lease_limiter, limiter, key, lease)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
