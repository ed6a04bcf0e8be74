"""The framework-neutral core of ratekeeper's HTTP middleware (``ratekeeper.asgi``,
``ratekeeper.fastapi``, ``ratekeeper.flask``, ``ratekeeper.django``).

The rules shared with every language live in the core (``ratekeeper::http``, through
:class:`HttpRules`): the client key, the rate-limit header fields, the partition key, and each
limiter's ``capacity``, ``refundable`` and ``window``. What is here is the sequence of calls: a
:class:`Policy` validates the options once, then for each request asks the limiters (``check``,
``peek``, ``points_used``, ``release``), hands their decisions to the core for the header fields
and, on a refusal, answers an RFC 9457 problem. The decision sequence is written once, as a
generator of backend calls, and driven either synchronously (Flask, sync Django views) or with
asyncio (ASGI, async Django views), so both paths make exactly the same calls.

The option table, the header forms and the ``count`` rule are documented in
``docs/src/guides/http/index.md``; the Node layer follows the same page.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeGuard, TypeVar, Union

from ._ratekeeper import Decision, FleetShedder, HttpRules, Lease, NativeLimiter
from .errors import BackendRejected, BackendUnavailable, InvalidArgument, Shed, Timeout

# Each decision goes on the request's span when OpenTelemetry is there (ratekeeper[otel]).
_annotate: Callable[[NativeLimiter, Decision], None] | None
try:
    from .otel import annotate as _annotate
except ImportError:
    _annotate = None

__all__ = [
    "BACKEND_FAILURE_RETRY_AFTER",
    "Admission",
    "Count",
    "HeaderForm",
    "PROXY_HEADERS",
    "ProxyHeader",
    "LimiterOption",
    "Policy",
    "QUOTA_EXCEEDED",
    "REDUCED_CAPACITY",
    "Refusal",
]

Req = TypeVar("Req")

#: ``headers=`` values; ``None`` sends no rate-limit fields (``Retry-After`` still goes on refusals).
# (Written as a Union of Literals: stubtest reads a bare multi-value Literal alias as a callable.)
HeaderForm = Union[Literal["draft-11"], Literal["draft-7"], Literal["draft-6"], Literal["legacy"]]
#: ``proxy_header=`` values (matched without regard to case).
ProxyHeader = Union[Literal["X-Forwarded-For"], Literal["Forwarded"]]
#: ``count=`` values: which responses are charged (decided after the response).
Count = Union[Literal["all"], Literal["failures"], Literal["successes"]]
#: What ``limiter=`` takes: one limiter or shedder, or several checked together.
LimiterOption = Union[NativeLimiter, FleetShedder, Sequence[Union[NativeLimiter, FleetShedder]]]

#: RFC 9457 problem type of a refusal by a limiter (draft-ietf-httpapi-ratelimit-headers).
QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
#: RFC 9457 problem type of a refusal by a load shedder.
REDUCED_CAPACITY = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
#: ``Retry-After`` (seconds) of a 503 answered because the backend failed closed or a shedder
#: shed: short, since neither says when capacity comes back.
BACKEND_FAILURE_RETRY_AFTER = 1

#: ``proxy_header=`` values: the one header a trusted proxy writes the client's address into.
#: Only that header is read: a proxy that appends to ``X-Forwarded-For`` passes a client's own
#: ``Forwarded`` through untouched (and the reverse), so reading the other would let the client
#: choose its key.
PROXY_HEADERS = ("X-Forwarded-For", "Forwarded")
_COUNTS = ("all", "failures", "successes")
# The name a FleetShedder goes by in `violated-policies` (the binding does not expose its name).
SHEDDER_POLICY = "shedder"

log = logging.getLogger("ratekeeper.http")


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused and the response ratekeeper would answer with; ``on_refused``
    handlers receive it and may build their own response from its parts.

    ``reason`` is ``"quota-exceeded"`` (429), ``"shed"`` (a load shedder, 503) or
    ``"backend-failure"`` (the backend failed closed, 503). ``headers`` holds ``Retry-After`` and
    the rate-limit fields; ``body`` is the RFC 9457 ``application/problem+json`` document."""

    status: int
    reason: Literal["quota-exceeded", "shed", "backend-failure"]
    retry_after: int
    violated_policies: tuple[str, ...]
    headers: tuple[tuple[str, str], ...]
    body: bytes
    content_type: str = "application/problem+json"


