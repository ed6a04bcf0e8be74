"""The framework-neutral core of ratekeeper's HTTP middleware (``ratekeeper.asgi``,
``ratekeeper.fastapi``, ``ratekeeper.flask``, ``ratekeeper.django``).

No limiter logic lives here: a :class:`Policy` validates the options once, then for each request
asks the limiters (``check``, ``peek``, ``points_used``, ``release``) and turns their decisions into
header fields and, on a refusal, an RFC 9457 problem. The decision sequence is written once, as a
generator of backend calls, and driven either synchronously (Flask, sync Django views) or with
asyncio (ASGI, async Django views), so both paths make exactly the same calls.

The option table, the header forms and the ``count`` rule are documented in
``docs/src/guides/http/index.md``; the Node layer follows the same page.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import logging
import math
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeGuard, TypeVar, Union

from ._ratekeeper import Decision, FleetShedder, Lease, NativeLimiter
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
    "client_key",
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

_HEADER_FORMS = ("draft-11", "draft-7", "draft-6", "legacy")
#: ``proxy_header=`` values: the one header a trusted proxy writes the client's address into.
#: Only that header is read: a proxy that appends to ``X-Forwarded-For`` passes a client's own
#: ``Forwarded`` through untouched (and the reverse), so reading the other would let the client
#: choose its key.
PROXY_HEADERS = ("X-Forwarded-For", "Forwarded")
_COUNTS = ("all", "failures", "successes")
# The kinds whose charge can be given back (`points_used(cost, 0)`): `count` charges them before
# the handler and refunds after; the others are peeked before and charged after.
_REFUNDABLE = frozenset({"token_bucket", "leaky", "points"})
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
                    capacity = _capacity(one.spec)
                    if capacity is not None and cost > capacity:
                        # The core refuses such a call at request time; say so now, not as a 500 per request.
                        raise InvalidArgument(
                            f"invalid argument `cost`: {cost} exceeds the capacity of {one.name!r} ({capacity}); "
                            "no request could ever be admitted",
                            "cost",
                        )
        if count not in _COUNTS:
            raise InvalidArgument(f'invalid argument `count`: must be "all", "failures" or "successes", got {count!r}', "count")
        if headers is not None and headers not in _HEADER_FORMS:
            raise InvalidArgument(
                f'invalid argument `headers`: must be "draft-11", "draft-7", "draft-6", "legacy" or None, got {headers!r}',
                "headers",
            )
        if not isinstance(shadow, bool):
            raise InvalidArgument(f"invalid argument `shadow`: must be True or False, got {shadow!r}", "shadow")
        self.partition_key = _partition_key(partition_key_secret, headers)
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
        self.trusted_proxies = _networks(trusted_proxies)
        self.proxy_header = _proxy_header(proxy_header)
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
        return client_key(self.peer(request), lambda name: self.header(request, name), self.trusted_proxies,
                          self.proxy_header)

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
        pk = self.partition_key(key) if self.partition_key is not None else None
        admission.headers = _rate_headers(self.headers, admission.outcomes, pk)
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
    mode: Literal["check", "refund", "peek"] = "check" if count == "all" else "refund" if kind in _REFUNDABLE else "peek"
    return _Gate(one, None, mode, _window(one.spec))


def _capacity(spec: dict[str, Any]) -> int | None:
    """The most one call can cost on a limiter of this spec (None: no such bound known here)."""
    for field_name in ("capacity", "size", "limit"):
        if isinstance(spec.get(field_name), int):
            return int(spec[field_name])
    if spec.get("windows"):  # [[limit, interval], ...]
        return min(int(w[0]) for w in spec["windows"])
    if spec.get("limits"):  # sliding_window: [[interval, limit(, precision)], ...]
        return min(int(w[1]) for w in spec["limits"])
    return None


def _window(spec: dict[str, Any]) -> float | None:
    """The window (``w``) of a single-limit limiter, in seconds, where its kind has one."""
    kind = spec.get("kind")
    if kind in ("bucket", "window"):
        return float(spec["interval"])
    if kind == "token_bucket":
        return float(spec["capacity"]) / float(spec["rate"])
    if kind == "leaky":
        return float(spec["drain"])
    if kind == "points":
        return float(spec["refill"])
    return None


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
            elif gate.mode != "peek" and gate.limiter.kind in _REFUNDABLE and admission.cost > 0:
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


def _sf_string(value: str) -> str:
    """An RFC 9651 sf-string (printable ASCII; anything else becomes ``?``)."""
    text = "".join(c if 0x20 <= ord(c) < 0x7F else "?" for c in value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class _Status:
    name: str
    limit: int
    remaining: int
    reset: int
    window: float | None
    retry_after: float
    allowed: bool


def _statuses(outcomes: list[_Outcome]) -> list[_Status]:
    out: list[_Status] = []
    for o in outcomes:
        d = o.decision
        if d is None:
            continue
        limits = d.limits
        if limits:
            for s in limits:
                w = s.window
                out.append(_Status(f"{o.gate.name}/{_whole(w)}s", s.limit, s.remaining, _ceil(s.reset_after), w,
                                   s.retry_after, s.retry_after <= 0))
        else:
            out.append(_Status(o.gate.name, d.limit, d.remaining, _ceil(d.reset_after), o.gate.window,
                               d.retry_after, d.allowed))
    return out


def _whole(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


# The draft-11 `pk` parameter: the `RateLimit` field is visible to the client, so it never carries
# the key itself (an IP address, a user id) but a keyed hash of it, the first bytes of
# HMAC-SHA256(secret, key); an unkeyed hash would not hide it (every IPv4 address can be hashed
# in minutes). Node's middleware (node/http/partition-key.js) computes the same value.
_PK_MIN_SECRET_BYTES = 16
_PK_BYTES = 16


def _partition_key(secret: object, headers: object) -> Callable[[str], str] | None:
    """The function from a request's key to its ``pk`` (base64), or None without a secret.
    The error never shows the secret."""
    if secret is None:
        return None
    if isinstance(secret, str):
        raw = secret.encode("utf-8")
    elif isinstance(secret, (bytes, bytearray)):
        raw = bytes(secret)
    else:
        raise InvalidArgument(
            f"invalid argument `partition_key_secret`: must be bytes or a str, got {type(secret).__name__}",
            "partition_key_secret",
        )
    if len(raw) < _PK_MIN_SECRET_BYTES:
        raise InvalidArgument(
            f"invalid argument `partition_key_secret`: must be at least {_PK_MIN_SECRET_BYTES} bytes, got {len(raw)}",
            "partition_key_secret",
        )
    if headers != "draft-11":
        raise InvalidArgument(
            'invalid argument `partition_key_secret`: applies only to headers="draft-11" (pk is a draft-11 parameter)',
            "partition_key_secret",
        )

    def pk(key: str) -> str:
        digest = hmac.new(raw, key.encode("utf-8"), hashlib.sha256).digest()
        return base64.b64encode(digest[:_PK_BYTES]).decode("ascii")

    return pk


def _rate_headers(form: HeaderForm | None, outcomes: list[_Outcome], pk: str | None = None) -> list[tuple[str, str]]:
    if form is None:
        return []
    statuses = _statuses(outcomes)
    if not statuses:
        return []
    if form == "draft-11":
        policy = []
        state = []
        partition = f";pk=:{pk}:" if pk is not None else ""
        for s in statuses:
            w = f";w={max(1, _ceil(s.window))}" if s.window is not None and s.window > 0 else ""
            policy.append(f"{_sf_string(s.name)};q={s.limit}{w}")
            state.append(f"{_sf_string(s.name)};r={s.remaining};t={s.reset}{partition}")
        return [("RateLimit-Policy", ", ".join(policy)), ("RateLimit", ", ".join(state))]
    # One limit for the older forms: the one that refused (longest wait), else the least left.
    refused = [s for s in statuses if not s.allowed]
    binding = max(refused, key=lambda s: s.retry_after) if refused else min(statuses, key=lambda s: s.remaining)
    policy_field = f"{binding.limit}" + (f";w={max(1, _ceil(binding.window))}" if binding.window else "")
    if form == "draft-7":
        return [
            ("RateLimit-Policy", policy_field),
            ("RateLimit", f"limit={binding.limit}, remaining={binding.remaining}, reset={binding.reset}"),
        ]
    if form == "draft-6":
        return [
            ("RateLimit-Policy", policy_field),
            ("RateLimit-Limit", str(binding.limit)),
            ("RateLimit-Remaining", str(binding.remaining)),
            ("RateLimit-Reset", str(binding.reset)),
        ]
    return [
        ("X-RateLimit-Limit", str(binding.limit)),
        ("X-RateLimit-Remaining", str(binding.remaining)),
        ("X-RateLimit-Reset", str(binding.reset)),
    ]


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


# ---- the client address ----------------------------------------------------------------------

_Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
_Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]


def _networks(trusted: Iterable[str] | None) -> tuple[_Network, ...]:
    if trusted is None:
        return ()
    if isinstance(trusted, (str, bytes)) or not isinstance(trusted, Iterable):
        # A lone string would be read character by character: ask for the list it meant.
        raise InvalidArgument(
            f"invalid argument `trusted_proxies`: must be a list of IP addresses or CIDR ranges, got {trusted!r}",
            "trusted_proxies",
        )
    out: list[_Network] = []
    try:
        for item in trusted:
            if not isinstance(item, str):
                raise ValueError(f"{item!r} is not a string")
            out.append(ipaddress.ip_network(item.strip(), strict=False))
    except (TypeError, ValueError) as e:
        raise InvalidArgument(
            f"invalid argument `trusted_proxies`: must be IP addresses or CIDR ranges ({e})", "trusted_proxies"
        ) from None
    return tuple(out)


def _proxy_header(name: object) -> str:
    """The ``proxy_header`` option as the lower-case field name to read."""
    if isinstance(name, str) and name.strip().lower() in (known.lower() for known in PROXY_HEADERS):
        return name.strip().lower()
    raise InvalidArgument(
        f'invalid argument `proxy_header`: must be "X-Forwarded-For" or "Forwarded" (the header your proxy sets), got {name!r}',
        "proxy_header",
    )


def _address(text: str) -> _Address | None:
    text = text.strip().strip('"')
    if text.startswith("["):  # [v6] or [v6]:port
        text = text[1 : text.find("]")] if "]" in text else text[1:]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _forwarded_for(value: str) -> list[str]:
    """The ``for=`` values of a ``Forwarded`` field (RFC 7239), first hop first."""
    out = []
    for element in value.split(","):
        for pair in element.split(";"):
            name, _, val = pair.strip().partition("=")
            if name.strip().lower() == "for":
                out.append(val.strip())
    return out


def _group(address: _Address) -> str:
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, 56), strict=False))
    return str(address)


def client_key(
    peer: str | None,
    header: Callable[[str], str | None],
    trusted: Sequence[_Network],
    proxy_header: str = "x-forwarded-for",
) -> str:
    """The default key: the client address, IPv6 grouped by /56. The proxy header
    (``proxy_header``: ``x-forwarded-for`` or ``forwarded``, every line of it joined in order) is
    read only when the peer is one of ``trusted``, and no other: the client is then the
    right-most address of its chain that is not a trusted proxy."""
    address = _address(peer) if peer else None
    if address is None:
        return peer or "unknown"
    if trusted and any(address in net for net in trusted):
        name = proxy_header.lower()
        value = header(name) or ""
        chain = _forwarded_for(value) if name == "forwarded" else [p for p in value.split(",") if p.strip()]
        for hop in reversed(chain):
            hop_address = _address(hop)
            if hop_address is None:
                break  # an obfuscated or unknown hop: the last address known stands
            address = hop_address
            if not any(hop_address in net for net in trusted):
                break
    return _group(address)
