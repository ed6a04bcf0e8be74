"""Testing code that rate-limits without sleeping: a ManualClock moves only when told to.

Run it with pytest, or as a script (the docs' example runner does that).
"""

import ratekeeper


def send_reset_email(limiter: ratekeeper.Limiter, user: str) -> bool:
    """The code under test: at most 3 password-reset emails per user per hour."""
    return limiter.check(user).allowed


def test_reset_emails_are_limited_per_user_per_hour() -> None:
    clock = ratekeeper.ManualClock()  # starts at the current time, then stands still
    backend = ratekeeper.Backend.memory(clock=clock)  # Backend.redis(url, clock=clock) works too
    resets = backend.window("password-reset", 3, "hour")

    assert [send_reset_email(resets, "ada") for _ in range(4)] == [True, True, True, False]
    assert resets.check("ada").retry_after == 3600  # exact: the clock has not moved
    assert send_reset_email(resets, "grace")  # another key has a limit of its own

    clock.advance(3599)
    assert not send_reset_email(resets, "ada")
    clock.advance(1)  # an hour after the first three, in no time
    assert send_reset_email(resets, "ada")


if __name__ == "__main__":
    test_reset_emails_are_limited_per_user_per_hour()
    print("passed: 3 per user per hour")
