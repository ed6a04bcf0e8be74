"""The worker integrations refuse bad arguments when a task or job is defined (not at its first
run inside a worker), naming the parameter; and run in-process as the job systems do when
called directly."""

from __future__ import annotations

from typing import Any

import pytest

import ratekeeper
from ratekeeper import celery as rk_celery
from ratekeeper import rq as rk_rq

MODULES = [rk_celery, rk_rq]


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"limiter": "stripe"}, "limiter"),
        ({"key": 42}, "key"),
        ({"backoff": 300}, "backoff"),
    ],
)
def test_bad_arguments_are_named(module: Any, kwargs: dict[str, Any], parameter: str) -> None:
    kwargs = dict(kwargs)  # the parameters are shared between the two modules
    limiter = kwargs.pop("limiter", ratekeeper.Backend().bucket("b", 1, 1))
    with pytest.raises(ratekeeper.InvalidArgument) as e:
        module.limited(limiter, **kwargs)
    assert e.value.parameter == parameter


def test_rq_job_called_directly_runs_or_raises_over_limit() -> None:
    # Outside a worker there is no job to re-enqueue: a refusal is the OverLimit itself.
    limiter = ratekeeper.Backend().bucket("direct", 1, 3600)
    seen: list[str] = []

    @rk_rq.limited(limiter, key=lambda name: name)
    def job(name: str) -> str:
        decision = rk_rq.current_decision()
        assert decision is not None and decision.allowed
        seen.append(name)
        return name.upper()

    assert job("a") == "A"
    with pytest.raises(ratekeeper.OverLimit) as e:
        job("a")
    assert e.value.retry_after > 0
    assert job("b") == "B"  # another key, another limit
    assert seen == ["a", "b"]
    assert rk_rq.current_decision() is None


def test_concurrent_limiters_are_held_for_the_whole_job() -> None:
    erp = ratekeeper.Backend().concurrent("erp", 1, wait_timeout=0)
    inner: list[object] = []

    @rk_rq.limited(erp)
    def job() -> None:
        decision = rk_rq.current_decision()
        assert decision is not None and decision.lease is not None
        # While the job runs its slot is taken: a second job is refused.
        with pytest.raises(ratekeeper.OverLimit):
            job()
        inner.append(decision.lease)

    job()
    assert len(inner) == 1
    assert erp.peek().remaining == 1  # released after the job
