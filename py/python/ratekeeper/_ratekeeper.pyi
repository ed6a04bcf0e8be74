"""
Native core of ratekeeper; import `ratekeeper` instead.
"""

from _typeshed import SupportsGetItem
from asyncio import Future
from collections.abc import Callable, Iterable, Mapping, Sequence
from os import PathLike
from ratekeeper._limiter import Limiter
from typing import Any, Final, Literal, SupportsFloat, SupportsIndex, final
from typing_extensions import disjoint_base

__all__ = ["CORE_VERSION", "Backend", "BackendStats", "Backoff", "CombinedDecision", "Decision", "FleetShedder", "HttpRules", "Lease", "LimitStatus", "LimiterInfo", "ManualClock", "Metrics", "NativeLimiter", "UtilizationConfig", "UtilizationShedder", "unlimited"]

CORE_VERSION: Final[str]
"""
The version of the ratekeeper core this module was built from.
"""

@final
class Backend:
    """
    A place where limiter state lives, shared by every limiter built from it.

    `Backend()` is a new in-process memory backend (the embedded default); `Backend.redis(url)`
    and `Backend.cluster(seeds)` share limits between every process pointing at the same Redis.
    """
    def __new__(cls, /) -> Backend:
        """
        A new in-process memory backend with default settings.
        """
    def __repr__(self, /) -> str: ...
    def aacquire_all(self, /, parts: Sequence[tuple[Limiter, str | None, int] | tuple[Limiter, str | None]], wait_timeout: float | None = None) -> Future[CombinedDecision]:
        """
        asyncio form of `acquire_all`.
        """
    def acheck_all(self, /, parts: Sequence[tuple[Limiter, str | None, int] | tuple[Limiter, str | None]]) -> Future[CombinedDecision]:
        """
        asyncio form of `check_all`.
        """
    def acquire_all(self, /, parts: Sequence[tuple[Limiter, str | None, int] | tuple[Limiter, str | None]], wait_timeout: float | None = None) -> CombinedDecision:
        """
        Like `check_all`, waiting up to `wait_timeout` seconds (default: the shortest of the
        parts' limiters') for a step that admits every part; raises `OverLimit` with the
        combination's `retry_after` when waiting cannot succeed in time.
        """
    def bucket(self, /, name: str, limit: int | str, interval: float | str | None = None) -> Limiter:
        """
        `limit` per fixed window of `interval` (seconds, `"minute"` or a duration with its unit,
        `"1m"`), windows aligned to multiples of `interval` since the epoch; or a rate string in
        place of both: `bucket("api", "100/minute")`.
        """
    def calendar(self, /, name: str, limit: int, period: str, tz: str | None = None, anchor: int | None = None) -> Limiter:
        """
        `limit` per calendar `period` (`"day"`, `"week"` from Monday, `"month"`, `"year"`) in IANA
        time zone `tz` (default UTC); months start on day `anchor` (1-31, clamped to the month's
        last day; default 1).
        """
    def check_all(self, /, parts: Sequence[tuple[Limiter, str | None, int] | tuple[Limiter, str | None]]) -> CombinedDecision:
        """
        Decides every part `(limiter, key, cost)` in one atomic step at one instant: all are
        admitted and consume their cost, or none consumes anything. Never waits. On Redis it is
        one script call; on a Redis Cluster the parts' keys must share one slot (limiters built
        with `"colocate": "tenant"` and keys of one tenant), or `InvalidArgument` names `parts`
        and the limiters. A bad part raises `InvalidArgument` naming it (`parts[1].cost`) before
        anything is written. Leased token buckets and partitions cannot take part.
        """
    def clear_limit(self, /, name: str, key: str | None = None) -> None:
        """
        Removes the override of `name`, or of one `key` of it (nothing if there is none).
        """
    @staticmethod
    def cluster(seeds: Sequence[str], *, prefix: str | None = None, failure_policy: Literal["fail_closed", "fail_open", "fallback"] | None = None, fallback_divisor: int | None = None, deadline: float | None = None, connect_timeout: float | None = None, tls_ca_file: str | PathLike[str] | None = None, tls_ca_data: str | bytes | None = None, tls_cert_file: str | PathLike[str] | None = None, tls_key_file: str | PathLike[str] | None = None, clock: ManualClock | None = None, deny_cache: bool | None = None, deny_cache_max_entries: int | None = None, replica_acks: int | None = None, on_conflict: str | None = None) -> Backend:
        """
        A Redis Cluster reached through any of `seeds` (`redis://host:port` URLs); MOVED and ASK
        redirections are followed. Takes the same options as `Backend.redis`.
        """
    def concurrent(self, /, name: str, limit: int, lock_timeout: float = ..., wait_timeout: float | None = None, *, allow_fallback: bool = ...) -> Limiter:
        """
        At most `limit` holders at once: `acquire` returns a decision whose `lease` must be
        released. A lease older than `lock_timeout` seconds may be reclaimed by a waiter;
        `wait_timeout` is how long `acquire` and `within_limit` wait by default. `limit=1` is a
        distributed mutex.

        While Redis is unreachable a concurrent limiter fails closed, whatever the backend's
        failure policy, unless `allow_fallback=True`: then `fail_open` grants leases that guard
        nothing (fencing token 0) and `fallback` an in-process limiter (a limit per process, its
        fencing tokens increasing within the process only).
        """
    @staticmethod
    def duration_bounds() -> list[float]:
        """
        Upper bounds (seconds) of the buckets of `durations()`.
        """
    def durations(self, /) -> list[tuple[str, str, str, str, list[int], list[int]]]:
        """
        The durations of this process's observed calls, cumulative, as `(name, kind, call,
        outcome, counts, sums_ns)`: `call` is `"check"` or `"wait"`, `counts` the calls per
        bucket of `duration_bounds()` (then the unbounded bucket), `sums_ns` their total
        durations in nanoseconds per bucket. Never the key.
        """
    def flush(self, /) -> None:
        """
        Sends this process's pending metric counts and registrations to Redis now (they are
        sent once a second anyway): call it before a short-lived process exits.
        """
    @property
    def id(self, /) -> int:
        """
        Identifies this backend within the process (what `ratekeeper.otel` keeps its tracers by).
        """
    @property
    def kind(self, /) -> str:
        """
        `"memory"`, `"redis"`, `"cluster"` or `"sentinel"`.
        """
    def leaky(self, /, name: str, size: int, drain: float) -> Limiter:
        """
        A burst of `size`, then one call per `drain / size` seconds; after `drain` seconds idle
        the full burst is back.
        """
    def leased(self, /, name: str, rate: float, capacity: int, chunk: int | None = None, lease_ttl: float = ...) -> Limiter:
        """
        A token bucket (`rate` per second up to `capacity`) shared by the fleet, whose tokens
        this process takes from Redis in leases of up to `chunk` (default capacity / 16) and
        spends in-process; unspent tokens go back on `close()` or at the next lease, or lapse
        `lease_ttl` seconds after they were taken. The fleet admits at most capacity + rate × (span + lease_ttl) over any
        span; leasing ahead may under-use it. On the memory backend: the token bucket.
        """
    def limiter(self, /, name: str, spec: str | Mapping[str, Any]) -> Limiter:
        """
        A limiter built from its spec as data: a dict or a JSON string, durations in seconds,
        e.g. `{"kind": "token_bucket", "rate": 10, "capacity": 20}` (see the README's "Specs as
        data"). A bad field raises `InvalidArgument` naming its path (`rate`, `windows[1]`).
        """
    def limiters(self, /) -> list[LimiterInfo]:
        """
        Every limiter the backend knows, by name: on Redis the registry (any process, any
        language, last 90 days), on memory this process's; each with its live overrides.
        """
    @staticmethod
    def memory(*, max_keys: int | None = None, clock: ManualClock | None = None) -> Backend:
        """
        A new in-process memory backend holding at most `max_keys` keys (when full, expired
        state is dropped first and new keys are refused with `BackendUnavailable` rather than
        resetting live ones). `clock`: a `ManualClock` for tests.
        """
    def memory_len(self, /) -> int | None:
        """
        Keys held by a memory backend (expired ones included until swept); None for Redis.
        """
    def metrics(self, /, *, fleet: bool = False) -> list[tuple[str, str, Metrics]]:
        """
        Every limiter's metrics as `(name, kind, Metrics)`: this process's, or with `fleet`
        every process's (read from Redis).
        """
    def partitions(self, /, name: str, total_rate: float, partitions: int, lease_ttl: float = ..., reserved: int = ..., *, priority: bool = ...) -> Limiter:
        """
        Leased partitions (Azure's rate limiting pattern): `total_rate` units per second split
        into `partitions` equal partitions. On Redis each process leases a fair share of them for
        `lease_ttl` seconds (renewed while it calls) and `check`/`acquire` pace it to the rate it
        holds (20 calls per 200 ms at 100/s, not 100 at once); a dead process's partitions return
        after `lease_ttl`, and `close()` gives them back at once. The first `reserved` partitions
        belong to limiters built with `priority=True`, the rest to the others. On memory the
        process holds every partition of its class.
        """
    def points(self, /, name: str, capacity: int, refill: float) -> Limiter:
        """
        A leaky bucket of `capacity` points refilled completely in `refill` seconds: a call
        gives an estimate as its cost, and `points_used(estimate, actual)` charges or refunds
        the difference.
        """
    def prometheus(self, /, *, fleet: bool = False) -> str:
        """
        Every limiter's metrics in the Prometheus text exposition format (this process's, or
        with `fleet` every process's); `ratekeeper.prometheus.register` adds them to a
        `prometheus_client` registry.
        """
    @staticmethod
    def redis(url: str, *, prefix: str | None = None, failure_policy: Literal["fail_closed", "fail_open", "fallback"] | None = None, fallback_divisor: int | None = None, deadline: float | None = None, connect_timeout: float | None = None, tls_ca_file: str | PathLike[str] | None = None, tls_ca_data: str | bytes | None = None, tls_cert_file: str | PathLike[str] | None = None, tls_key_file: str | PathLike[str] | None = None, clock: ManualClock | None = None, deny_cache: bool | None = None, deny_cache_max_entries: int | None = None, replica_acks: int | None = None, on_conflict: str | None = None) -> Backend:
        """
        A standalone Redis server: `redis://[user:password@]host:port[/db]` or `rediss://…`
        (TLS). Nothing connects until the first call; backends for the same URL share one
        connection set in this process.

        - `prefix`: namespace of every key (default `rk`).
        - `failure_policy`: what a call does when Redis cannot answer within `deadline`:
          `"fail_closed"` (default: raise `BackendUnavailable` or `Timeout`), `"fail_open"`
          (allow), `"fallback"` (an in-memory limiter with `1/fallback_divisor` of the limit).
        - `deadline`: seconds every call may take, answered or not (default 0.2).
        - `connect_timeout`: seconds to establish a connection (default 1).
        - `tls_ca_file` / `tls_ca_data`: the CA that signed the server's certificate (PEM);
          `tls_cert_file` + `tls_key_file`: a client certificate for mutual TLS.
        - `clock`: a `ManualClock` whose time is sent with every call instead of the server's.
        - `deny_cache`: remember refusals in this process (default `False`): a check of at
          least the refused cost is refused from memory until its `retry_after`, with no
          round trip (see `Limiter.with_deny_cache`); `deny_cache_max_entries`: the most it
          holds (default 10,000).
        - `replica_acks`: how many replicas must acknowledge each call's writes (`WAIT`)
          before it admits (default 0: no waiting); too few within `deadline` fail the call as
          unavailable, and `failure_policy` decides (`"fail_open"` then admits).
        - `on_conflict`: what building a limiter whose spec differs from the one live
          processes use under its name does: `"warn"` (default: build it, warn once on
          stderr naming both specs, count it in `metrics().spec_conflicts`, show it in
          `limiters()`), or `"raise"` (read the registry first and raise `InvalidArgument`
          naming `spec`). `set_limit` is how to change a limit fleet-wide.
        """
    @staticmethod
    def sentinel(sentinels: Sequence[str], service: str, *, username: str | None = None, password: str | None = None, db: int | None = None, tls: bool | None = None, sentinel_username: str | None = None, sentinel_password: str | None = None, sentinel_tls: bool | None = None, prefix: str | None = None, failure_policy: Literal["fail_closed", "fail_open", "fallback"] | None = None, fallback_divisor: int | None = None, deadline: float | None = None, connect_timeout: float | None = None, tls_ca_file: str | PathLike[str] | None = None, tls_ca_data: str | bytes | None = None, tls_cert_file: str | PathLike[str] | None = None, tls_key_file: str | PathLike[str] | None = None, clock: ManualClock | None = None, deny_cache: bool | None = None, deny_cache_max_entries: int | None = None, replica_acks: int | None = None, on_conflict: str | None = None) -> Backend:
        """
        A Sentinel-managed primary named `service` (the name in the sentinels' `sentinel
        monitor` line), found through any of `sentinels` (`"host:port"`, port 26379 when left
        out). Every connection asks the sentinels where the primary is and confirms its role
        before any call, so a failover is followed and no call goes to a replica.

        - `username`, `password`, `db`, `tls`: the data nodes' (primary's) credentials,
          database and TLS (its certificates: the `tls_*` options);
        - `sentinel_username`, `sentinel_password`, `sentinel_tls`: the sentinels' own (with
          `sentinel_tls`, they are trusted with the same `tls_*` certificates).

        Takes the same options as `Backend.redis`. The URL form
        `redis+sentinel://[user:password@]host:port[,host:port…]/service[/db]` works
        wherever a Redis URL does.
        """
    def set_limit(self, /, name: str, spec: str | Mapping[str, Any], key: str | None = None) -> None:
        """
        Overrides limiter `name`'s spec (a dict or JSON string, as for `limiter`), or one
        `key`'s, in every process using this backend: each applies it within a fraction of a
        second, keeping the state it has. Raises `InvalidArgument` naming a bad field before
        anything is written.
        """
    def sliding_window(self, /, name: str, limits: Sequence[tuple[float, int] | tuple[float, int, float]]) -> Limiter:
        """
        Several `(duration, limit[, precision])` limits over sub-buckets of `precision` seconds
        (none: a plain fixed window), checked atomically; only admitted calls count.
        """
    def start_observing(self, /) -> None:
        """
        Starts timing this backend's calls for `durations()` (what `ratekeeper.otel` records
        into its duration histograms). Counted: each call needs its `stop_observing()`.
        """
    def start_tracing(self, /) -> None:
        """
        Starts tracing this backend's sync `check` and `acquire` calls: each hands its Redis
        round trips (command, times, server; never a key) and its decision to `ratekeeper.otel`,
        which makes the spans. Counted: each call needs its `stop_tracing()`.
        """
    def stats(self, /) -> BackendStats:
        """
        What the failure policy has done so far (all zero for memory backends).
        """
    def stop_observing(self, /) -> None:
        """
        Ends one `start_observing()`; the durations counted so far stay readable.
        """
    def stop_tracing(self, /) -> None:
        """
        Ends one `start_tracing()`.
        """
    def token_bucket(self, /, name: str, rate: float, capacity: int) -> Limiter:
        """
        Refills `rate` tokens per second up to `capacity`; a call asks for `cost` tokens.
        """
    def unlimited(self, /, name: str | None = None) -> Limiter:
        """
        A limiter that always allows and touches no backend (`ratekeeper.unlimited()` is the
        same without a name).
        """
    def window(self, /, name: str, limit: int | str, interval: float | str | None = None) -> Limiter:
        """
        Exact sliding window: never more than `limit` admissions in any span of `interval`
        (as for `bucket`); or a rate string in place of both: `window("login", "5/minute")`.
        """
    def windows(self, /, name: str, windows: Sequence[tuple[int, float | str]] | str) -> Limiter:
        """
        Several exact sliding windows checked and recorded together, e.g.
        `windows("api", [(25, 5), (300, 60)])` or `windows("api", "25/5s; 300/minute")`;
        decisions carry one `limits` entry per window.
        """

