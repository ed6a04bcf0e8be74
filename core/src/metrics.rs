//! Per-limiter metrics: every limiter's checks (allowed, refused, errors, failed open, fell back)
//! and, on Redis, their client-side latency; concurrent limiters add Sidekiq's set (held, held
//! time, immediate, waited, wait time, overages, reclaimed). Readable in-process, and for Redis
//! backends aggregated across processes in one hash per limiter, flushed in batches once a second
//! rather than written per call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

/// Upper bounds of the check-latency histogram's buckets (a last, unbounded bucket follows):
/// from a loopback round trip to a call at its deadline.
pub const LATENCY_BOUNDS: [Duration; 13] = [
    Duration::from_micros(100),
    Duration::from_micros(250),
    Duration::from_micros(500),
    Duration::from_millis(1),
    Duration::from_micros(2_500),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(25),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
];

/// Buckets of the latency histogram: one per bound, then the unbounded one.
const BUCKETS: usize = LATENCY_BOUNDS.len() + 1;

/// Declares the counters, one line each: its field of [`Metrics`] (a count, or a time kept in
/// microseconds), its [`Counter`], its field in the Redis hash and, for a count the exporters
/// show on its own (Prometheus's `ratekeeper_<field>_total`), `shown` and its help text.
/// Generates [`Metrics`], [`Counter`], [`FIELDS`], [`SHOWN`] and the conversions between a
/// snapshot and the counters' values; the latency histogram's buckets follow the counters
/// declared here. A new counter is one line.
macro_rules! counters {
    ($($(#[$doc:meta])* $field:ident: $form:ident = $counter:ident $redis:literal $(shown $help:literal)?;)*) => {
        /// A snapshot of a limiter's metrics.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct Metrics {
            $($(#[$doc])* pub $field: counter_form!($form),)*
            /// Client-side latency of checks that reached Redis: the count in each bucket of
            /// [`LATENCY_BOUNDS`] (a duration falls in the first bucket whose bound it does not
            /// exceed), then in the unbounded bucket. Zero for the memory backend, where a check
            /// takes well under a microsecond and timing it would cost more than the check.
            pub latency_buckets: [u64; BUCKETS],
        }

        /// Which counter (its slot among the counters' values).
        #[derive(Debug, Clone, Copy)]
        pub(crate) enum Counter {
            $($counter,)*
        }

        /// The counters declared, before the latency buckets.
        const DECLARED: usize = [$($redis,)*].len();

        /// The Redis hash fields of the declared counters, in slot order.
        const DECLARED_FIELDS: [&str; DECLARED] = [$($redis,)*];

        /// The counts the exporters show on their own, in declaration order: (Redis field, help,
        /// how it is read from a snapshot).
        pub(crate) const SHOWN: &[(&str, &str, Read)] = &[$($(($redis, $help, |m: &Metrics| m.$field),)?)*];

        /// A snapshot from the counters' values (in [`FIELDS`] order).
        pub(crate) fn from_values(v: [u64; COUNTERS]) -> Metrics {
            Metrics {
                $($field: counter_read!($form, v[Counter::$counter as usize]),)*
                latency_buckets: std::array::from_fn(|i| v[FIRST_BUCKET + i]),
            }
        }

        /// The counters' values of a snapshot (in [`FIELDS`] order).
        fn to_values(m: &Metrics) -> [u64; COUNTERS] {
            let mut v = [0; COUNTERS];
            $(v[Counter::$counter as usize] = counter_value!($form, m.$field);)*
            v[FIRST_BUCKET..].copy_from_slice(&m.latency_buckets);
            v
        }
    };
}

/// The type of a counter's field in [`Metrics`].
macro_rules! counter_form {
    (count) => {
        u64
    };
    (micros) => {
        Duration
    };
}

/// A counter's field from its value.
macro_rules! counter_read {
    (count, $v:expr) => {
        $v
    };
    (micros, $v:expr) => {
        Duration::from_micros($v)
    };
}

/// A counter's value from its field.
macro_rules! counter_value {
    (count, $f:expr) => {
        $f
    };
    (micros, $f:expr) => {
        $f.as_micros() as u64
    };
}

counters! {
    /// Checks the backend allowed (each attempt of a waiting `acquire` counts).
    allowed: count = Allowed "allowed";
    /// Checks the backend refused (over the limit, shed or paused).
    refused: count = Refused "refused";
    /// Checks that failed: Redis unreachable, late or refusing the call under `fail_closed`.
    errors: count = Errors "errors";
    /// Checks allowed because Redis failed under the `fail_open` policy.
    failed_open: count = FailedOpen "failed_open";
    /// Checks the in-memory fallback answered because Redis failed under `fallback`.
    fell_back: count = FellBack "fell_back";
    /// The total of the latencies counted in [`Metrics::latency_buckets`].
    latency_sum: micros = LatencyMicros "latency_us";
    /// Concurrent limiters: leases granted (blocks run).
    held: count = Held "held";
    /// Concurrent limiters: total time leases were held, measured at release.
    held_time: micros = HeldMicros "held_us";
    /// Concurrent limiters: leases granted without waiting.
    immediate: count = Immediate "immediate";
    /// Concurrent limiters: leases granted after waiting.
    waited: count = Waited "waited";
    /// Concurrent limiters: total time spent waiting for the leases granted after waiting.
    wait_time: micros = WaitMicros "wait_us";
    /// Concurrent limiters: leases released after their lock_timeout (including those already
    /// reclaimed): holders that ran too long.
    overages: count = Overages "overages";
    /// Concurrent limiters: overdue leases reclaimed for a new caller; each may have let more
    /// than `limit` run at once.
    reclaimed: count = Reclaimed "reclaimed";
    /// Pauses (`pause`, `observe`) shortened to the limiter's `max_pause`: a third party asked
    /// callers to stay away longer than the operator allows.
    pauses_clamped: count = PausesClamped "pauses_clamped"
        shown "Pauses (pause, observe) shortened to the limiter's max_pause.";
    /// Checks refused by a block (`block_for` after a refusal, or `block` by hand) rather than
    /// by the limiter's state; also counted in [`Metrics::refused`].
    blocked: count = Blocked "blocked"
        shown "Checks refused by a block (block_for after a refusal, or block by hand).";
    /// Checks refused by a pause (`pause`, `observe`) rather than by the limiter's state; also
    /// counted in [`Metrics::refused`]. With [`Metrics::blocked`], the refusals by a hold.
    paused: count = Paused "paused"
        shown "Checks refused by a pause (pause, observe).";
    /// Checks a limiter in shadow mode would have refused and admitted instead (see
    /// [`crate::Limiter::with_shadow`]); they are not in `allowed` nor in `refused`.
    shadow_refused: count = ShadowRefused "shadow_refused";
    /// Checks a Redis limiter refused from its deny cache, with no round trip (see
    /// [`crate::Limiter::with_deny_cache`]); also counted in [`Metrics::refused`].
    refused_locally: count = RefusedLocally "refused_locally"
        shown "Checks a Redis limiter refused from its deny cache, with no round trip.";
    /// Settles applied (see [`crate::Limiter::settle`]); a repeat of one already applied
    /// changes nothing and is not counted.
    settles: count = Settles "settles";
    /// Units the applied settles charged: the sum of `actual − cost` over those that cost more
    /// than checked.
    settle_charged: count = SettleCharged "settle_charged";
    /// Units the applied settles asked to refund: the sum of `cost − actual` over those that
    /// cost less than checked. A kind's rule may give back less (never beyond full, never to a
    /// window that rolled over).
    settle_refunded: count = SettleRefunded "settle_refunded";
    /// Registrations (about one a minute) that found this limiter's name used with another spec
    /// by a live process on the same Redis: one name, two limits (see
    /// [`crate::RedisConfig::on_conflict`]). Each is also said once on stderr.
    spec_conflicts: count = SpecConflicts "spec_conflicts"
        shown "Registrations that found the limiter's name used with another spec by a live process.";
    /// Concurrent limiters: leases given back by a release (one that found its lease already
    /// reclaimed or reset counts too: the caller no longer holds it). [`Metrics::leases_held`]
    /// is `held - released`.
    released: count = Released "released";
}

/// How one count is read from a snapshot.
pub(crate) type Read = fn(&Metrics) -> u64;

/// One outcome of a check: every check that reached a decision or an error has exactly one, so
/// [`OUTCOMES`] partitions [`Metrics::checks`].
#[derive(Clone, Copy)]
pub(crate) struct CheckOutcome {
    /// The counter a check with this outcome adds to.
    pub(crate) counter: Counter,
    /// Its name: OpenTelemetry's `ratekeeper.outcome`, a series of the calls' timings
    /// (`observe.rs`).
    pub(crate) name: &'static str,
    /// Its `outcome` label in Prometheus's `ratekeeper_checks`, where the outcomes of one label
    /// add up.
    pub(crate) label: &'static str,
    /// What it is, for the exporters' help text (the first outcome of a label speaks for it).
    pub(crate) means: &'static str,
    /// How many checks had it.
    pub(crate) read: Read,
}

/// The outcomes of a check, the one place their names are written: the OpenTelemetry
/// instruments (`otel.rs`), the calls' timings (`observe.rs`, whose rows follow this order:
/// admitted and refused first) and Prometheus (`prometheus.rs`) read them from here. A new
/// outcome is a counter (above) and one line here; a refusal with an outcome of its own (also
/// counted in `refused`) has the label `refused`, and `refused` leaves it out.
pub(crate) const OUTCOMES: &[CheckOutcome] = &[
    outcome(Counter::Allowed, "admitted", "allowed", "allowed by the backend", |m| m.allowed),
    // A refusal with an outcome of its own (the deny cache's) is not among these, and is among
    // Prometheus's refusals: its label is `refused`.
    outcome(Counter::Refused, "refused", "refused", "refused by the backend or its deny cache", |m| {
        let own: u64 = OUTCOMES
            .iter()
            .filter(|o| o.label == "refused" && !matches!(o.counter, Counter::Refused))
            .map(|o| (o.read)(m))
            .sum();
        m.refused.saturating_sub(own)
    }),
    outcome(Counter::ShadowRefused, "shadow_refused", "shadow_refused", "admitted by a limiter in shadow mode", |m| {
        m.shadow_refused
    }),
    outcome(Counter::RefusedLocally, "refused_locally", "refused", "refused from the deny cache", |m| {
        m.refused_locally
    }),
    outcome(Counter::FailedOpen, "failed_open", "failed_open", "allowed while Redis failed, under fail_open", |m| {
        m.failed_open
    }),
    outcome(Counter::FellBack, "fallback", "fell_back", "decided by the in-memory fallback while Redis failed", |m| {
        m.fell_back
    }),
    outcome(Counter::Errors, "error", "error", "Redis unreachable, late or refusing the call under fail_closed", |m| {
        m.errors
    }),
];

const fn outcome(
    counter: Counter,
    name: &'static str,
    label: &'static str,
    means: &'static str,
    read: Read,
) -> CheckOutcome {
    CheckOutcome { counter, name, label, means, read }
}

/// The row of [`OUTCOMES`] each counter's checks are, by slot (`u8::MAX`: a counter that is no
/// outcome).
const OUTCOME_ROWS: [u8; DECLARED] = {
    let mut rows = [u8::MAX; DECLARED];
    let mut i = 0;
    while i < OUTCOMES.len() {
        rows[OUTCOMES[i].counter as usize] = i as u8;
        i += 1;
    }
    rows
};

/// The roles of a hold, each with what it is and the checks it refused: OpenTelemetry's
/// `ratekeeper.hold` (see [`LimiterMetrics::add_hold`]).
#[cfg(feature = "otel")]
pub(crate) const HOLDS: [(&str, &str, Read); 2] = [
    ("pause", "a pause", |m| m.paused),
    ("block", "a block: block_for after a refusal, or block by hand", |m| m.blocked),
];

impl Counter {
    /// The row of [`OUTCOMES`] this counter's checks are; `None` for a counter that is no
    /// outcome.
    #[inline]
    pub(crate) fn outcome_row(self) -> Option<usize> {
        match OUTCOME_ROWS[self as usize] {
            u8::MAX => None,
            row => Some(row as usize),
        }
    }

    /// The name of the outcome this counter counts ("" for a counter that is no outcome).
    #[cfg(feature = "otel")]
    pub(crate) fn outcome_name(self) -> &'static str {
        self.outcome_row().map_or("", |row| OUTCOMES[row].name)
    }

    /// The counter of a decision as its caller sees it: admitted, refused, or admitted in its
    /// limiter's place (shadow mode).
    #[cfg(feature = "otel")]
    pub(crate) fn of_decision(decision: &crate::Decision) -> Counter {
        match (decision.allowed, decision.shadow_refused) {
            (true, true) => Counter::ShadowRefused,
            (true, false) => Counter::Allowed,
            (false, _) => Counter::Refused,
        }
    }
}

impl Metrics {
    /// Checks that reached a decision or an error: allowed, refused, shadow-refused, errors,
    /// failed open and fell back (every outcome's count).
    pub fn checks(&self) -> u64 {
        OUTCOMES.iter().map(|o| (o.read)(self)).sum()
    }

    /// Concurrent limiters: the leases this process was granted and has not released yet.
    pub fn leases_held(&self) -> u64 {
        self.held.saturating_sub(self.released)
    }

    /// The number of latencies counted in [`Metrics::latency_buckets`].
    pub fn latency_count(&self) -> u64 {
        self.latency_buckets.iter().sum()
    }

    /// Adds `other`'s counts to these (several limiter objects or processes of one limiter).
    pub fn add(&mut self, other: &Metrics) {
        let (mut mine, theirs) = (to_values(self), to_values(other));
        for (m, t) in mine.iter_mut().zip(theirs) {
            *m += t;
        }
        *self = from_values(mine);
    }
}

/// The number of counters: those declared, then the latency buckets.
pub(crate) const COUNTERS: usize = DECLARED + BUCKETS;

/// The slot of the first latency bucket.
const FIRST_BUCKET: usize = DECLARED;

/// The latency buckets' Redis hash fields.
const BUCKET_FIELDS: [&str; BUCKETS] = [
    "lat_le_100us",
    "lat_le_250us",
    "lat_le_500us",
    "lat_le_1ms",
    "lat_le_2500us",
    "lat_le_5ms",
    "lat_le_10ms",
    "lat_le_25ms",
    "lat_le_50ms",
    "lat_le_100ms",
    "lat_le_250ms",
    "lat_le_500ms",
    "lat_le_1s",
    "lat_inf",
];

/// The field names, in the order of [`Counters`]'s slots (also the Redis hash fields); times in
/// microseconds.
pub(crate) const FIELDS: [&str; COUNTERS] = {
    let mut fields = [""; COUNTERS];
    let mut i = 0;
    while i < COUNTERS {
        fields[i] = if i < DECLARED { DECLARED_FIELDS[i] } else { BUCKET_FIELDS[i - DECLARED] };
        i += 1;
    }
    fields
};

/// One counter per field.
#[derive(Debug)]
pub(crate) struct Counters([AtomicU64; COUNTERS]);

// Written out: the standard library derives `Default` for arrays of at most 32.
impl Default for Counters {
    fn default() -> Self {
        Counters(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl Counters {
    #[inline]
    fn add_slot(&self, slot: usize, n: u64) {
        if n > 0 {
            self.0[slot].fetch_add(n, Ordering::Relaxed);
        }
    }

    fn load(&self) -> [u64; COUNTERS] {
        std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }
}

/// Threads that get a stripe of their own in every limiter's [`Striped`] counts; later threads
/// share the last, atomic one.
pub(crate) const STRIPES: usize = 16;

/// The stripe of the calling thread: its own (0 to `STRIPES - 2`), given once and never reused, or
/// the last one, shared by every thread past the first `STRIPES - 1`.
#[inline(always)]
pub(crate) fn stripe() -> usize {
    use std::cell::Cell;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local!(static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) });
    STRIPE.with(|s| {
        if s.get() == usize::MAX {
            s.set((NEXT.fetch_add(1, Ordering::Relaxed) as usize).min(STRIPES - 1));
        }
        s.get()
    })
}

/// Allowed and refused counts, which every check adds to: one stripe per thread, so a check
/// adds with a plain load and store to a cache line only its thread writes (an atomic
/// read-modify-write costs as much as a quarter of a memory check). The last stripe is shared
/// by the threads past the others and added to atomically.
#[derive(Debug, Default)]
struct Striped([Padded<[AtomicU64; 2]>; STRIPES]);

#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct Padded<T>(pub(crate) T);

impl Striped {
    #[inline(always)]
    fn add(&self, which: usize) {
        self.add_in(stripe(), which);
    }

    /// Adds one to `which` in `stripe`, the calling thread's.
    #[inline(always)]
    fn add_in(&self, stripe: usize, which: usize) {
        let cell = &self.0[stripe].0[which];
        if stripe < STRIPES - 1 {
            // Only this thread ever writes this stripe: no other write can fall in between.
            cell.store(cell.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        } else {
            cell.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn sum(&self, which: usize) -> u64 {
        self.0.iter().map(|s| s.0[which].load(Ordering::Relaxed)).sum()
    }
}

/// One flush of counts to Redis: its sequence number (per [`LimiterMetrics::writer`], from 1)
/// and its deltas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Batch {
    pub(crate) seq: u64,
    pub(crate) deltas: [u64; COUNTERS],
}

/// What has been handed to flushes: the totals already in a batch, and the batch sent and not
/// yet acknowledged.
#[derive(Debug, Default)]
struct Flushed {
    totals: Option<[u64; COUNTERS]>,
    pending: Option<Batch>,
}

/// A limiter's metrics: the in-process totals, and what of them was flushed to Redis.
///
/// Flushes are idempotent: the counts made since the last batch become a [`Batch`] with the next
/// sequence number, and that same batch is sent again until one of its sends is acknowledged
/// (Redis applies each writer's sequence number once), so a flush whose reply was lost is
/// neither lost nor counted twice. Counts made meanwhile wait for the next batch. A check
/// touches only the totals (one relaxed addition), never the flush state.
#[derive(Debug)]
pub(crate) struct LimiterMetrics {
    pub(crate) local: Counters,
    /// Allowed and refused checks (the other counters are in `local`).
    decided: Striped,
    /// Identifies this limiter object's flushes among the objects of the same limiter in its
    /// process (each process keeps its sequences under its own key, [`process_writer`]).
    writer: u64,
    last_seq: AtomicU64,
    flushed: Mutex<Flushed>,
    /// Durations of this object's calls while observed (see `observe.rs`); never flushed.
    pub(crate) timings: crate::observe::Timings,
}

impl Default for LimiterMetrics {
    fn default() -> Self {
        use std::hash::BuildHasher;
        static OBJECTS: AtomicU64 = AtomicU64::new(0);
        let seed = (std::process::id(), OBJECTS.fetch_add(1, Ordering::Relaxed), std::time::SystemTime::now());
        LimiterMetrics {
            local: Counters::default(),
            decided: Striped::default(),
            writer: foldhash::fast::RandomState::default().hash_one(seed),
            last_seq: AtomicU64::new(0),
            flushed: Mutex::new(Flushed::default()),
            timings: Default::default(),
        }
    }
}

/// This process among every writer of metrics to one Redis: its pid and a random number drawn
/// when the process (or a forked child) first flushes, so that pids reused across hosts or
/// after a restart never share a sequence.
pub(crate) fn process_writer() -> String {
    crate::fork::section(|| {
        use std::hash::BuildHasher;
        static WRITER: Mutex<Option<(u32, u64)>> = Mutex::new(None);
        let pid = std::process::id();
        let mut writer = WRITER.lock();
        let nonce = match *writer {
            Some((p, nonce)) if p == pid => nonce,
            _ => {
                let nonce = foldhash::fast::RandomState::default().hash_one((pid, std::time::SystemTime::now()));
                *writer = Some((pid, nonce));
                nonce
            }
        };
        format!("{nonce:016x}-{pid}")
    })
}

impl LimiterMetrics {
    /// The writer id of this limiter object: its field in its process's sequence hash.
    pub(crate) fn writer(&self) -> String {
        format!("{:016x}", self.writer)
    }

    /// The batch to send: the unacknowledged one if any, else the counts made since the last
    /// batch as a new one; `None` when there is nothing to send.
    /// Every counter's value, in [`FIELDS`] order.
    fn totals(&self) -> [u64; COUNTERS] {
        let mut v = self.local.load();
        v[Counter::Allowed as usize] += self.decided.sum(0);
        v[Counter::Refused as usize] += self.decided.sum(1);
        v
    }

    pub(crate) fn next_batch(&self) -> Option<Batch> {
        crate::fork::section(|| {
            let mut flushed = self.flushed.lock();
            if flushed.pending.is_none() {
                let now = self.totals();
                let before = flushed.totals.unwrap_or([0; COUNTERS]);
                let deltas: [u64; COUNTERS] = std::array::from_fn(|i| now[i] - before[i]);
                if deltas.iter().all(|d| *d == 0) {
                    return None;
                }
                flushed.totals = Some(now);
                flushed.pending = Some(Batch { seq: self.last_seq.fetch_add(1, Ordering::Relaxed) + 1, deltas });
            }
            flushed.pending
        })
    }

    /// Whether every count is in Redis: nothing pending, nothing counted since the last batch.
    pub(crate) fn settled(&self) -> bool {
        crate::fork::section(|| {
            let flushed = self.flushed.lock();
            flushed.pending.is_none() && flushed.totals.unwrap_or([0; COUNTERS]) == self.totals()
        })
    }

    /// Whether `batch` holds every count made so far (none came after it was cut): then, at
    /// exit, it is the last batch of this object.
    pub(crate) fn settled_after(&self, batch: &Batch) -> bool {
        crate::fork::section(|| {
            let flushed = self.flushed.lock();
            flushed.pending.is_some_and(|b| b.seq == batch.seq) && flushed.totals == Some(self.totals())
        })
    }

    /// Redis applied (now or before) the batch numbered `seq`.
    pub(crate) fn acknowledge(&self, seq: u64) {
        crate::fork::section(|| {
            let mut flushed = self.flushed.lock();
            if flushed.pending.is_some_and(|b| b.seq == seq) {
                flushed.pending = None;
            }
        })
    }

    /// In a forked child: the counts inherited from the parent are the parent's to flush.
    pub(crate) fn adopt_after_fork(&self) {
        let mut flushed = self.flushed.lock();
        flushed.totals = Some(self.totals());
        flushed.pending = None;
    }

    #[inline]
    pub(crate) fn add(&self, counter: Counter, n: u64) {
        match counter {
            Counter::Allowed if n == 1 => self.decided.add(0),
            Counter::Refused if n == 1 => self.decided.add(1),
            _ => self.local.add_slot(counter as usize, n),
        }
    }

    /// Counts one decided check (the fast path's count: always inlined, one plain add to the
    /// calling thread's stripe).
    #[inline(always)]
    pub(crate) fn add_decided(&self, allowed: bool) {
        self.decided.add(if allowed { 0 } else { 1 });
    }

    /// Counts a decision of the fast path and the `nanos` it took (a timed check): one lookup
    /// of the thread's stripe for both.
    #[inline(always)]
    pub(crate) fn add_decided_timed(&self, allowed: bool, nanos: u64) {
        let stripe = stripe();
        self.decided.add_in(stripe, if allowed { 0 } else { 1 });
        self.timings.add_fast(stripe, allowed, nanos);
    }

    /// Counts a check refused by a hold: a block or a pause (`outcome.held` covers both).
    #[inline]
    pub(crate) fn add_hold(&self, outcome: &crate::engine::Outcome) {
        match (outcome.held || outcome.blocked, outcome.blocked) {
            (true, true) => self.add(Counter::Blocked, 1),
            (true, false) => self.add(Counter::Paused, 1),
            _ => {}
        }
    }

    /// Counts one check's client-side latency.
    pub(crate) fn observe_latency(&self, latency: Duration) {
        let bucket = LATENCY_BOUNDS.iter().position(|bound| latency <= *bound).unwrap_or(LATENCY_BOUNDS.len());
        self.local.add_slot(FIRST_BUCKET + bucket, 1);
        self.local.add_slot(Counter::LatencyMicros as usize, (latency.as_micros() as u64).max(1));
    }

    pub(crate) fn snapshot(&self) -> Metrics {
        from_values(self.totals())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every counter has a Redis field of its own, and each slot reads back into its own field.
    #[test]
    fn every_counter_has_its_own_field_and_slot() {
        let mut names = FIELDS.to_vec();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), COUNTERS, "a Redis field is declared twice");
        let values: [u64; COUNTERS] = std::array::from_fn(|i| i as u64 + 1);
        assert_eq!(to_values(&from_values(values)), values);
    }

    /// The outcomes partition the checks: a local refusal is one of the refusals.
    #[test]
    fn the_outcomes_add_up_to_the_checks() {
        let m = Metrics {
            allowed: 1,
            refused: 20,
            refused_locally: 7,
            shadow_refused: 300,
            errors: 4_000,
            failed_open: 50_000,
            fell_back: 600_000,
            ..Metrics::default()
        };
        assert_eq!(m.checks(), 654_321);
    }

    #[test]
    fn latencies_fall_in_the_first_bucket_whose_bound_they_do_not_exceed() {
        let m = LimiterMetrics::default();
        m.observe_latency(Duration::from_micros(100));
        m.observe_latency(Duration::from_micros(101));
        m.observe_latency(Duration::from_secs(2));
        let s = m.snapshot();
        assert_eq!(s.latency_buckets[0], 1);
        assert_eq!(s.latency_buckets[1], 1);
        assert_eq!(s.latency_buckets[BUCKETS - 1], 1);
        assert_eq!(s.latency_count(), 3);
        assert_eq!(s.latency_sum, Duration::from_micros(2_000_201));
    }

    #[test]
    fn a_batch_holds_the_counts_since_the_last_one_until_acknowledged() {
        let m = LimiterMetrics::default();
        m.add(Counter::Allowed, 2);
        let first = m.next_batch().unwrap();
        m.add(Counter::Allowed, 5);
        assert_eq!(m.next_batch(), Some(first), "unacknowledged: sent again as it was");
        m.acknowledge(first.seq);
        let second = m.next_batch().unwrap();
        assert_eq!((second.seq, second.deltas[Counter::Allowed as usize]), (first.seq + 1, 5));
        m.acknowledge(second.seq);
        assert_eq!(m.next_batch(), None);
        assert_eq!(m.snapshot().allowed, 7);
    }

    #[test]
    fn threads_past_their_own_stripes_still_count_exactly() {
        let m = std::sync::Arc::new(LimiterMetrics::default());
        let threads: Vec<_> = (0..3 * STRIPES)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        m.add(Counter::Allowed, 1);
                        m.add(Counter::Refused, 1);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let s = m.snapshot();
        assert_eq!((s.allowed, s.refused), (3 * STRIPES as u64 * 1000, 3 * STRIPES as u64 * 1000));
    }

    #[test]
    fn snapshots_round_trip_through_values_and_add() {
        let m = LimiterMetrics::default();
        for (i, c) in [Counter::Held, Counter::Refused, Counter::FellBack, Counter::WaitMicros].into_iter().enumerate()
        {
            m.add(c, i as u64 + 1);
        }
        m.observe_latency(Duration::from_millis(3));
        let s = m.snapshot();
        assert_eq!(from_values(to_values(&s)), s);
        let mut twice = s;
        twice.add(&s);
        assert_eq!((twice.refused, twice.fell_back, twice.latency_count()), (4, 6, 2));
    }
}
