"""One name, two specs across languages (issue 46): a Node process uses `window("shared", 10, …)`
while Python uses `window("shared", 20, …)` on the same redis-server. Each process records its
spec's fingerprint in the registry; the one that finds another spec in use warns once on stderr
naming both and who uses each, counts it in `spec_conflicts`, and `limiters()` shows the conflict
with each spec and its processes. `on_conflict="raise"` refuses to build the limiter instead."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import ratekeeper
from ratekeeper import InvalidArgument

from .conftest import RedisServer, unique_prefix

NODE_PACKAGE = Path(__file__).resolve().parents[2] / "node"
WORKER = Path(__file__).parent / "workers" / "spec_user.cjs"
SPEC_10 = '{"kind":"window","limit":10,"interval":60}'
SPEC_20 = '{"kind":"window","limit":20,"interval":60}'


def need_node() -> None:
    if shutil.which("node") is None or not (NODE_PACKAGE / "ratekeeper.node").exists():
        if os.environ.get("RK_REQUIRE_NODE"):
            pytest.fail("node or node/ratekeeper.node is missing")
        pytest.skip("the Node addon is not built (scripts/test-node builds it)")


class NodeUser:
    """A Node process using the limiter, alive until `stop`."""

    def __init__(self, redis: RedisServer, prefix: str, name: str, limit: int, on_conflict: str = "") -> None:
        env = {
            **os.environ,
            "RK_NODE_PACKAGE": str(NODE_PACKAGE),
            "REDIS_URL": redis.url,
            "PREFIX": prefix,
            "NAME": name,
            "LIMIT": str(limit),
            "ON_CONFLICT": on_conflict,
        }
        self.process = subprocess.Popen(
            ["node", str(WORKER)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the Node process said nothing: {self.process.stderr.read() if self.process.stderr else ''}"
        self.report: dict[str, Any] = json.loads(line)

    def stop(self) -> str:
        """Lets it exit; returns its stderr."""
        _, err = self.process.communicate("done\n", timeout=30)
        return err


def test_python_and_node_with_two_specs_see_the_conflict(redis_server: RedisServer, capfd: pytest.CaptureFixture[str]) -> None:
    need_node()
    prefix = unique_prefix()
    node = NodeUser(redis_server, prefix, "shared", 10)
    try:
        assert node.report == {"conflict": None, "specConflicts": 0}, "alone, no conflict"
        backend = ratekeeper.Backend.redis(redis_server.url, prefix=prefix)
        limiter = backend.window("shared", 20, 60)
        limiter.check()
        backend.flush()
        # Said once, naming both specs and who uses each.
        err = capfd.readouterr().err
        assert err.count("is used with two specs") == 1, err
        assert SPEC_20 in err and SPEC_10 in err and "node" in err and "python" in err, err
        assert "set_limit" in err, "says how to change a limit fleet-wide"
        assert limiter.metrics().spec_conflicts == 1
        # Registering again (a forced flush registers every name) counts again, says nothing new.
        entry = next(i for i in backend.limiters() if i.name == "shared")
        assert entry.conflict is not None
        assert entry.conflict.startswith("2 specs in use: "), entry.conflict
        assert f"{SPEC_10} used by node" in entry.conflict, entry.conflict
        assert f"{SPEC_20} used by python" in entry.conflict, entry.conflict
        assert "is used with two specs" not in capfd.readouterr().err, "once"
        # The Node process sees the same conflict in the registry.
        raising = NodeUser(redis_server, prefix, "shared", 10, on_conflict="raise")
        assert raising.report["error"] == "ERR_INVALID_ARGUMENT", raising.report
        assert raising.report["parameter"] == "spec"
        assert SPEC_10 in raising.report["message"] and SPEC_20 in raising.report["message"], raising.report
        raising.stop()
        # on_conflict="raise" in Python: refused before anything is registered.
        strict = ratekeeper.Backend.redis(redis_server.url, prefix=prefix, on_conflict="raise")
        with pytest.raises(InvalidArgument) as caught:
            strict.window("shared", 30, 60)
        assert caught.value.parameter == "spec"
        assert '"limit":30' in str(caught.value) and SPEC_10 in str(caught.value), caught.value
        # The same spec as the live ones is no conflict.
        strict.window("other-name", 30, 60)
    finally:
        node.stop()


def test_on_conflict_names_its_values(redis_server: RedisServer) -> None:
    with pytest.raises(InvalidArgument) as caught:
        ratekeeper.Backend.redis(redis_server.url, on_conflict="ignore")
    assert caught.value.parameter == "on_conflict"