@final
class BackendStats:
    """
    Counts of what a Redis backend's failure policy has done.
    """
    def __repr__(self, /) -> str: ...
    @property
    def config_mismatches(self, /) -> int:
        """
        Calls of a counting limiter that found the key's state last recorded by another
        configuration of the same name (e.g. a rolling deploy changing a limit).
        """
    @property
    def failed(self, /) -> int:
        """
        Calls that failed because Redis failed, under `failure_policy="fail_closed"`.
        """
    @property
    def failed_open(self, /) -> int:
        """
        Calls allowed because Redis failed, under `failure_policy="fail_open"`.
        """
    @property
    def fell_back(self, /) -> int:
        """
        Calls answered by the in-memory fallback, under `failure_policy="fallback"`.
        """
    @property
    def rejected(self, /) -> int:
        """
        Calls Redis refused (`BackendRejected`: a missing permission, a wrong password, memory
        full, a script error), under any policy: none was admitted.
        """

@final
class Backoff:
    """
    How long to wait before running an over-limit job again (Sidekiq's reschedule policy):
    reschedule `attempt` (1 for the first, counted apart from the job's own retries) waits
    `max(retry_after, base * attempt) + uniform(0, jitter)` seconds. After `max_reschedules`
    reschedules, `reschedule_in` returns None: the job should fail with `OverLimit`.

    `delay`, a function `attempt -> seconds`, replaces `base * attempt` (the floor and the
    jitter still apply; pass `jitter=0` to use its result as is). `seed` makes the jitter
    reproducible (tests). Defaults: base 300 s, jitter 300 s, 20 reschedules.
    """
    def __new__(cls, /, *, base: float | None = None, jitter: float | None = None, max_reschedules: int | None = None, delay: Callable[[int], float] | None = None, seed: int | None = None) -> Backoff: ...
    def __repr__(self, /) -> str: ...
    @property
    def base(self, /) -> float:
        """
        The step per reschedule, in seconds (unused when a `delay` function is given).
        """
    @property
    def jitter(self, /) -> float:
        """
        The largest random spread added to each delay, in seconds.
        """
    @property
    def max_reschedules(self, /) -> int:
        """
        How many times a job is rescheduled before it fails with `OverLimit`.
        """
    def reschedule_in(self, /, attempt: int, retry_after: float | None = None) -> float | None:
        """
        Seconds to wait before running the job again for its reschedule `attempt` (1-based),
        when the limiter asked for `retry_after` seconds (`OverLimit.retry_after`); None once
        `attempt > max_reschedules` (the job should fail with `OverLimit`).
        """

