"""The shared HTTP rules (tests/http/cases.json) through the Python middleware: the client key,
the rate-limit header fields, what `count` charges and refunds, and the limiter facts the
middleware asks. Node (node/__test__/http-cases.test.js), Ruby (ruby/test/rack_cases_test.rb)
and the core (core/tests/http.rs) run the same table."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import ratekeeper
from ratekeeper._http import Policy
from ratekeeper._ratekeeper import HttpRules

TABLE = json.loads((Path(__file__).resolve().parents[3] / "tests" / "http" / "cases.json").read_text())
START_US = 1_700_000_000_000_000


def named(cases: list[dict[str, Any]]) -> Any:
    return pytest.mark.parametrize("case", cases, ids=[c.get("name", json.dumps(c.get("limiter"))) for c in cases])


def lookup(headers: dict[str, str], name: str) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == name), None)


def policy(limiter: ratekeeper.Limiter, **options: Any) -> Policy[dict[str, Any]]:
    """The framework-neutral middleware over one request shape: {"peer": ..., "headers": ...}."""
    settings: dict[str, Any] = dict(key=None, cost=1, skip=None, count="all", headers="draft-11", on_refused=None,
                                    shadow=False, trusted_proxies=None)
    settings.update(options)
    return Policy(limiter, peer=lambda r: r["peer"], header=lambda r, name: lookup(r["headers"], name), **settings)


@named(TABLE["client_key"])
def test_client_key(case: dict[str, Any]) -> None:
    limiter = ratekeeper.Backend.memory().window("keys", 5, 60)
    options = {"proxy_header": case["proxy_header"]} if "proxy_header" in case else {}
    p = policy(limiter, trusted_proxies=case.get("trusted_proxies"), **options)
    assert p.key_of({"peer": case["peer"], "headers": case["headers"]}) == case["key"]


@named(TABLE["fields"])
def test_fields(case: dict[str, Any]) -> None:
    rules = HttpRules(case["headers"], [], "X-Forwarded-For", case.get("partition_key_secret", "").encode() or None)
    reports = [
        (r["name"], r["window"], SimpleNamespace(**{**r, "limits": [SimpleNamespace(**x) for x in r["limits"]] if "limits" in r else None}))
        for r in case["reports"]
    ]
    assert [list(pair) for pair in rules.fields(reports, case["key"])] == case["fields"]


@named(TABLE["count"])
def test_count(case: dict[str, Any]) -> None:
    backend = ratekeeper.Backend.memory(clock=ratekeeper.ManualClock(START_US))
    limiter = backend.limiter("count", case["limiter"])
    p = policy(limiter, count=case["count"], cost=case["cost"])
    admission = p.admit({"peer": "203.0.113.7", "headers": {}})
    assert admission is not None and not admission.refused
    admission.settle(case["status"])
    assert limiter.peek("203.0.113.7").remaining == case["remaining"]


@named(TABLE["limiters"])
def test_limiter_facts(case: dict[str, Any]) -> None:
    limiter = ratekeeper.Backend.memory().limiter("facts", case["limiter"])
    assert (limiter.capacity, limiter.refundable, limiter.window) == (case["capacity"], case["refundable"], case["window"])
