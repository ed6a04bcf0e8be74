"""Settles counted in metrics through Python, on a real Redis server: applied settles, units
charged and asked back, a repeat not counted; two processes' counts added up fleet-wide and read
back from Prometheus text by prometheus_client's own parser. A leased decision is settled by
another backend (another process's), sync and asyncio."""

from __future__ import annotations

import asyncio

import ratekeeper

from .conftest import REDIS_OPTIONS, RedisServer, unique_prefix


def test_settles_are_counted_once_and_fleet_wide(redis_server: RedisServer) -> None:
    prefix = unique_prefix()
    first = ratekeeper.Backend.redis(redis_server.url, **{**REDIS_OPTIONS, "prefix": prefix})
    second = ratekeeper.Backend.redis(redis_server.url, **{**REDIS_OPTIONS, "prefix": prefix})
    mine = first.leased("llm", 0.001, 100, chunk=1)
    theirs = second.leased("llm", 0.001, 100, chunk=1)
    refunded = mine.check("k", cost=8)
    assert mine.settle(refunded, 3).remaining == 97
    assert mine.settle(refunded, 3).remaining == 97, "a repeat applies nothing"
    charged = mine.check("k", cost=2)

    async def settle_elsewhere() -> ratekeeper.Decision:
        return await theirs.asettle(charged, 6)

    assert asyncio.run(settle_elsewhere()).remaining == 91, "settled in another process"
    m = mine.metrics()
    assert (m.settles, m.settle_charged, m.settle_refunded) == (1, 0, 5)
    t = theirs.metrics()
    assert (t.settles, t.settle_charged, t.settle_refunded) == (1, 4, 0)
    first.flush()
    second.flush()
    fleet = {name: m for name, _, m in first.metrics(fleet=True)}
    assert (fleet["llm"].settles, fleet["llm"].settle_charged, fleet["llm"].settle_refunded) == (2, 4, 5)
    from prometheus_client.parser import text_string_to_metric_families

    samples = [
        s
        for f in text_string_to_metric_families(first.prometheus(fleet=True))
        for s in f.samples
        if s.labels.get("limiter") == "llm" and s.name.startswith("ratekeeper_settle")
    ]
    by_name = {(s.name, s.labels.get("direction")): s.value for s in samples}
    assert by_name == {
        ("ratekeeper_settles_total", None): 2,
        ("ratekeeper_settled_units_total", "charged"): 4,
        ("ratekeeper_settled_units_total", "refunded"): 5,
    }
    assert "settles=1, settle_charged=0, settle_refunded=5" in repr(m)