@final
class CombinedDecision:
    """
    What `Backend.check_all` decided: every part admitted (and consumed), or none consumed
    anything. Truthy when allowed.
    """
    def __bool__(self, /) -> bool: ...
    def __repr__(self, /) -> str: ...
    @property
    def allowed(self, /) -> bool:
        """
        Whether every part was admitted; when false, no part consumed anything.
        """
    def arelease(self, /) -> Future[None]:
        """
        asyncio form of `release`.
        """
    @property
    def parts(self, /) -> list[Decision]:
        """
        Each part's decision, in the order of the parts. In a refused combination a part may say
        `allowed` (alone it would have passed) but consumed nothing and holds no lease.
        """
    def release(self, /) -> None:
        """
        Releases the lease of every admitted concurrent part.
        """
    @property
    def retry_after(self, /) -> float:
        """
        Seconds until the combination may be admitted: 0 when allowed, else the longest
        `retry_after` of the parts that refused.
        """

@final
class Decision:
    """
    The outcome of `check`, `peek` or `acquire`.

    Durations are exact (to the microsecond) floats of seconds, never negative. A refused call
    consumed nothing. `bool(decision)` is `decision.allowed`.
    """
    def __bool__(self, /) -> bool: ...
    def __repr__(self, /) -> str: ...
    @property
    def allowed(self, /) -> bool:
        """
        Whether the call was admitted (for `peek`: whether a call of cost 1 would be).
        """
    @property
    def decided_at(self, /) -> float:
        """
        When the decision was made, in seconds since the epoch, by the deciding clock (the Redis
        server's for Redis backends); 0.0 for unlimited limiters.
        """
    @property
    def decided_at_us(self, /) -> int:
        """
        `decided_at` in whole microseconds since the epoch (exact).
        """
    def headers(self, /, form: str = "draft-11", policy: str = "default") -> dict[str, str]:
        """
        HTTP rate-limit headers in `form`, draft-11 by default as the HTTP middleware writes
        them (`RateLimit-Policy: "default";q=5`, `RateLimit: "default";r=0;t=10`; `policy` names
        the item, e.g. the limiter's name), or `"draft-7"`, `"draft-6"` (`RateLimit-Limit`,
        `-Remaining`, `-Reset`), `"legacy"` (`X-RateLimit-*`); when refused, `Retry-After`. Times
        are whole seconds, rounded up.
        """
    @property
    def lease(self, /) -> Lease | None:
        """
        The lease a concurrent limiter granted (release it when done), else None.
        """
    @property
    def limit(self, /) -> int:
        """
        The limit that binds: for multi-limit limiters, the one with the least remaining.
        """
    @property
    def limits(self, /) -> list[LimitStatus] | None:
        """
        One status per configured limit, for multi-limit limiters (`windows`, `sliding_window`).
        """
    @property
    def remaining(self, /) -> int:
        """
        What is left of `limit` after this call.
        """
    @property
    def reset_after(self, /) -> float:
        """
        Seconds until the limiter is back to full for this key.
        """
    @property
    def reset_after_us(self, /) -> int:
        """
        `reset_after` in whole microseconds (exact).
        """
    @property
    def retry_after(self, /) -> float:
        """
        Seconds until the same call could succeed; 0.0 when allowed.
        """
    @property
    def retry_after_us(self, /) -> int:
        """
        `retry_after` in whole microseconds (exact).
        """
    @property
    def shadow_refused(self, /) -> bool:
        """
        Shadow mode only: the limiter would have refused this call and admitted it (`allowed`
        is True, nothing was consumed, no lease was granted); `remaining` and `retry_after` say
        what enforcement would have said.
        """

