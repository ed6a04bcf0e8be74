"""Live limits, the registry and metrics for every limiter, across processes and languages: a
limit set from Python is applied by Node and C processes, the registry lists what all three
built, fleet metrics sum four processes exactly, and the Prometheus exposition is read by
prometheus_client's own parser. Real redis-server, real processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import ratekeeper
import ratekeeper.prometheus

from .conftest import RedisServer, unique_prefix

ROOT = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).parent / "workers"
LIB_DIR = ROOT / "target" / "debug"


@pytest.fixture(scope="module")
def c_probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The C probe, linked against the debug libratekeeper (built as scripts/test-c builds it)."""
    subprocess.run(["cargo", "build", "--quiet", "--locked", "-p", "ratekeeper-ffi", "--features", "test-hooks",
                    "--lib"], cwd=ROOT, check=True)
    out = tmp_path_factory.mktemp("probe") / "live_probe"
    subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Werror", "-o", str(out), str(WORKERS / "live_probe.c"),
                    f"-I{ROOT / 'include'}", f"-L{LIB_DIR}", "-lratekeeper", f"-Wl,-rpath,{LIB_DIR}"], check=True)
    return out


@pytest.fixture(scope="module")
def node_package() -> Path:
    """The Node package with its debug addon (built as scripts/test-node builds it)."""
    subprocess.run(["node", str(ROOT / "node" / "scripts" / "build.js"), "--debug"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return ROOT / "node"


def test_overrides_on_memory_apply_at_once_and_bad_ones_name_the_field() -> None:
    backend = ratekeeper.Backend()
    api = backend.token_bucket("api", 0.001, 2)
    assert api.check().allowed and api.check().allowed
    assert not api.check().allowed
    backend.set_limit("api", {"kind": "token_bucket", "rate": 0.001, "capacity": 4})
    d = api.check()
    assert (d.allowed, d.limit, d.remaining) == (True, 4, 1), "two used of four: the state carried over"
    backend.set_limit("api", '{"kind":"token_bucket","rate":0.001,"capacity":9}', key="vip")
    assert api.peek("vip").limit == 9
    [info] = backend.limiters()
    assert (info.name, info.kind, info.spec["capacity"]) == ("api", "token_bucket", 2)
    assert sorted(info.overrides, key=lambda o: o[0] or "") == [
        (None, {"kind": "token_bucket", "rate": 0.001, "capacity": 4}),
        ("vip", {"kind": "token_bucket", "rate": 0.001, "capacity": 9}),
    ]
    backend.clear_limit("api")
    assert api.peek().limit == 2
    with pytest.raises(ratekeeper.InvalidArgument) as bad:
        backend.set_limit("api", {"kind": "token_bucket", "rate": 1, "capacity": 0})
    assert bad.value.parameter == "capacity"
    with pytest.raises(ratekeeper.InvalidArgument) as other_kind:
        backend.set_limit("api", {"kind": "leaky", "size": 3, "drain": 60})
    assert other_kind.value.parameter == "spec"
    with pytest.raises(ratekeeper.InvalidArgument) as bad_name:
        backend.set_limit("no spaces", {"kind": "token_bucket", "rate": 1, "capacity": 1})
    assert bad_name.value.parameter == "name"
    m = api.metrics()
    assert (m.allowed, m.refused, m.errors, m.latency_count) == (3, 1, 0, 0)


def test_a_limit_set_from_python_reaches_node_and_c_and_the_registry_lists_all_three(
        redis_server: RedisServer, c_probe: Path, node_package: Path) -> None:
    prefix = unique_prefix()
    spec = {"kind": "token_bucket", "rate": 1, "capacity": 5}
    backend = ratekeeper.Backend.redis(redis_server.url, prefix=prefix)
    api = backend.limiter("api", spec)
    assert api.peek().limit == 5
    spec_json, target = json.dumps(spec), "50"
    probes = {
        "c": subprocess.Popen([str(c_probe), redis_server.url, prefix, "api", spec_json, target],
                              stdout=subprocess.PIPE, text=True),
        "node": subprocess.Popen(["node", str(WORKERS / "live_probe.js"), str(node_package), redis_server.url,
                                  prefix, "api", spec_json, target], stdout=subprocess.PIPE, text=True),
    }
    try:
        for name, p in probes.items():
            assert p.stdout is not None and p.stdout.readline().strip() == "ready", name
        set_at_ms = time.time() * 1000
        backend.set_limit("api", {"kind": "token_bucket", "rate": 1, "capacity": 50})
        assert api.peek().limit == 50, "the process that set it applies it at once"
        seen = {name: float(p.communicate(timeout=60)[0].strip()) for name, p in probes.items()}
    finally:
        for p in probes.values():
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in probes.values())
    lags = {name: at - set_at_ms for name, at in seen.items()}
    # The lag is reported (README, "Live limits"), not asserted: processes poll the override
    # version every 200 ms.
    print(f"live limit applied after (ms): {lags}")
    assert all(lag >= -50 for lag in lags.values()), f"applied before it was set? {lags}"

    backend.flush()
    [info] = [i for i in backend.limiters() if i.name == "api"]
    users = " | ".join(info.users)
    for language in ("python 3.", "node ", "c ratekeeper/"):
        assert language in users, f"{language!r} not among the users: {info.users}"
    assert info.processes == 3, info.users
    assert info.overrides == [(None, {"kind": "token_bucket", "rate": 1, "capacity": 50})]
    assert info.first_seen <= info.last_seen


@pytest.mark.parametrize("loss", ["restart", "flushall"])
def test_an_override_after_redis_lost_its_data_reaches_running_python_node_and_c(
        loss: str, c_probe: Path, node_package: Path) -> None:
    """Redis restarts without persistence (or is flushed) after 50 overrides; a Python, a Node and
    a C process that ran all along apply the next override. They used to keep the old overrides
    and ignore every new one until the version counter passed its old value."""
    server = RedisServer()
    try:
        prefix, name = unique_prefix(), "api"
        spec = json.dumps({"kind": "token_bucket", "rate": 1, "capacity": 5})
        bucket = lambda capacity: {"kind": "token_bucket", "rate": 1, "capacity": capacity}  # noqa: E731
        # Each process first sees the 50th override (149), then, after the loss, no override (5),
        # then the override set after it (7).
        targets = "149,5,7"
        probes = {
            "python": subprocess.Popen([sys.executable, str(WORKERS / "live_probe.py"), server.url, prefix, name,
                                        spec, targets], stdout=subprocess.PIPE, text=True),
            "c": subprocess.Popen([str(c_probe), server.url, prefix, name, spec, targets],
                                  stdout=subprocess.PIPE, text=True),
            "node": subprocess.Popen(["node", str(WORKERS / "live_probe.js"), str(node_package), server.url,
                                      prefix, name, spec, targets], stdout=subprocess.PIPE, text=True),
        }
        try:
            def next_line(p: subprocess.Popen[str]) -> str:
                assert p.stdout is not None
                return p.stdout.readline().strip()

            for language, p in probes.items():
                assert next_line(p) == "ready", language
            ops = ratekeeper.Backend.redis(server.url, prefix=prefix)
            for capacity in range(100, 150):
                ops.set_limit(name, bucket(capacity))
            for language, p in probes.items():
                assert next_line(p), f"{language} never applied the 50th override"
            if loss == "restart":
                server.restart()
            else:
                server.cli("FLUSHALL")
            for language, p in probes.items():
                assert next_line(p), f"{language} kept the overrides Redis lost"
            set_at_ms = time.time() * 1000
            ops.set_limit(name, bucket(7))
            seen = {language: float(p.communicate(timeout=60)[0].strip() or "nan") for language, p in probes.items()}
        finally:
            for p in probes.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()
        assert {language: p.returncode for language, p in probes.items()} == {"python": 0, "c": 0, "node": 0}
        lags = {language: round(at - set_at_ms) for language, at in seen.items()}
        print(f"override after {loss} applied after (ms): {lags}")
        # The contract is 1 s (a poll every 200 ms); the bound leaves room for a loaded machine.
        assert all(-50 <= lag < 3000 for lag in lags.values()), lags
    finally:
        server.stop()


NODE_WINDOW = """
const { Backend } = require(process.argv[1]);
(async () => {
  const backend = Backend.redis(process.argv[2], { prefix: process.argv[3] });
  const api = backend.window('api', 5, '1m');
  await api.check();
  await backend.flush();
  console.log(JSON.stringify(await backend.limiters()));
})().catch((e) => { console.error(e); process.exit(1); });
"""


def test_one_name_one_kind_across_python_and_node_and_an_override_waits_for_its_first_user(
        redis_server: RedisServer, node_package: Path) -> None:
    """The README's FastAPI `window("api")` and Express `tokenBucket("api")` against one Redis: the
    first kind in use keeps the registry entry, the other is reported (not merged into one entry
    with 2 processes), and an override of the other kind is refused naming both kinds."""
    prefix = unique_prefix()
    backend = ratekeeper.Backend.redis(redis_server.url, prefix=prefix)
    backend.set_limit("op_x", {"kind": "window", "limit": 7, "interval": 60})
    [waiting] = backend.limiters()
    assert (waiting.name, waiting.kind, waiting.waiting, waiting.processes) == ("op_x", "window", True, 0)
    assert waiting.spec == {"kind": "window", "limit": 7, "interval": 60}

    api = backend.token_bucket("api", 1, 5)
    assert api.check().allowed
    backend.flush()
    node = subprocess.run(["node", "-e", NODE_WINDOW, str(node_package), redis_server.url, prefix],
                          capture_output=True, text=True, timeout=60)
    assert node.returncode == 0, node.stderr
    [seen_by_node] = [i for i in json.loads(node.stdout) if i["name"] == "api"]
    assert (seen_by_node["kind"], seen_by_node["waiting"]) == ("token_bucket", False)
    assert "window used by node" in seen_by_node["conflict"], seen_by_node
    [info] = [i for i in backend.limiters() if i.name == "api"]
    assert (info.kind, info.processes, info.conflict is not None) == ("token_bucket", 1, True), info
    assert info.conflict is not None and "window used by node" in info.conflict
    with pytest.raises(ratekeeper.InvalidArgument) as refused:
        backend.set_limit("api", {"kind": "window", "limit": 9, "interval": 60})
    assert "token_bucket" in str(refused.value) and "window" in str(refused.value)


def test_a_limiter_dropped_before_the_next_tick_is_registered_and_counted_by_flush(
        redis_server: RedisServer) -> None:
    """The issue's repro: a limiter object used once and dropped, then `flush()`: the name is in
    the registry (so `ratekeeper reset x` finds it) and its check is in the fleet's counts."""
    prefix = unique_prefix()
    b = ratekeeper.Backend.redis(redis_server.url, prefix=prefix)
    b.window("x", 7, 60).check()
    b.flush()
    ops = ratekeeper.Backend.redis(redis_server.url, prefix=prefix)
    assert [i.name for i in ops.limiters()] == ["x"]
    assert [(name, kind, m.allowed) for name, kind, m in ops.metrics(fleet=True)] == [("x", "window", 1)]


WORKER = textwrap.dedent("""
    import json, sys, ratekeeper
    url, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    backend = ratekeeper.Backend.redis(url, prefix=prefix)
    jobs = backend.window("jobs", 10, 60)
    for _ in range(n):
        jobs.check()
    backend.flush()
    m = jobs.metrics()
    print(json.dumps({"allowed": m.allowed, "refused": m.refused}))
""")


def checks_total(text: str, limiter: str, outcome: str) -> float:
    """The value of ratekeeper_checks_total{limiter, outcome} as prometheus_client parses it."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (sample.name == "ratekeeper_checks_total" and sample.labels.get("limiter") == limiter
                    and sample.labels.get("outcome") == outcome):
                return sample.value
    raise AssertionError(f"no ratekeeper_checks_total{{limiter={limiter!r}, outcome={outcome!r}}} in:\n{text}")


def test_fleet_metrics_sum_four_processes_exactly_and_prometheus_parses_them(redis_server: RedisServer) -> None:
    prefix, counts = unique_prefix(), [3, 4, 5, 6]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, redis_server.url, prefix, str(n)],
                              stdout=subprocess.PIPE, text=True) for n in counts]
    reports: list[dict[str, Any]] = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(r["allowed"] for r in reports) == 10, reports
    assert sum(r["refused"] for r in reports) == sum(counts) - 10, reports

    backend = ratekeeper.Backend.redis(redis_server.url, prefix=prefix)
    [(name, kind, fleet)] = backend.metrics(fleet=True)
    assert (name, kind, fleet.allowed, fleet.refused) == ("jobs", "window", 10, sum(counts) - 10)
    assert fleet.latency_count == sum(counts), "every check was timed"
    assert sum(n for _, n in fleet.latency_buckets) == fleet.latency_count
    assert backend.metrics() == [], "this process built no limiter"

    text = backend.prometheus(fleet=True)
    assert checks_total(text, "jobs", "allowed") == 10
    assert checks_total(text, "jobs", "refused") == sum(counts) - 10
    histogram = [f for f in text_string_to_metric_families(text) if f.name == "ratekeeper_check_duration_seconds"]
    assert histogram and histogram[0].type == "histogram", text
    count = [s.value for s in histogram[0].samples if s.name.endswith("_count")]
    assert count == [sum(counts)], histogram[0].samples

    registry = CollectorRegistry()
    collector = ratekeeper.prometheus.register(backend, registry, fleet=True)
    exposed = generate_latest(registry).decode()
    assert checks_total(exposed, "jobs", "refused") == sum(counts) - 10
    registry.unregister(collector)
    assert "ratekeeper_checks" not in generate_latest(registry).decode()
