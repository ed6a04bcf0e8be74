"""``Backoff``: Sidekiq's reschedule policy through the binding (the arithmetic is the core's and
unit-tested there; these check the conversions, the user function and the errors)."""

from __future__ import annotations

from typing import Any

import pytest

import ratekeeper
from ratekeeper import Backoff


def test_defaults_are_sidekiq_linear_within_jitter_bounds() -> None:
    b = Backoff(seed=1)
    assert (b.base, b.jitter, b.max_reschedules) == (300.0, 300.0, 20)
    for attempt in range(1, 21):
        for _ in range(50):
            d = b.reschedule_in(attempt)
            assert d is not None and 300 * attempt <= d < 300 * attempt + 300
    assert b.reschedule_in(21) is None
    assert b.reschedule_in(2**40) is None  # beyond 32 bits: still just "give up"


def test_retry_after_is_a_floor_and_the_seed_repeats() -> None:
    exact = Backoff(base=1, jitter=0, max_reschedules=3)
    assert exact.reschedule_in(1, 2.5) == 2.5
    assert exact.reschedule_in(3, 0.25) == 3.0
    assert exact.reschedule_in(4, 0.25) is None
    draws = [Backoff(seed=9).reschedule_in(n, 1.0) for n in (1, 2, 3)]
    assert draws == [Backoff(seed=9).reschedule_in(n, 1.0) for n in (1, 2, 3)]
    assert draws != [Backoff(seed=10).reschedule_in(n, 1.0) for n in (1, 2, 3)]


def test_a_function_replaces_the_formula() -> None:
    seen: list[int] = []

    def delay(attempt: int) -> float:
        seen.append(attempt)
        return 0.5 * attempt

    b = Backoff(delay=delay, jitter=0, max_reschedules=2)
    assert b.reschedule_in(2, 0.1) == 1.0
    assert b.reschedule_in(1, 3.0) == 3.0  # retry_after still a floor
    assert b.reschedule_in(3, 0.0) is None
    assert seen == [2, 1]  # not called for an attempt that gives up
    jittered = Backoff(delay=lambda n: 10.0, jitter=1, seed=3)
    d = jittered.reschedule_in(1)
    assert d is not None and 10.0 <= d < 11.0


def test_user_function_errors_propagate() -> None:
    def boom(attempt: int) -> float:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        Backoff(delay=boom).reschedule_in(1)


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"base": -1}, "base"),
        ({"base": float("nan")}, "base"),
        ({"jitter": "300"}, "jitter"),
        ({"jitter": 1e12}, "jitter"),
        ({"max_reschedules": -1}, "max_reschedules"),
        ({"max_reschedules": 2**32}, "max_reschedules"),
        ({"max_reschedules": 1.5}, "max_reschedules"),
        ({"delay": 5}, "delay"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_parameters_are_named(kwargs: dict[str, Any], parameter: str) -> None:
    with pytest.raises(ratekeeper.InvalidArgument) as e:
        Backoff(**kwargs)
    assert e.value.parameter == parameter


@pytest.mark.parametrize(
    ("backoff", "args", "parameter"),
    [
        (Backoff(), (0,), "attempt"),
        (Backoff(), (-1,), "attempt"),
        (Backoff(), (1, -2.0), "retry_after"),
        (Backoff(), (1, "soon"), "retry_after"),
        (Backoff(delay=lambda n: "x"), (1,), "delay"),  # type: ignore[arg-type, return-value]
        (Backoff(delay=lambda n: -1.0), (1,), "delay"),
    ],
)
def test_bad_calls_are_named(backoff: Backoff, args: tuple[Any, ...], parameter: str) -> None:
    with pytest.raises(ratekeeper.InvalidArgument) as e:
        backoff.reschedule_in(*args)
    assert e.value.parameter == parameter
