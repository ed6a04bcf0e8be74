"""ratekeeper: distributed rate limiting with one Rust core.

Limiters built on the same :class:`Backend` share state; every process pointing at the same
Redis (or Redis Cluster) shares the same limits. ``Backend()`` is the in-process memory backend.

Sync methods (``check``, ``acquire``...) release the GIL around Redis calls; the
``a``-prefixed forms (``acheck``, ``aacquire``...) return asyncio futures and never block the
event loop. ``within_limit`` works as ``with``, ``async with`` and a decorator.
"""

from __future__ import annotations

from ._limiter import Limiter
from ._ratekeeper import (
    CORE_VERSION,
    Backend,
    BackendStats,
    Backoff,
    CombinedDecision,
    Decision,
    FleetShedder,
    Lease,
    LimiterInfo,
    LimitStatus,
    ManualClock,
    Metrics,
    UtilizationConfig,
    UtilizationShedder,
    unlimited,
)
from ._within import Permit, WithinLimit, WithinLimitOrSkip
from .errors import (
    BackendRejected,
    BackendUnavailable,
    InvalidArgument,
    LeaseLost,
    OverLimit,
    RatekeeperError,
    Shed,
    Timeout,
)

__version__ = CORE_VERSION

__all__ = [
    "Backend",
    "BackendRejected",
    "BackendStats",
    "Backoff",
    "BackendUnavailable",
    "CombinedDecision",
    "Decision",
    "FleetShedder",
    "InvalidArgument",
    "Lease",
    "LeaseLost",
    "LimitStatus",
    "Limiter",
    "LimiterInfo",
    "ManualClock",
    "Metrics",
    "OverLimit",
    "Permit",
    "RatekeeperError",
    "Shed",
    "Timeout",
    "UtilizationConfig",
    "UtilizationShedder",
    "WithinLimit",
    "WithinLimitOrSkip",
    "unlimited",
]
