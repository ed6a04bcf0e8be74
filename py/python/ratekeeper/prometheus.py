"""ratekeeper's metrics in a ``prometheus_client`` registry, beside an application's own.

``register(backend)`` adds a collector that renders ``backend.prometheus()`` at each scrape and
hands the families, as ``prometheus_client``'s own parser reads them, to the registry: the
application's existing ``/metrics`` endpoint then serves them. Needs the optional extra
``ratekeeper[prometheus]`` (``prometheus_client``).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from ._ratekeeper import Backend

__all__ = ["RatekeeperCollector", "register"]


class RatekeeperCollector(Collector):
    """Collects every limiter's metrics from ``backend`` at each scrape: this process's, or
    with ``fleet`` every process's (read from Redis)."""

    def __init__(self, backend: Backend, *, fleet: bool = False) -> None:
        self._backend = backend
        self._fleet = fleet

    def collect(self) -> Iterator[Metric]:
        yield from text_string_to_metric_families(self._backend.prometheus(fleet=self._fleet))


def register(
    backend: Backend, registry: CollectorRegistry = REGISTRY, *, fleet: bool = False
) -> RatekeeperCollector:
    """Registers a :class:`RatekeeperCollector` of ``backend`` with ``registry`` (the default
    ``prometheus_client`` registry unless given) and returns it (``registry.unregister`` takes
    it back)."""
    collector = RatekeeperCollector(backend, fleet=fleet)
    registry.register(collector)
    return collector
