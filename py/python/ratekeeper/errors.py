"""The exceptions ratekeeper raises: one base class, one subclass per kind of failure.

Every exception pickles with its attributes (Celery sends exceptions between processes).
"""

from __future__ import annotations

__all__ = [
    "RatekeeperError",
    "OverLimit",
    "Shed",
    "LeaseLost",
    "InvalidArgument",
    "BackendUnavailable",
    "Timeout",
    "BackendRejected",
]


class RatekeeperError(Exception):
    """Base class of every error ratekeeper raises."""


class OverLimit(RatekeeperError):
    """The limit is reached and waiting (if any) did not help (HTTP 429).

    ``retry_after`` is the exact number of seconds until the same call could succeed.
    """

    retry_after: float

    def __init__(self, message: str, retry_after: float) -> None:
        # Both in `args`: Celery's JSON result backend rebuilds an exception as
        # `type(*args)`, so a task that failed with OverLimit comes back as one.
        super().__init__(message, retry_after)
        self.retry_after = retry_after

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[type[OverLimit], tuple[str, float]]:
        return (type(self), (str(self), self.retry_after))


class Shed(RatekeeperError):
    """A load shedder dropped the call to protect the service (HTTP 503, not 429)."""


class LeaseLost(RatekeeperError):
    """A lease was released or extended after it had been reclaimed (it outlived its
    ``lock_timeout``) or the limiter was reset."""


class InvalidArgument(RatekeeperError, ValueError):
    """An argument is out of range, malformed or of the wrong type; nothing was written.

    ``parameter`` is the argument's name as the caller spelled it (``cost``, ``name``, ...).
    """

    parameter: str

    def __init__(self, message: str, parameter: str) -> None:
        super().__init__(message)
        self.parameter = parameter

    def __reduce__(self) -> tuple[type[InvalidArgument], tuple[str, str]]:
        return (type(self), (str(self), self.parameter))


class BackendUnavailable(RatekeeperError):
    """The backend could not answer (Redis down, memory backend full, ...)."""


class Timeout(RatekeeperError):
    """A backend call did not finish within its deadline."""


class BackendRejected(RatekeeperError):
    """Redis answered, refusing the call for a reason an operator must fix: an ACL without the
    permission (``NOPERM``), a wrong password (``WRONGPASS``), memory full under ``noeviction``
    (``OOM``), a script error (``WRONGTYPE``, ``ERR``). Never turned into an admission by
    ``fail_open`` or ``fallback``; counted in ``Backend.stats().rejected``.

    ``code`` is the Redis error code.
    """

    code: str

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code

    def __reduce__(self) -> tuple[type[BackendRejected], tuple[str, str]]:
        return (type(self), (str(self), self.code))
