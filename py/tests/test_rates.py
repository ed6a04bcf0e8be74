"""Rate strings and durations with units (issue 46): what `limits` and slowapi users type first,
read as the spec reads it, in Python as in every language; bad strings name the parameter."""

import pytest

import ratekeeper
from ratekeeper import InvalidArgument


def test_rate_strings_stand_for_a_count_and_an_interval() -> None:
    backend = ratekeeper.Backend.memory()
    assert backend.window("login", "5/minute").spec == {"kind": "window", "limit": 5, "interval": 60}
    assert backend.bucket("api", "100 per hour").spec == {"kind": "bucket", "limit": 100, "interval": 3600}
    assert backend.window("burst", "10/second").spec == {"kind": "window", "limit": 10, "interval": 1}
    assert backend.window("span", "25/5s").spec == {"kind": "window", "limit": 25, "interval": 5}
    assert backend.windows("both", "25/5s; 300/minute").spec == {"kind": "windows", "windows": [[25, 5], [300, 60]]}


def test_intervals_take_units_and_numbers_stay_seconds() -> None:
    backend = ratekeeper.Backend.memory()
    assert backend.window("a", 5, "1m").spec["interval"] == 60
    assert backend.window("b", 5, "500ms").spec["interval"] == 0.5
    assert backend.window("c", 5, "minute").spec["interval"] == 60
    assert backend.window("d", 5, 60).spec["interval"] == 60


@pytest.mark.parametrize(
    ("call", "parameter"),
    [
        (lambda b: b.window("w", "5/minte"), "rate"),
        (lambda b: b.bucket("b", "100/60"), "rate"),
        (lambda b: b.bucket("b", "1000/month"), "rate"),
        (lambda b: b.bucket("b", "25/5s; 300/minute"), "rate"),
        (lambda b: b.windows("w", "25/5s; 300/fortnight"), "rate"),
        (lambda b: b.window("w", "5", 60), "limit"),
        (lambda b: b.window("w", 5), "interval"),
        (lambda b: b.window("w", 5, "60"), "interval"),
    ],
)
def test_bad_rates_and_durations_name_the_parameter(call, parameter: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgument) as caught:
        call(ratekeeper.Backend.memory())
    assert caught.value.parameter == parameter
