"""The committed Grafana dashboard (contrib/grafana/ratekeeper.json) queries only metric names the
exporter really emits: every family is made to have samples on a real Redis server (checks timed,
leases, a block, a clamped pause, a refusal by a pause, a deny-cache refusal, a settle), ``backend.prometheus()`` is
read by prometheus_client's own parser, and each ``ratekeeper_*`` name in a panel's query must be
one of its sample names. A renamed metric fails here before a dashboard goes blank."""

from __future__ import annotations

import json
import re

from prometheus_client.parser import text_string_to_metric_families

import ratekeeper

from .conftest import REDIS_OPTIONS, REPO, RedisServer, unique_prefix

DASHBOARD = REPO / "contrib" / "grafana" / "ratekeeper.json"


def emitted_names(redis_server: RedisServer) -> set[str]:
    backend = ratekeeper.Backend.redis(redis_server.url, prefix=unique_prefix(), **REDIS_OPTIONS)
    api = backend.token_bucket("api", 0.001, 2).with_deny_cache(True)
    settled = api.check("k")
    api.settle(settled, 2)
    for _ in range(3):
        api.check("k")  # refused, then refused from the deny cache
    pool = backend.concurrent("pool", 1)
    lease = pool.check("k").lease
    assert lease is not None
    pool.release(lease, "k")
    blocky = backend.token_bucket("blocky", 1, 10)
    blocky.block(60.0, "k")
    blocky.check("k")
    blocky.with_max_pause(1.0).pause(60.0, "k")
    quiet = backend.token_bucket("quiet", 1, 10)
    quiet.pause(60.0, "k")
    assert not quiet.check("k").allowed
    text = backend.prometheus()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)]
    return exprs


def test_the_dashboard_queries_only_names_the_exporter_emits(redis_server: RedisServer) -> None:
    emitted = emitted_names(redis_server)
    # The scenario reaches every family, so a name missing below is a rename, not a quiet family.
    assert {"ratekeeper_blocked_total", "ratekeeper_pauses_clamped_total", "ratekeeper_refused_locally_total",
            "ratekeeper_settled_units_total", "ratekeeper_check_duration_seconds_bucket", "ratekeeper_paused_total",
            "ratekeeper_concurrent_leases_held"} <= emitted, emitted
    exprs = queries()
    assert len(exprs) >= 6
    queried = set()
    for expr in exprs:
        names = set(re.findall(r"\bratekeeper_[a-z_]+", expr))
        assert names, f"a query with no ratekeeper metric: {expr}"
        queried |= names
    assert queried - emitted == set(), f"the dashboard queries names the exporter does not emit: {sorted(queried - emitted)}"
    # The panels the issue asks for are there.
    assert {"ratekeeper_checks_total", "ratekeeper_check_duration_seconds_bucket", "ratekeeper_concurrent_held_total",
            "ratekeeper_blocked_total", "ratekeeper_paused_total", "ratekeeper_concurrent_leases_held"} <= queried

