"""The first-hour table (tests/first_hour/cases.json) through the Python API: every case raises
the table's error class with a message holding the table's key words, so each error a new user
meets says what was wrong and what to do.

The same table runs through Node (node/__test__/first_hour.test.js) and C
(tests/first_hour/run_c.py), so the three languages teach the same way."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ratekeeper
from ratekeeper import BackendUnavailable, InvalidArgument

from .conftest import RedisServer, free_port, unique_prefix

TABLE = json.loads((Path(__file__).resolve().parents[2] / "tests" / "first_hour" / "cases.json").read_text())
CASES: list[dict[str, Any]] = [c for c in TABLE["cases"] if "python" in c.get("languages", ["python"])]
CLASSES: dict[str, type[Exception]] = {"invalid_argument": InvalidArgument, "backend_unavailable": BackendUnavailable}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


@pytest.fixture(scope="module")
def places(redis_server: RedisServer) -> Iterator[dict[str, str]]:
    """The table's placeholders: a port nobody listens on, an HTTP server, a real Redis."""
    closed = free_port()
    with socket.socket() as probe:  # free_port() promises nobody listens there; check it
        assert probe.connect_ex(("127.0.0.1", closed)) != 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {"closed_port": str(closed), "http_port": str(server.server_address[1]), "redis_url": redis_server.url}
    server.shutdown()
    server.server_close()


def fill(value: Any, places: dict[str, str]) -> Any:
    """The value with every {placeholder} replaced, inside strings, lists and objects."""
    if isinstance(value, str):
        for name, text in places.items():
            value = value.replace("{" + name + "}", text)
        return value
    if isinstance(value, list):
        return [fill(v, places) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, places) for k, v in value.items()}
    return value


def run(case: dict[str, Any]) -> None:
    call = case["call"]
    if call == "check_redis":
        backend = ratekeeper.Backend.redis(case["url"], deadline=5.0)
        backend.limiter(case["name"], case["spec"]).check()
    elif call == "new_redis":
        options = {case["option"]: case["value"]} if "option" in case else {}
        ratekeeper.Backend.redis(case["url"], **options)
    elif call == "new_limiter":
        ratekeeper.Backend().limiter(case["name"], case["spec"])
    elif call == "set_limit_other_kind":
        backend = ratekeeper.Backend.redis(case["url"], prefix=unique_prefix(), deadline=5.0)
        # Kept until the flush: the registry entry of a limiter dropped before it may not be written.
        limiter = backend.limiter(case["name"], case["spec"])
        limiter.check()
        backend.flush()
        backend.set_limit(case["name"], case["other_spec"])
    else:
        raise AssertionError(f"the runner does not know the call {call!r}")


@pytest.mark.parametrize("raw", CASES, ids=[c["id"] for c in CASES])
def test_first_hour_error_teaches(raw: dict[str, Any], places: dict[str, str]) -> None:
    case = fill(raw, places)
    with pytest.raises(CLASSES[case["error"]]) as caught:
        run(case)
    message = str(caught.value)
    missing = [w for w in case["words"] if w not in message]
    assert not missing, f"{case['id']}: {message!r} lacks {missing}"
    assert "\n" not in message, f"{case['id']}: one line, got {message!r}"
