"""A Redis password never shows (issue #31, item 9): URLs carry it (`redis://user:PASSWORD@host`),
and whatever the library raises, prints or returns about a backend hides it — a refused URL's
error, a wrong password's error, the `repr` of backends and limiters, the registry."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator

import pytest

import ratekeeper
from ratekeeper import InvalidArgument, RatekeeperError

from .conftest import RedisServer

SECRET = "Pa55-w0rd-9f3e"


@pytest.fixture(scope="module")
def guarded() -> Iterator[RedisServer]:
    # A user with a password (the default user stays open, so the fixture's own checks work).
    server = RedisServer()
    assert server.cli("ACL", "SETUSER", "alice", "on", f">{SECRET}", "~*", "&*", "+@all") == "OK"
    yield server
    server.stop()


def shown(error: BaseException) -> str:
    """Everything a user sees of an exception: its traceback (with causes) and its repr."""
    return "".join(traceback.format_exception(error)) + repr(error) + repr(getattr(error, "args", ""))


def test_refused_urls_hide_their_password() -> None:
    refused = [
        ("url", lambda: ratekeeper.Backend.redis(f"redix://user:{SECRET}@127.0.0.1:1")),  # issue #31's example
        ("url", lambda: ratekeeper.Backend.redis(f"user:{SECRET}@127.0.0.1:6380")),  # no scheme
        ("url", lambda: ratekeeper.Backend.redis(f"redis://user:{SECRET}@127.0.0.1:notaport")),
        ("seeds[1]", lambda: ratekeeper.Backend.cluster(["redis://127.0.0.1:1", f"http://:{SECRET}@127.0.0.1:2"])),
    ]
    for parameter, make in refused:
        with pytest.raises(InvalidArgument) as raised:
            make()
        assert raised.value.parameter == parameter, str(raised.value)
        text = shown(raised.value)
        assert SECRET not in text, text


def test_a_wrong_password_and_a_working_backend_hide_it(
    guarded: RedisServer, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    texts = []
    wrong = ratekeeper.Backend.redis(f"redis://alice:{SECRET}-wrong@127.0.0.1:{guarded.port}", prefix="sec")
    with pytest.raises(RatekeeperError) as raised:
        wrong.window("secret-w", 1, 1).check()
    texts.append(shown(raised.value))

    right = ratekeeper.Backend.redis(f"redis://alice:{SECRET}@127.0.0.1:{guarded.port}", prefix="sec")
    limiter = right.window("secret-w", 5, 1)
    assert limiter.check().allowed, "the right password works: the checks below see a live backend"
    right.flush()
    texts += [repr(wrong), repr(right), repr(limiter), repr(right.limiters()), right.prometheus(fleet=True)]
    out, err = capfd.readouterr()
    texts += [out, err, caplog.text]
    for text in texts:
        assert SECRET not in text, text
    assert "WRONGPASS" in texts[0] or "password" in texts[0].lower(), texts[0]