@dataclass
class _Gate:
    """One limiter (or shedder) of a policy and how ``count`` applies to it."""

    limiter: NativeLimiter | None
    shedder: FleetShedder | None
    # "check": charge before (count="all", or a concurrent limiter's lease);
    # "refund": charge before, refund after when the response does not count;
    # "peek": peek before, charge after when the response counts.
    mode: Literal["check", "refund", "peek"]
    window: float | None

    @property
    def name(self) -> str:
        return self.limiter.name if self.limiter is not None else SHEDDER_POLICY


@dataclass
class _Outcome:
    gate: _Gate
    decision: Decision | None = None
    ticket: Lease | None = None


@dataclass
class _Call:
    """A backend call the decision sequence asks its driver to make (sync or async)."""

    sync: Callable[..., Any]
    async_: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...]


_Steps = Generator[_Call, Any, Any]


@dataclass
class Admission:
    """What a policy decided for one request: pass or refuse, the header fields to add, and what
    to settle after the response (:meth:`settle` / :meth:`asettle`)."""

    policy: Policy[Any]
    key: str
    cost: int
    outcomes: list[_Outcome] = field(default_factory=list)
    refusal: Refusal | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    settled: bool = False

    @property
    def refused(self) -> bool:
        """Whether the request must be refused (never in shadow mode)."""
        return self.refusal is not None

    def settle(self, status: int) -> None:
        """After the response (``status``): charge, refund or release as ``count`` says."""
        _drive_sync(self._settle_steps(status))

    async def asettle(self, status: int) -> None:
        """asyncio form of :meth:`settle`."""
        await _drive_async(self._settle_steps(status))

    def _settle_steps(self, status: int) -> _Steps:
        if self.settled:
            return
        self.settled = True
        counted = self.policy.counts(status)
        for outcome in self.outcomes:
            gate = outcome.gate
            try:
                if outcome.ticket is not None and gate.shedder is not None:
                    yield _Call(gate.shedder.leave, gate.shedder.aleave, (outcome.ticket,))
                if gate.limiter is None or not _consumed(outcome.decision):
                    continue
                lease = outcome.decision.lease
                if lease is not None:
                    yield _Call(gate.limiter.release, gate.limiter.arelease, (lease, self.key))
                elif gate.mode == "refund" and not counted:
                    yield _Call(gate.limiter.points_used, gate.limiter.apoints_used, (self.cost, 0, self.key))
                elif gate.mode == "peek" and counted:
                    yield _Call(gate.limiter.check, gate.limiter.acheck, (self.key, self.cost))
            except (BackendUnavailable, Timeout, BackendRejected) as e:
                # The response is gone: what could not be settled is logged, never raised.
                log.warning("ratekeeper: could not settle %s after the response: %s", gate.name, e)


