"""A per-customer billing day (issue 46: a question the docs left unanswered): one calendar
quota for every customer, and a per-key override with its own `anchor` for the customer billed on
the 15th. docs/src/concepts/calendar.md includes the marked region."""

from __future__ import annotations

from datetime import datetime, timezone

import ratekeeper


def at(text: str) -> int:
    """An instant in UTC, in microseconds since the epoch."""
    return int(datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp() * 1_000_000)


def test_a_customer_billed_on_the_15th_has_its_own_month() -> None:
    clock = ratekeeper.ManualClock(at("2026-01-14T23:59:00"))
    backend = ratekeeper.Backend.memory(clock=clock)
    # --8<-- [start:billing_day]
    quota = backend.calendar("api-quota", 1000, "month")  # every customer: months from the 1st
    # Customer 42 is billed on the 15th: the same quota, its own month, for that key only.
    backend.set_limit("api-quota", {"kind": "calendar", "limit": 1000, "period": "month", "anchor": 15},
                      key="customer-42")
    # --8<-- [end:billing_day]
    for customer in ("customer-42", "customer-7"):
        assert quota.check(customer, 1000).allowed
        assert not quota.check(customer).allowed, "the month's quota is spent"
    clock.advance((at("2026-01-15T00:00:01") - at("2026-01-14T23:59:00")) / 1e6)
    assert quota.check("customer-42").allowed, "customer 42's month began on the 15th"
    refused = quota.check("customer-7")
    assert not refused.allowed, "the others wait for the 1st"
    assert abs(refused.retry_after - (at("2026-02-01T00:00:00") - at("2026-01-15T00:00:01")) / 1e6) < 1