@final
class FleetShedder:
    """
    Fleet usage load shedder: at most `limit` non-critical requests in flight across every
    process sharing `backend`; critical requests bypass it. A request still in flight after
    `lock_timeout` seconds (a crashed worker) gives its slot back.
    """
    def __new__(cls, /, backend: Backend, name: str, limit: int, lock_timeout: float = ...) -> FleetShedder: ...
    def aenter(self, /, critical: bool = False) -> Future[Lease | None]:
        """
        asyncio form of `enter`.
        """
    def aleave(self, /, ticket: Lease | None) -> Future[None]:
        """
        asyncio form of `leave`.
        """
    def enter(self, /, critical: bool = False) -> Lease | None:
        """
        Admits a request: critical requests always pass and hold nothing (None); others take a
        slot (a `Lease`, to give back with `leave`) or raise `Shed`.
        """
    def leave(self, /, ticket: Lease | None) -> None:
        """
        Gives back the slot `enter` returned (None: nothing to give back).
        """

@final
class HttpRules:
    """
    One middleware's HTTP options, validated: the header form, the trusted proxies and the
    header they set, the partition key secret. Raises InvalidArgument naming the bad one (never
    showing the secret).
    """
    def __new__(cls, /, headers: str | None, trusted_proxies: SupportsGetItem[int, str], proxy_header: str, partition_key_secret: bytes | None = None) -> HttpRules:
        """
        `headers`: "draft-11", "draft-7", "draft-6", "legacy" or None; `trusted_proxies`: IP
        addresses or CIDR ranges; `proxy_header`: "X-Forwarded-For" or "Forwarded";
        `partition_key_secret`: at least 16 bytes, draft-11 only.
        """
    def client_key(self, /, peer: str | None, proxy_header_value: str | None) -> str:
        """
        The key of a request from `peer` (None: unknown): its address, IPv6 by /56; behind a
        trusted proxy, the right-most untrusted address of `proxy_header_value` (the proxy
        header's lines joined by commas; None: absent).
        """
    def fields(self, /, reports: SupportsGetItem[int, tuple[str, SupportsFloat | SupportsIndex | None, Any]], key: str) -> list[tuple[str, str]]:
        """
        The rate-limit header fields, as (name, value) pairs, of the decisions in `reports`:
        (policy name, the limiter's window in seconds or None, its Decision) in order; `key` is
        the request's key (draft-11's `pk`).
        """
    @property
    def proxy_header(self, /) -> str:
        """
        The header the trusted proxies set, in lower case: `x-forwarded-for` or `forwarded`.
        """