class Policy(Generic[Req]):
    """The validated options of one middleware, decorator or dependency, and the decision
    sequence they imply. ``peer`` and ``header`` read the framework's request."""

    def __init__(
        self,
        limiter: LimiterOption,
        *,
        key: Callable[[Req], str] | None,
        cost: int | Callable[[Req], int],
        skip: Callable[[Req], bool] | None,
        count: Count,
        headers: HeaderForm | None,
        on_refused: Callable[[Req, Refusal], Any] | None,
        shadow: bool,
        trusted_proxies: Iterable[str] | None,
        peer: Callable[[Req], str | None],
        header: Callable[[Req, str], str | None],
        partition_key_secret: bytes | str | None = None,
        proxy_header: ProxyHeader = "X-Forwarded-For",
    ) -> None:
        limiters = _limiters(limiter)
        if key is not None and not callable(key):
            raise InvalidArgument(f"invalid argument `key`: must be a function of the request, got {key!r}", "key")
        if skip is not None and not callable(skip):
            raise InvalidArgument(f"invalid argument `skip`: must be a function of the request, got {skip!r}", "skip")
        if on_refused is not None and not callable(on_refused):
            raise InvalidArgument(
                f"invalid argument `on_refused`: must be a function of the request and the refusal, got {on_refused!r}",
                "on_refused",
            )
        if not callable(cost):
            if isinstance(cost, bool) or not isinstance(cost, int) or cost < 1:
                raise InvalidArgument(
                    f"invalid argument `cost`: must be a whole number >= 1 or a function of the request, got {cost!r}",
                    "cost",
                )
            for one in limiters:
                if isinstance(one, NativeLimiter):
                    one._validate(None, cost)
                    capacity = one.capacity
                    if cost > capacity:
                        # The core refuses such a call at request time; say so now, not as a 500 per request.
                        raise InvalidArgument(
                            f"invalid argument `cost`: {cost} exceeds the capacity of {one.name!r} ({capacity}); "
                            "no request could ever be admitted",
                            "cost",
                        )
        if count not in _COUNTS:
            raise InvalidArgument(f'invalid argument `count`: must be "all", "failures" or "successes", got {count!r}', "count")
        if headers is not None and not isinstance(headers, str):
            raise InvalidArgument(
                f'invalid argument `headers`: must be "draft-11", "draft-7", "draft-6", "legacy" or None, got {headers!r}',
                "headers",
            )
        if not isinstance(shadow, bool):
            raise InvalidArgument(f"invalid argument `shadow`: must be True or False, got {shadow!r}", "shadow")
        #: The core's rules: header form, client key, partition key (validated there).
        self.rules = HttpRules(headers, _trusted_proxies(trusted_proxies), _proxy_header(proxy_header),
                               _secret(partition_key_secret))
        self.gates = [_gate(one, count) for one in limiters]
        self.key = key
        self.cost = cost
        self.skip = skip
        self.count: Count = count
        self.headers: HeaderForm | None = headers
        self.on_refused = on_refused
        self.shadow = shadow
        #: Names whose backend is failing closed now: each outage is logged once.
        self._failing: set[str] = set()
        self.peer = peer
        self.header = header
        #: Requests let through although a limit refused them (this process): by this option's
        #: shadow mode, or by a limiter in shadow mode (its decision says ``shadow_refused``).
        self.shadow_refused = 0

    def counts(self, status: int) -> bool:
        """Whether a response with ``status`` is charged under ``count``."""
        if self.count == "all":
            return True
        failed = status >= 400
        return failed if self.count == "failures" else not failed

    def key_of(self, request: Req) -> str:
        """The key ``request`` is counted under (``key``, else the client address)."""
        if self.key is not None:
            return self.key(request)
        rules = self.rules
        return rules.client_key(self.peer(request), self.header(request, rules.proxy_header))

    def admit(self, request: Req) -> Admission | None:
        """Decides ``request`` (None: skipped, nothing touched)."""
        if self.skip is not None and self.skip(request):
            return None
        return _drive_sync(self._admit_steps(request))  # type: ignore[no-any-return]

    async def aadmit(self, request: Req) -> Admission | None:
        """asyncio form of :meth:`admit`."""
        if self.skip is not None and self.skip(request):
            return None
        return await _drive_async(self._admit_steps(request))  # type: ignore[no-any-return]

    def _admit_steps(self, request: Req) -> _Steps:
        key = self.key_of(request)
        cost = self.cost(request) if callable(self.cost) else self.cost
        admission = Admission(self, key, cost)
        refusing: list[_Outcome] = []
        shed = False
        for gate in self.gates:
            outcome = _Outcome(gate)
            try:
                if gate.shedder is not None:
                    outcome.ticket = yield _Call(gate.shedder.enter, gate.shedder.aenter, ())
                    admission.outcomes.append(outcome)
                    continue
                assert gate.limiter is not None
                if gate.mode == "peek":
                    outcome.decision = yield _Call(gate.limiter.peek, gate.limiter.apeek, (key,))
                else:
                    outcome.decision = yield _Call(gate.limiter.check, gate.limiter.acheck, (key, cost))
                self._failing.discard(gate.name)
            except Shed:
                shed = True
                refusing.append(outcome)
            except (BackendUnavailable, Timeout, BackendRejected) as e:
                # The backend failed closed (a fail_open/fallback backend answers instead of
                # raising): a 503 with a short Retry-After, never a 500. Why is said once per
                # outage; the limiter's metrics count each failure (``errors``).
                if gate.name not in self._failing:
                    self._failing.add(gate.name)
                    log.warning(
                        "ratekeeper: %r failed closed, answering 503 until its backend answers "
                        "(each failure counts in the limiter's metrics().errors): %s",
                        gate.name,
                        e,
                    )
                if self.shadow:
                    continue
                yield from _give_back(admission)
                admission.outcomes.clear()
                admission.refusal = _backend_failure()
                return admission
            else:
                admission.outcomes.append(outcome)
                if _annotate is not None and outcome.decision is not None:
                    _annotate(gate.limiter, outcome.decision)
                if outcome.decision is not None and not outcome.decision.allowed:
                    refusing.append(outcome)
            if refusing and not self.shadow:
                break
        admission.headers = self.rules.fields(
            [(o.gate.name, o.gate.window, o.decision) for o in admission.outcomes if o.decision is not None], key
        )
        if not refusing or self.shadow:
            # One rule for both shadow modes (this option's, a limiter's): a request let through
            # although a limit refused it.
            shadowed = refusing + [o for o in admission.outcomes if o.decision is not None and o.decision.shadow_refused]
            if shadowed:
                self.shadow_refused += 1
                log.info(
                    "ratekeeper: shadow mode let through a request refused by %s",
                    ", ".join(o.gate.name for o in shadowed),
                )
            return admission
        yield from _give_back(admission)
        admission.refusal = _refusal(refusing, shed, admission.headers)
        return admission


