//! Every default of the library, in one place. Bindings, the CLI and the spec parser take their
//! defaults from here, so a default is changed once.

use std::time::Duration;

/// The default key prefix (namespace) of a Redis backend: keys are `rk:{…}…`.
pub const DEFAULT_PREFIX: &str = "rk";

/// The default per-call deadline: a call to a dead or hung Redis returns within it.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(200);

/// The default time to establish a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The default time `acquire` waits (Sidekiq's default).
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest pause a limiter writes unless told otherwise (see `Limiter::with_max_pause`):
/// one hour. A third party that really wants callers away for longer answers 429 again then;
/// one hostile or broken header (`Retry-After: 2200000000`) costs an hour, not a lifetime.
pub const DEFAULT_MAX_PAUSE: Duration = Duration::from_secs(3600);

/// The default `lock_timeout` of a concurrent limiter: a lease older than this may be reclaimed
/// (Sidekiq's).
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// The default `lease_ttl` of a leased token bucket: how long a process may sit on tokens it
/// took before they lapse.
pub const DEFAULT_LEASED_LEASE_TTL: Duration = Duration::from_secs(1);

/// The default `lease_ttl` of a partitions limiter (Azure's example: leases of 15 seconds).
pub const DEFAULT_PARTITIONS_LEASE_TTL: Duration = Duration::from_secs(15);

/// Sidekiq's default backoff step per reschedule: 300 s (five minutes).
pub const DEFAULT_BACKOFF_BASE: Duration = Duration::from_secs(300);

/// Sidekiq's default jitter: up to 300 s added to each delay.
pub const DEFAULT_BACKOFF_JITTER: Duration = Duration::from_secs(300);

/// Sidekiq's default number of reschedules before the job fails: 20 (about a day).
pub const DEFAULT_MAX_RESCHEDULES: u32 = 20;

/// The most refusals a Redis backend's deny cache remembers (see
/// [`crate::RedisConfig::deny_cache`]): each entry is a key and a decision, a few hundred bytes.
pub const DEFAULT_DENY_CACHE_MAX_ENTRIES: usize = 10_000;

/// How long after its check a decision can be settled (see [`crate::Limiter::settle`]): a
/// backend remembers each applied settle's id that long, so that a repeat within it applies
/// nothing; a settle of an older decision is refused (invalid argument naming `decision`), as
/// a repeat could no longer be told from a first settle. It bounds the record of applied
/// settles to the settles of the last hour, however long the state it corrects lives.
pub const SETTLE_WINDOW: Duration = Duration::from_secs(3600);

/// Former name of [`DEFAULT_LEASED_LEASE_TTL`].
#[deprecated(note = "renamed DEFAULT_LEASED_LEASE_TTL (it is the leased limiter's lease_ttl)")]
pub const DEFAULT_LEASED_TTL: Duration = DEFAULT_LEASED_LEASE_TTL;

/// Former name of [`DEFAULT_PARTITIONS_LEASE_TTL`].
#[deprecated(note = "renamed DEFAULT_PARTITIONS_LEASE_TTL (it is the partitions limiter's lease_ttl)")]
pub const DEFAULT_LEASE_TTL: Duration = DEFAULT_PARTITIONS_LEASE_TTL;
