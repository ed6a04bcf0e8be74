"""The soak's two plain-text formats, shared by the driver, the judge and the Python worker (the
Node and C workers parse the same lines).

Config, one setting per line, `name value...` separated by single spaces:

    seeds redis://127.0.0.1:P1 redis://127.0.0.1:P2 redis://127.0.0.1:P3
    prefix soak1234          deadline 0.2           rate 60
    start 1764000000.5       stop 1764000015.5      (Unix seconds)
    log /tmp/.../w3.log      seed 3                 mode worker|victim
    keys k0 k1 k2            hold_ms 20             victim_hold_ms 1000
    lease lease 2            (the concurrent limiter the victim fills, and its limit)
    limiter NAME MAX_COST SPEC_JSON   (one line per limiter, the JSON without spaces)

Log, one line per call, written when the call returned:

    NAME KEY OP STATUS T0_US DUR_US DECIDED_US COST FENCING

OP is `c` (check) or `r` (release of the lease with that fencing token). STATUS is `ok`
(admitted, or released), `over` (refused) or the error's name (`Timeout`,
`BackendUnavailable`, ...; each language's name is mapped to one by the judge). T0_US is the
process's wall clock when the call started (the same host's clock as Redis's `TIME`), DUR_US
the call's duration on a monotonic clock, DECIDED_US the server's time of the decision (for a
granted lease: its `granted_at_us`; 0 when there is no decision)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class LimiterConf:
    """One limiter of the run: its name, the largest cost a call asks for, and its spec."""

    name: str
    max_cost: int
    spec: dict[str, Any]

    @property
    def spec_json(self) -> str:
        return json.dumps(self.spec, separators=(",", ":"))


@dataclass
class Config:
    seeds: list[str]
    prefix: str
    deadline: float
    rate: float
    start: float
    stop: float
    log: str
    seed: int
    mode: str
    keys: list[str]
    hold_ms: int
    victim_hold_ms: int
    lease_limiter: str
    lease_limit: int
    limiters: list[LimiterConf] = field(default_factory=list)

    def write(self, path: str) -> None:
        lines = [
            "seeds " + " ".join(self.seeds),
            f"prefix {self.prefix}",
            f"deadline {self.deadline}",
            f"rate {self.rate}",
            f"start {self.start:.6f}",
            f"stop {self.stop:.6f}",
            f"log {self.log}",
            f"seed {self.seed}",
            f"mode {self.mode}",
            "keys " + " ".join(self.keys),
            f"hold_ms {self.hold_ms}",
            f"victim_hold_ms {self.victim_hold_ms}",
            f"lease {self.lease_limiter} {self.lease_limit}",
        ] + [f"limiter {l.name} {l.max_cost} {l.spec_json}" for l in self.limiters]
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")

    @staticmethod
    def read(path: str) -> "Config":
        values: dict[str, list[str]] = {}
        limiters = []
        with open(path) as f:
            for line in f:
                name, *rest = line.split()
                if name == "limiter":
                    limiters.append(LimiterConf(rest[0], int(rest[1]), json.loads(rest[2])))
                else:
                    values[name] = rest
        return Config(
            seeds=values["seeds"], prefix=values["prefix"][0], deadline=float(values["deadline"][0]),
            rate=float(values["rate"][0]), start=float(values["start"][0]), stop=float(values["stop"][0]),
            log=values["log"][0], seed=int(values["seed"][0]), mode=values["mode"][0], keys=values["keys"],
            hold_ms=int(values["hold_ms"][0]), victim_hold_ms=int(values["victim_hold_ms"][0]),
            lease_limiter=values["lease"][0], lease_limit=int(values["lease"][1]), limiters=limiters,
        )


def log_line(name: str, key: str, op: str, status: str, t0_us: int, dur_us: int, decided_us: int, cost: int,
             fencing: int) -> str:
    return f"{name} {key} {op} {status} {t0_us} {dur_us} {decided_us} {cost} {fencing}\n"