def _limiters(limiter: object) -> list[NativeLimiter | FleetShedder]:
    if isinstance(limiter, (NativeLimiter, FleetShedder)):
        return [limiter]
    if isinstance(limiter, Sequence) and not isinstance(limiter, (str, bytes)) and limiter:
        items = list(limiter)
        if all(isinstance(one, (NativeLimiter, FleetShedder)) for one in items):
            return items
    raise InvalidArgument(
        f"invalid argument `limiter`: must be a Limiter, a FleetShedder or a non-empty list of them, got {limiter!r}",
        "limiter",
    )


def _gate(one: NativeLimiter | FleetShedder, count: Count) -> _Gate:
    if isinstance(one, FleetShedder):
        if count != "all":
            raise InvalidArgument('invalid argument `count`: a FleetShedder counts requests in flight; use count="all"', "count")
        return _Gate(None, one, "check", None)
    kind = one.kind
    if kind == "concurrent" and count != "all":
        raise InvalidArgument(
            f'invalid argument `count`: the concurrent limiter {one.name!r} counts requests in flight; use count="all"', "count"
        )
    mode: Literal["check", "refund", "peek"] = "check" if count == "all" else "refund" if one.refundable else "peek"
    return _Gate(one, None, mode, one.window)


def _consumed(decision: Decision | None) -> TypeGuard[Decision]:
    """Whether the call behind ``decision`` took something that a settle may give back: an
    admission (a refusal, enforced or shadow, consumed nothing)."""
    return decision is not None and decision.allowed and not decision.shadow_refused


def _give_back(admission: Admission) -> _Steps:
    """Undoes what the limiters before a refusal took, where the kind can: leases and shedder
    tickets are released, refundable charges refunded. Window-like charges stay (documented)."""
    for outcome in admission.outcomes:
        gate = outcome.gate
        try:
            if outcome.ticket is not None and gate.shedder is not None:
                yield _Call(gate.shedder.leave, gate.shedder.aleave, (outcome.ticket,))
                continue
            if gate.limiter is None or not _consumed(outcome.decision):
                continue
            if outcome.decision.lease is not None:
                yield _Call(gate.limiter.release, gate.limiter.arelease, (outcome.decision.lease, admission.key))
            elif gate.mode != "peek" and gate.limiter.refundable and admission.cost > 0:
                yield _Call(gate.limiter.points_used, gate.limiter.apoints_used, (admission.cost, 0, admission.key))
        except (BackendUnavailable, Timeout, BackendRejected) as e:
            log.warning("ratekeeper: could not give back %s: %s", gate.name, e)
    admission.settled = True