@final
class Lease:
    """
    A slot held in a concurrent limiter: give it back with `limiter.release(lease)`.

    It remembers the key it was granted for. Rebuild one from its parts (for example in another
    process) with `Lease(id, fencing_token, granted_at_us, key)`.
    """
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self, /) -> int: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __new__(cls, /, id: int, fencing_token: int, granted_at_us: int, key: str | None = None) -> Lease: ...
    def __repr__(self, /) -> str: ...
    @property
    def fencing_token(self, /) -> int:
        """
        Strictly increases with every grant of the same limiter and key: a guarded resource can
        refuse writes carrying a token lower than one it has already seen. Zero for a lease
        granted while failing open, which guards nothing.
        """
    @property
    def granted_at_us(self, /) -> int:
        """
        When it was granted, in microseconds since the epoch, by the deciding clock.
        """
    @property
    def id(self, /) -> int:
        """
        Unique id of this grant (a 128-bit integer).
        """
    @property
    def key(self, /) -> str | None:
        """
        The key it was granted for (None: the limiter's shared key).
        """

@final
class LimitStatus:
    """
    The state of one limit of a multi-limit limiter.
    """
    def __repr__(self, /) -> str: ...
    @property
    def limit(self, /) -> int:
        """
        The limit's size.
        """
    @property
    def remaining(self, /) -> int:
        """
        What is left of it.
        """
    @property
    def reset_after(self, /) -> float:
        """
        Seconds until this limit is back to full.
        """
    @property
    def reset_after_us(self, /) -> int:
        """
        `reset_after` in whole microseconds.
        """
    @property
    def retry_after(self, /) -> float:
        """
        0.0 if this limit admits the call; otherwise seconds until it would.
        """
    @property
    def retry_after_us(self, /) -> int:
        """
        `retry_after` in whole microseconds.
        """
    @property
    def window(self, /) -> float:
        """
        The span this limit covers, in seconds.
        """
    @property
    def window_us(self, /) -> int:
        """
        The span in whole microseconds.
        """

@final
class LimiterInfo:
    """
    A limiter as the registry (Redis) or this process (memory) knows it.
    """
    def __repr__(self, /) -> str: ...
    @property
    def conflict(self, /) -> str | None:
        """
        What the registry reported in the last three minutes about a use of the name it could
        not take (another kind used by a live process: one name, one kind; or a whole-limiter
        override of another kind), or `None`.
        """
    @property
    def first_seen(self, /) -> float:
        """
        When it was first registered (Unix time, seconds).
        """
    @property
    def kind(self, /) -> str:
        """
        Its kind (`"token_bucket"`, `"window"`, ...).
        """
    @property
    def last_seen(self, /) -> float:
        """
        When a process last registered it (Unix time, seconds; renewed once a minute).
        """
    @property
    def name(self, /) -> str:
        """
        The limiter's name.
        """
    @property
    def overrides(self, /) -> list[tuple[str | None, dict[str, Any]]]:
        """
        Live overrides as `(key, spec)` pairs: key `None` for the whole limiter.
        """
    @property
    def processes(self, /) -> int:
        """
        Processes that used it in the last three minutes.
        """
    @property
    def spec(self, /) -> dict[str, Any]:
        """
        The spec it was built with, as data (the last process of its kind to register it wins).
        """
    @property
    def users(self, /) -> list[str]:
        """
        Who used it: language, library version and host, each once.
        """
    @property
    def waiting(self, /) -> bool:
        """
        Whether no process has used the name yet: an override set ahead of a deploy, waiting for
        a first user (`kind` and `spec` are the override's).
        """

@final
class ManualClock:
    """
    A clock that only moves when told to; waiters wake when it passes their deadline. Pass it to
    `Backend.memory(clock=...)` or `Backend.redis(url, clock=...)` (the Redis scripts then take
    time from it instead of the server's `TIME`), or to `UtilizationShedder`.
    """
    def __new__(cls, /, start_us: int | None = None) -> ManualClock:
        """
        A manual clock reading `start_us` microseconds since the epoch (default: now).
        """
    def __repr__(self, /) -> str: ...
    def advance(self, /, seconds: float) -> None:
        """
        Moves the clock forward by `seconds` (truncated to whole microseconds).
        """
    def advance_us(self, /, micros: int) -> None:
        """
        Moves the clock forward by `micros` microseconds.
        """
    @property
    def now(self, /) -> float:
        """
        The clock's reading in seconds since the epoch.
        """
    @property
    def now_us(self, /) -> int:
        """
        The clock's reading in microseconds since the epoch.
        """
    def set_us(self, /, micros: int) -> None:
        """
        Sets the clock to `micros` microseconds since the epoch (it may move backwards).
        """

