"""What every test app shares: the options from ``RK_OPTIONS`` (JSON, set by the tests) turned
into limiters on one Redis and middleware keyword arguments."""

from __future__ import annotations

import json
import os
from typing import Any

import ratekeeper


def configure() -> tuple[dict[str, Any], dict[str, Any]]:
    """``(raw options, middleware keyword arguments)``."""
    raw: dict[str, Any] = json.loads(os.environ["RK_OPTIONS"])
    backend = ratekeeper.Backend.redis(
        raw["redis"], prefix=raw["prefix"], failure_policy=raw.get("failure_policy", "fail_closed"),
        deadline=raw.get("deadline", 5.0), connect_timeout=raw.get("connect_timeout", 5.0),
    )
    limiters = [backend.limiter(name, spec) for name, spec in raw["limiters"]]
    kwargs: dict[str, Any] = {}
    if limiters:
        kwargs["limiter"] = limiters if len(limiters) > 1 else limiters[0]
    for name in ("count", "headers", "shadow", "trusted_proxies", "proxy_header", "cost"):
        if name in raw:
            kwargs[name] = raw[name]
    return raw, kwargs


def path_of(request: Any) -> str:
    """The request path, for the frameworks' ``skip`` functions."""
    return str(request.url.path)