def _drive_sync(steps: _Steps) -> Any:
    try:
        call = next(steps)
        while True:
            try:
                result = call.sync(*call.args)
            except Exception as e:  # handed to the sequence, which decides what a failure means
                call = steps.throw(e)
            else:
                call = steps.send(result)
    except StopIteration as stop:
        return stop.value


async def _drive_async(steps: _Steps) -> Any:
    try:
        call = next(steps)
        while True:
            try:
                result = await call.async_(*call.args)
            except Exception as e:
                call = steps.throw(e)
            else:
                call = steps.send(result)
    except StopIteration as stop:
        return stop.value


# ---- header fields ---------------------------------------------------------------------------


def _ceil(seconds: float) -> int:
    return max(0, math.ceil(seconds - 1e-9))


# ---- refusals --------------------------------------------------------------------------------


def _problem(type_: str, title: str, status: int, detail: str, policies: Sequence[str] | None) -> bytes:
    doc: dict[str, Any] = {"type": type_, "title": title, "status": status, "detail": detail}
    if policies is not None:
        doc["violated-policies"] = list(policies)
    return json.dumps(doc).encode()


def _refusal(refusing: list[_Outcome], shed: bool, rate_headers: list[tuple[str, str]]) -> Refusal:
    names = tuple(o.gate.name for o in refusing)
    if shed:
        retry = BACKEND_FAILURE_RETRY_AFTER
        headers = (("Retry-After", str(retry)), *rate_headers)
        body = _problem(REDUCED_CAPACITY, "Service Unavailable", 503, "The service is shedding load; retry shortly.", names)
        return Refusal(503, "shed", retry, names, headers, body)
    waits = [o.decision.retry_after for o in refusing if o.decision is not None]
    retry = max(1, _ceil(max(waits, default=1.0)))
    headers = (("Retry-After", str(retry)), *rate_headers)
    body = _problem(QUOTA_EXCEEDED, "Too Many Requests", 429, f"Rate limit exceeded; retry in {retry} s.", names)
    return Refusal(429, "quota-exceeded", retry, names, headers, body)


def _backend_failure() -> Refusal:
    retry = BACKEND_FAILURE_RETRY_AFTER
    body = _problem("about:blank", "Service Unavailable", 503, "The rate limiter's backend is unavailable.", None)
    return Refusal(503, "backend-failure", retry, (), (("Retry-After", str(retry)),), body)


# ---- options the core validates (their types are checked here, to name them) ----------------


def _trusted_proxies(trusted: Iterable[str] | None) -> list[str]:
    if trusted is None:
        return []
    if isinstance(trusted, (str, bytes)) or not isinstance(trusted, Iterable):
        # A lone string would be read character by character: ask for the list it meant.
        raise InvalidArgument(
            f"invalid argument `trusted_proxies`: must be a list of IP addresses or CIDR ranges, got {trusted!r}",
            "trusted_proxies",
        )
    items = list(trusted)
    for item in items:
        if not isinstance(item, str):
            raise InvalidArgument(
                f"invalid argument `trusted_proxies`: must be IP addresses or CIDR ranges, got {item!r}", "trusted_proxies"
            )
    return items


def _proxy_header(name: object) -> str:
    if isinstance(name, str):
        return name
    raise InvalidArgument(
        f'invalid argument `proxy_header`: must be "X-Forwarded-For" or "Forwarded" (the header your proxy sets), got {name!r}',
        "proxy_header",
    )


def _secret(secret: object) -> bytes | None:
    """The partition key secret as bytes (the core checks its length; no error shows it)."""
    if secret is None or isinstance(secret, bytes):
        return secret
    if isinstance(secret, str):
        return secret.encode("utf-8")
    if isinstance(secret, bytearray):
        return bytes(secret)
    raise InvalidArgument(
        f"invalid argument `partition_key_secret`: must be bytes or a str, got {type(secret).__name__}",
        "partition_key_secret",
    )