@final
class Metrics:
    """
    A limiter's metrics: its checks by outcome, their latency on Redis, and for concurrent
    limiters Sidekiq's set; times in seconds.
    """
    def __repr__(self, /) -> str: ...
    @property
    def allowed(self, /) -> int:
        """
        Checks the backend allowed (each attempt of a waiting `acquire` counts).
        """
    @property
    def blocked(self, /) -> int:
        """
        Checks refused by a block (`block_for` after a refusal, or `block` by hand) rather than
        by the limiter's state; also counted in `refused`.
        """
    @property
    def errors(self, /) -> int:
        """
        Checks that failed because Redis failed or refused the call.
        """
    @property
    def failed_open(self, /) -> int:
        """
        Checks allowed because Redis failed, under `failure_policy="fail_open"`.
        """
    @property
    def fell_back(self, /) -> int:
        """
        Checks the in-memory fallback answered, under `failure_policy="fallback"`.
        """
    @property
    def held(self, /) -> int:
        """
        Leases granted (blocks run).
        """
    @property
    def held_time(self, /) -> float:
        """
        Total time leases were held, measured at release.
        """
    @property
    def immediate(self, /) -> int:
        """
        Leases granted without waiting.
        """
    @property
    def latency_buckets(self, /) -> list[tuple[float, int]]:
        """
        The latency histogram: `(upper bound, count)` per bucket (not cumulative), the last
        bound infinite.
        """
    @property
    def latency_count(self, /) -> int:
        """
        Checks that went to Redis and were timed (none on the memory backend).
        """
    @property
    def latency_sum(self, /) -> float:
        """
        Their total client-side latency.
        """
    @property
    def leases_held(self, /) -> int:
        """
        Concurrent limiters: leases this process was granted and has not released (`held -
        released`).
        """
    @property
    def overages(self, /) -> int:
        """
        Leases released after their lock_timeout (holders that ran too long).
        """
    @property
    def paused(self, /) -> int:
        """
        Checks refused by a pause (`pause`, `observe`) rather than by the limiter's state; also
        counted in `refused`.
        """
    @property
    def pauses_clamped(self, /) -> int:
        """
        Pauses (`pause`, `observe`) shortened to the limiter's `max_pause`: a third party asked
        callers to stay away longer than the operator allows.
        """
    @property
    def reclaimed(self, /) -> int:
        """
        Overdue leases reclaimed for a new caller.
        """
    @property
    def refused(self, /) -> int:
        """
        Checks the backend refused.
        """
    @property
    def refused_locally(self, /) -> int:
        """
        Checks a Redis limiter refused from its deny cache, with no round trip; also counted
        in `refused`.
        """
    @property
    def released(self, /) -> int:
        """
        Concurrent limiters: leases given back by a release (including one already reclaimed).
        """
    @property
    def settle_charged(self, /) -> int:
        """
        Units the applied settles charged (calls that cost more than checked).
        """
    @property
    def settle_refunded(self, /) -> int:
        """
        Units the applied settles asked to refund (calls that cost less than checked); a kind's
        rule may give back less.
        """
    @property
    def settles(self, /) -> int:
        """
        Settles applied (`settle`, `asettle`); a repeat of one already applied is not counted.
        """
    @property
    def shadow_refused(self, /) -> int:
        """
        Checks a limiter in shadow mode would have refused and admitted instead (counted in
        neither `allowed` nor `refused`).
        """
    @property
    def spec_conflicts(self, /) -> int:
        """
        Registrations (about one a minute) that found the name used with another spec by a live
        process on the same Redis (one name, two limits; see `on_conflict`).
        """
    @property
    def wait_time(self, /) -> float:
        """
        Total time spent waiting by the leases granted after waiting.
        """
    @property
    def waited(self, /) -> int:
        """
        Leases granted after waiting.
        """

@disjoint_base
class NativeLimiter:
    """
    A rate limiter bound to a backend; build one with a `Backend` method. Safe to share between
    threads, tasks and event loops.

    Every call takes an optional `key` (any string up to 1 KiB: a user id, an IP), so one
    limiter serves many identities. Methods prefixed with `a` are the asyncio forms: they return
    an `asyncio.Future` and never block the event loop.

    This is the native base of `ratekeeper.Limiter` (which adds `within_limit`); every
    constructor returns `ratekeeper.Limiter` instances, made through that class like any Python
    object (see `__new__`).
    """
    def __new__(cls, /, limiter: NativeLimiter) -> NativeLimiter:
        """
        Another handle on `limiter`: the same state, metrics and settings. Constructors return
        `ratekeeper.Limiter` instances already; this is how they are made, and how a subclass of
        `ratekeeper.Limiter` wraps one.
        """
    def __repr__(self, /) -> str: ...
    def _validate(self, /, key: str | None = None, cost: int = ..., wait_timeout: float | None = None) -> None:
        """
        Validates the arguments of a call without making it (`within_limit` uses it to fail
        early, naming the bad argument).
        """
    def aacquire(self, /, key: str | None = None, cost: int = ..., wait_timeout: float | None = None) -> Future[Decision]:
        """
        asyncio form of `acquire`: waits without blocking the event loop.
        """
    def ablock(self, /, duration: float, key: str | None = None) -> Future[float]:
        """
        asyncio form of `block`.
        """
    def acheck(self, /, key: str | None = None, cost: int = ...) -> Future[Decision]:
        """
        asyncio form of `check`.
        """
    def aclose(self, /) -> Future[None]:
        """
        asyncio form of `close`.
        """
    def acquire(self, /, key: str | None = None, cost: int = ..., wait_timeout: float | None = None) -> Decision:
        """
        Consumes `cost`, waiting up to `wait_timeout` seconds (default: the limiter's) for the
        limit to allow it — sleeping exactly until the decision can change, or until a release
        wakes it. Raises `OverLimit` (with `retry_after`) when it cannot succeed in time.
        """
    def aextend(self, /, lease: Lease, key: str | None = None) -> Future[None]:
        """
        asyncio form of `extend`.
        """
    def afleet_metrics(self, /) -> Future[Metrics]:
        """
        asyncio form of `fleet_metrics`.
        """
    @property
    def allows_fallback(self, /) -> bool:
        """
        Whether the backend's `fail_open` / `fallback` policy applies to this limiter: true for
        every limiter but concurrent ones, which fail closed unless built with
        `allow_fallback=True`.
        """
    def aobserve(self, /, status: int, headers: Mapping[str, str] | Iterable[tuple[str, str]], key: str | None = None, max_pause: float | None = None) -> Future[float | None]:
        """
        asyncio form of `observe`.
        """
    def apause(self, /, duration: float, key: str | None = None) -> Future[float]:
        """
        asyncio form of `pause`.
        """
    def apeek(self, /, key: str | None = None) -> Future[Decision]:
        """
        asyncio form of `peek`.
        """
    def apoints_used(self, /, estimate: int, actual: int, key: str | None = None) -> Future[Decision]:
        """
        asyncio form of `points_used`.
        """
    def arelease(self, /, lease: Lease, key: str | None = None) -> Future[None]:
        """
        asyncio form of `release`.
        """
    def areset(self, /, key: str | None = None) -> Future[None]:
        """
        asyncio form of `reset`.
        """
    def aresume(self, /, key: str | None = None) -> Future[bool]:
        """
        asyncio form of `resume`.
        """
    def asettle(self, /, decision: Decision, actual: int) -> Future[Decision]:
        """
        asyncio form of `settle`.
        """
    def aunblock(self, /, key: str | None = None) -> Future[bool]:
        """
        asyncio form of `unblock`.
        """
    def block(self, /, duration: float, key: str | None = None) -> float:
        """
        Blocks `key` for `duration` seconds from now, in every process sharing the backend:
        until it ends (or `unblock`, or `reset`), `check` and `peek` are refused with
        `retry_after` = the block's remaining time (consuming nothing) and `acquire` waits it
        out. The block replaces the one in effect, shorter or longer. A block is not a pause:
        `resume` leaves it alone. Returns the block in effect, in seconds. On Redis the check
        costs no extra round trip. A `duration` that is not a positive number (0, negative, NaN)
        raises `InvalidArgument` naming `duration`.
        """
    @property
    def block_for(self, /) -> float | None:
        """
        How long a refusal blocks the key, in seconds (`None`: a refusal blocks nothing, the
        default; see `with_block_for`).
        """
    @property
    def capacity(self, /) -> int:
        """
        The most one call may cost (the burst, the smallest limit, the slot count; 2^53 for
        `unlimited`): a larger cost is refused on every call.
        """
    def check(self, /, key: str | None = None, cost: int = ...) -> Decision:
        """
        Consumes `cost` for `key` if the limit allows, never waiting. A refused call consumes
        nothing and returns `allowed=False` with the exact `retry_after`. On a concurrent limiter
        an admitted call holds a lease (`decision.lease`) that must be released.
        """
    def close(self, /) -> None:
        """
        Gives back what this process holds: every partition of a partitions limiter (other
        processes may lease them at once instead of after `lease_ttl`), the unspent tokens of a
        leased limiter's leases; a later call leases anew. Does nothing on other limiters.
        """
    @property
    def deny_cache(self, /) -> bool:
        """
        Whether this limiter remembers refusals in process (see `with_deny_cache`).
        """
    def extend(self, /, lease: Lease, key: str | None = None) -> None:
        """
        Renews a concurrent lease for another `lock_timeout` from now. Raises `LeaseLost` if it
        was already reclaimed.
        """
    def fleet_metrics(self, /) -> Metrics:
        """
        The metrics of every process sharing this limiter (on Redis, this process's pending
        counts are flushed first); on memory, the same as `metrics()`.
        """
    @property
    def kind(self, /) -> str:
        """
        The limiter's kind: `concurrent`, `bucket`, `window`, `sliding_window`, `token_bucket`,
        `leaky`, `points` or `unlimited`.
        """
    @property
    def max_pause(self, /) -> float:
        """
        The longest pause `pause` and `observe` write, in seconds (default 3600).
        """
    def metrics(self, /) -> Metrics:
        """
        This process's metrics for this limiter: its checks by outcome (and their latency on
        Redis); concurrent limiters add their leases.
        """
    @property
    def name(self, /) -> str:
        """
        The limiter's name.
        """
    def observe(self, /, status: int, headers: Mapping[str, str] | Iterable[tuple[str, str]], key: str | None = None, max_pause: float | None = None) -> float | None:
        """
        Reads an upstream response's `status` and `headers` (a mapping, e.g. `requests`' or
        `httpx`' headers, or `(name, value)` pairs) and pauses `key` for as long as a 429 or 503
        asks: `Retry-After` (seconds or HTTP-date), else `RateLimit-Reset` when
        `RateLimit-Remaining` is 0, else `X-RateLimit-Reset`. Header names are case-insensitive;
        malformed values are ignored. The pause lasts at most `max_pause` seconds (default: the
        limiter's, one hour unless `with_max_pause` said otherwise). Returns the pause in effect
        in seconds, or `None` when the response asks for none.
        """
    def partitions_held(self, /, key: str | None = None) -> list[tuple[int, int]]:
        """
        The partitions this process holds of a partitions limiter for `key`, as
        `(index, fencing_token)` pairs. Raises `InvalidArgument` naming `limiter` on other kinds.
        """
    def pause(self, /, duration: float, key: str | None = None) -> float:
        """
        Pauses `key` for `duration` seconds, in every process sharing the backend: until it
        ends, `check` and `peek` are refused with `retry_after` = the remaining pause (consuming
        nothing) and `acquire` waits it out. A pause is at most the limiter's `max_pause` (see
        `with_max_pause`). A longer pause extends the one in effect; a shorter one never shortens
        it; `resume` ends it. Returns the pause in effect, in seconds. On Redis the check costs
        no extra round trip. A `duration` that is not a positive number (0, negative, NaN) raises
        `InvalidArgument` naming `duration`.
        """
    def peek(self, /, key: str | None = None) -> Decision:
        """
        What a call of cost 1 would get, consuming nothing.
        """
    def points_used(self, /, estimate: int, actual: int, key: str | None = None) -> Decision:
        """
        Corrects a charge of `estimate` to `actual` (points, token bucket and leaky limiters):
        the difference is charged or refunded. An `actual` above the capacity is charged as debt
        the bucket waits out, at most 16 capacities ahead of now. Each call applies its own
        difference (a `within_limit` permit reports once). Returns the state after the correction.
        """
    @property
    def refundable(self, /) -> bool:
        """
        Whether a charge can be given back (`points_used(cost, 0)`): token bucket, leaky, points.
        """
    def release(self, /, lease: Lease, key: str | None = None) -> None:
        """
        Frees a lease of a concurrent limiter (for the key it was granted for, unless `key` is
        given). Raises `LeaseLost` if it had been reclaimed (it outlived `lock_timeout`) or the
        limiter was reset.
        """
    def reset(self, /, key: str | None = None) -> None:
        """
        Forgets the state of `key` (waiters on a concurrent limiter re-check).
        """
    def resume(self, /, key: str | None = None) -> bool:
        """
        Ends the pause of `key` now, in every process sharing the backend (an operator's
        override of a pause that is wrong or no longer needed); the key's other state is kept.
        Returns whether a pause was in effect.
        """
    def settle(self, /, decision: Decision, actual: int) -> Decision:
        """
        Settles `decision` (an admitted call of this limiter, checked with an estimated cost) to
        its `actual` cost: the difference is charged or refunded exactly once, however often the
        same decision is settled (a retry after a timeout is safe). A charge applies even past
        the limit (later calls wait the debt out); a refund never gives back more than the call
        took, nor to a window that has rolled over. Returns the state after it, as `peek` reports
        it. A decision that cannot be settled (refused; concurrent, unlimited or partitions;
        another limiter's) raises `InvalidArgument` naming `decision`; nothing is written.
        """
    @property
    def shadow(self, /) -> bool:
        """
        Whether the limiter is in shadow mode (a live override of the limiter or of a key decides
        instead, with the `shadow` of its spec).
        """
    @property
    def spec(self, /) -> dict[str, Any]:
        """
        The limiter's spec as data (a dict in the canonical JSON form, durations in seconds):
        `backend.limiter(name, limiter.spec)` builds the same limiter in any language.
        """
    @property
    def spec_json(self, /) -> str:
        """
        The limiter's spec as canonical JSON text (what every language reads back alike).
        """
    def unblock(self, /, key: str | None = None) -> bool:
        """
        Ends the block of `key` now, in every process sharing the backend; the key's other
        state, and a pause, are kept. Returns whether a block was in effect.
        """
    @property
    def wait_timeout(self, /) -> float:
        """
        The default time `acquire` and `within_limit` wait, in seconds.
        """
    @property
    def window(self, /) -> float | None:
        """
        The span the quota covers in seconds, where the kind has one window (the HTTP fields'
        `w`); None otherwise.
        """
    def with_block_for(self, /, block_for: float | None) -> Limiter:
        """
        The same limiter (same state and metrics) whose refusals block the key for `block_for`
        seconds (`None`: they block nothing): after a refused check, every `check`, `peek` and
        `acquire` of this limiter and key, in every process sharing the backend, is refused with
        `retry_after` = the block's remaining time, consuming nothing; the refusal that starts
        the block says so too. A spec carries it as `"block_for": seconds`. A `block_for` that
        is not a positive number of seconds up to 100 years raises `InvalidArgument` naming
        `block_for`.
        """
    def with_deny_cache(self, /, on: bool) -> Limiter:
        """
        The same limiter (same state and metrics) with the deny cache on or off, whatever its
        backend's `deny_cache`: on, a refusal with `retry_after` R is remembered in this
        process, and until R has passed a check of the same key with at least the refused cost
        is refused from memory, with no round trip (counted in `metrics().refused_locally`). A
        `reset`, an `unblock` or a live override seen by this process ends the entries they
        affect. Only Redis limiters of the counting kinds use it.
        """
    def with_max_pause(self, /, max_pause: float) -> Limiter:
        """
        The same limiter (same state and metrics) whose pauses last at most `max_pause` seconds
        (default one hour): a longer pause asked of `pause` or `observe` is shortened to it and
        counted in `metrics().pauses_clamped`. A `max_pause` that is not a positive number of
        seconds up to 100 years raises `InvalidArgument` naming `max_pause`.
        """
    def with_shadow(self, /, shadow: bool) -> Limiter:
        """
        The same limiter (same state and metrics) in shadow mode (`True`) or enforcing
        (`False`). In shadow mode a call the limit would refuse is admitted: `allowed` is True,
        `shadow_refused` is True, nothing is consumed, `remaining` and `retry_after` say what
        enforcement would have said; `acquire` never waits, `within_limit` runs its block, a
        concurrent limiter grants no lease to it. Counted in `metrics().shadow_refused`.
        """
    def with_wait_timeout(self, /, wait_timeout: float) -> Limiter:
        """
        The same limiter with another default wait timeout (seconds; 0: never wait).
        """

@final
class UtilizationConfig:
    """
    Thresholds of a `UtilizationShedder`; the defaults are Stripe's.
    """
    def __new__(cls, /, *, end_of_good: float | None = None, start_of_bad: float | None = None, seconds_before_shedding: float | None = None, seconds_to_shed_all: float | None = None, levels: int | None = None) -> UtilizationConfig: ...
    def __repr__(self, /) -> str: ...
    @property
    def end_of_good(self, /) -> float:
        """
        Below this utilization, shedding decreases (default 0.7).
        """
    @property
    def levels(self, /) -> int:
        """
        Levels of non-critical priority (default 3): priority 0 is critical and never shed,
        `levels` is the least important and goes first.
        """
    @property
    def seconds_before_shedding(self, /) -> float:
        """
        Seconds of full pressure before anything is shed (default 28).
        """
    @property
    def seconds_to_shed_all(self, /) -> float:
        """
        Seconds of full pressure from the first drop until all non-critical traffic is shed
        (default 120).
        """
    @property
    def start_of_bad(self, /) -> float:
        """
        Above this utilization, shedding increases (default 0.8); in between nothing changes.
        """

@final
class UtilizationShedder:
    """
    Worker utilization load shedder, in-process: feed it a utilization signal with `observe`
    (0 = idle, 1 = every worker busy) and `check(priority)` each request. The share dropped
    moves slowly: nothing changes between `end_of_good` and `start_of_bad`; under full pressure
    shedding starts after ~28 s, least important traffic first, and reaches all non-critical
    traffic ~120 s later; it recovers as slowly.
    """
    def __new__(cls, /, config: UtilizationConfig | None = None, *, clock: ManualClock | None = None) -> UtilizationShedder: ...
    def check(self, /, priority: int) -> None:
        """
        Admits a request of `priority` (0 = critical, never shed … `levels` = least important)
        or raises `Shed`.
        """
    def drop_chance(self, /, priority: int) -> float:
        """
        The chance that a request of `priority` is dropped now (0 for priority 0, critical).
        """
    def observe(self, /, utilization: float) -> None:
        """
        Records the current utilization (0..1) and advances the shedding amount to now.
        """
    def shedding(self, /) -> float:
        """
        The share of non-critical traffic being shed now, 0..1.
        """

def unlimited() -> Limiter:
    """
    A limiter that always allows and touches no backend (admins, tests).
    """
