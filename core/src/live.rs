//! Live limits and the limiters a process knows: overrides of a limiter's spec, or of one key's,
//! that every process applies without a redeploy; and, per backend, the limiters built from it
//! (what the registry lists, whose metrics are flushed and rendered).
//!
//! An override replaces the spec a limiter decides with, never its state: it applies only to
//! limiters of the override's kind, whose keys (and so whose state) it shares. The check path
//! pays one relaxed atomic load while a name has no override.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::{Mutex, RwLock};

use crate::engine::{Algorithm, Kind, LimiterConfig, LimiterSpec};
use crate::error::{Error, Result};
use crate::metrics::{Counter, LimiterMetrics, Metrics};

/// Who uses a limiter, as the registry shows it: a language and its version, set by each
/// binding when it loads (Rust by default), and this library's version.
static CLIENT: OnceLock<String> = OnceLock::new();

/// Names this process's language in the registry (`"python 3.11.7"`, `"node 20.20.2"`, `"c"`);
/// bindings call it once when they load. Later calls are ignored. Rust programs need not call
/// it: they register as `rust`.
pub fn set_client_language(language: &str) {
    let _ = CLIENT.set(format!("{} ratekeeper/{}", language.trim(), env!("CARGO_PKG_VERSION")));
}

/// The client description the registry stores: language, library version and host. Reading it
/// does not fix the language: a binding that names it later still does.
pub(crate) fn client() -> String {
    let host = gethostname::gethostname();
    match CLIENT.get() {
        Some(language) => format!("{language} on {}", host.to_string_lossy()),
        None => format!("rust ratekeeper/{} on {}", env!("CARGO_PKG_VERSION"), host.to_string_lossy()),
    }
}

/// A limiter as the registry (or, on the memory backend, this process) knows it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LimiterInfo {
    /// The limiter's name.
    pub name: String,
    /// Its kind, as in its spec (`"token_bucket"`, ...).
    pub kind: String,
    /// The canonical JSON spec it was built with (the last process to register it wins).
    pub spec: String,
    /// Live overrides: `(None, spec)` for the whole limiter, `(Some(key), spec)` for one key.
    pub overrides: Vec<(Option<String>, String)>,
    /// Who used it: language, library version and host, each once.
    pub users: Vec<String>,
    /// Processes that used it in the last three minutes.
    pub processes: u64,
    /// When it was first registered.
    pub first_seen: SystemTime,
    /// When a process last registered it (at most once a minute each).
    pub last_seen: SystemTime,
    /// What the registry reported in the last three minutes about a use of the name it could not
    /// take: another kind used by a live process (one name has one kind), or a whole-limiter
    /// override of another kind that does not apply.
    pub conflict: Option<String>,
    /// Whether no process has registered the name yet: an override set ahead of a deploy. Its
    /// `kind` and `spec` are the override's, `users` is empty and the times are the Unix epoch.
    pub waiting: bool,
}

/// The fingerprint of a canonical spec the registry records per process: 64-bit FNV-1a, in
/// hex (specs that differ only in their JSON's spelling are canonical first, so equal).
pub(crate) fn spec_fingerprint(spec_json: &str) -> String {
    let hash =
        spec_json.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("{hash:016x}")
}

/// The one warning (and the text of `OnConflict::Raise`'s error) about a name used with two
/// specs: both specs, who uses each, and the way out.
pub(crate) fn conflict_warning(name: &str, mine: &str, me: &str, other: &str, who: &str) -> String {
    format!(
        "ratekeeper: limiter {name:?} is used with two specs on this Redis: {mine} here ({me}) and {other} by \
         {who}; each process enforces its own number on the same counter. Give both the same spec, \
         or change a limit fleet-wide with set_limit (ratekeeper set {name} SPEC_JSON)"
    )
}

/// An override, compiled for the backend it applies on.
#[derive(Debug)]
pub(crate) struct Compiled {
    /// The override as it was set: its spec and the options of its JSON form, which replace the
    /// limiter's own for the calls it decides (a policy reads its setting here: an option the
    /// override leaves out is off).
    pub(crate) config: LimiterConfig,
    pub(crate) algorithm: Algorithm,
    /// The algorithm scaled for the in-memory fallback, under the `fallback` policy.
    pub(crate) fallback: Option<Algorithm>,
}

impl Compiled {
    /// The override's spec.
    #[inline]
    pub(crate) fn spec(&self) -> &LimiterSpec {
        &self.config.spec
    }

    /// An override of `spec` with no option and no fallback (for tests of what reads overrides).
    #[cfg(test)]
    pub(crate) fn enforcing(spec: LimiterSpec) -> Compiled {
        Compiled { algorithm: spec.compile().expect("a valid spec"), config: spec.into(), fallback: None }
    }
}

/// One name's overrides.
#[derive(Debug, Default)]
struct NameOverrides {
    all: Option<Arc<Compiled>>,
    keys: HashMap<String, Arc<Compiled>>,
}

/// One limiter object of a name (copies made by `with_wait_timeout` share it).
#[derive(Debug)]
struct Member {
    kind: Kind,
    spec_json: String,
    /// Held strongly: a limiter object dropped before the next flush still has its counts (and
    /// its name) to send; the object holds the only other reference while it lives.
    metrics: Arc<LimiterMetrics>,
    joined: Instant,
}

impl Member {
    fn alive(&self) -> bool {
        Arc::strong_count(&self.metrics) > 1
    }
}

/// What a process knows of one limiter name: its overrides and its limiter objects.
#[derive(Debug)]
pub(crate) struct NameState {
    name: String,
    /// Whether any override exists for the name: the check path's only cost without one.
    active: AtomicBool,
    /// Whether the backend flushes and registers (Redis): a dropped limiter object is kept
    /// until its counts are flushed and its name registered. On memory it is let go at once.
    keep_dropped: bool,
    overrides: RwLock<NameOverrides>,
    members: Mutex<Vec<Member>>,
    /// When the registry last heard of this name from this process.
    registered: Mutex<Option<Instant>>,
    /// When this process built the name's first limiter.
    created: SystemTime,
    /// The other specs this process was told live processes use under the name: each is said
    /// once (see [`Live::spec_conflict`]).
    told: Mutex<Vec<String>>,
}

impl NameState {
    /// Whether any override exists for the name.
    #[inline(always)]
    pub(crate) fn has_overrides(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// The override that applies to `key` of a limiter of `kind`, if any.
    #[inline]
    pub(crate) fn lookup(&self, kind: Kind, key: &str) -> Option<Arc<Compiled>> {
        if !self.active.load(Ordering::Relaxed) {
            return None;
        }
        self.lookup_slow(kind, key)
    }

    #[cold]
    fn lookup_slow(&self, kind: Kind, key: &str) -> Option<Arc<Compiled>> {
        let overrides = self.overrides.read();
        let found = overrides.keys.get(key).or(overrides.all.as_ref())?;
        (found.spec().kind() == kind).then(|| found.clone())
    }

    /// Lets go of dropped limiter objects with nothing left to do: on Redis, once their counts
    /// are flushed and the name was registered after they joined.
    fn prune(&self, members: &mut Vec<Member>) {
        let registered = *self.registered.lock();
        members.retain(|m| {
            m.alive() || (self.keep_dropped && (!m.metrics.settled() || !registered.is_some_and(|at| at >= m.joined)))
        });
    }

    /// Records that the limiter object counting into `metrics` now decides with `spec_json` (an
    /// option of its spec was switched): the registry hears of it at the next flush.
    pub(crate) fn respec(&self, metrics: &Arc<LimiterMetrics>, spec_json: String) {
        crate::fork::section(|| {
            let mut members = self.members.lock();
            let mut changed = false;
            for m in members.iter_mut().filter(|m| Arc::ptr_eq(&m.metrics, metrics) && m.spec_json != spec_json) {
                m.spec_json.clone_from(&spec_json);
                changed = true;
            }
            drop(members);
            if changed {
                *self.registered.lock() = None;
            }
        })
    }

    /// The name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// When this process built the name's first limiter.
    pub(crate) fn created(&self) -> SystemTime {
        self.created
    }
}

/// The raw override table: name → (key or `None` for the whole limiter) → canonical spec JSON.
pub(crate) type OverrideTable = HashMap<String, HashMap<Option<String>, String>>;

/// The identity of a table Redis does not hold (never written, or lost).
pub(crate) const MISSING_TABLE: &str = "//";

/// The override table a process holds.
#[derive(Debug, Default)]
struct HeldTable {
    entries: OverrideTable,
    /// The identity of the Redis table it was read from or written to (epoch, version and write
    /// stamp; empty for a missing table and on memory). Any other identity in Redis means the
    /// table changed, whether by a write or by a loss of its history, so it is read again.
    identity: String,
    /// The ticket of the read or write this table comes from (see [`Live::ticket`]).
    ticket: u64,
}

/// A backend's live state (see the module documentation).
pub(crate) struct Live {
    names: Mutex<HashMap<String, Arc<NameState>>>,
    /// The override table this process decides with.
    table: Mutex<HeldTable>,
    /// Tickets order this process's reads and writes of the table by when they were sent: a
    /// read sent before the latest one applied (this process's own write, or a later read) is
    /// older than what the process holds and is dropped. Versions cannot order them: a table
    /// that lost its history counts again from 1.
    tickets: AtomicU64,
    /// The fallback policy's divisor, to compile overrides' fallback limiters.
    fallback_divisor: Option<u32>,
    /// See [`NameState::keep_dropped`].
    keep_dropped: bool,
    /// Whether this backend's calls are timed (see `observe.rs`); every limiter shares it.
    pub(crate) observe: Arc<crate::observe::Switch>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live").field("names", &self.names.lock().len()).finish()
    }
}

/// Registered limiters are renewed this often per process (the registry's TTL is 90 days).
pub(crate) const RENEW_EVERY: Duration = Duration::from_secs(60);

impl Live {
    /// `keep_dropped`: the backend flushes and registers (Redis; see [`NameState::keep_dropped`]).
    pub(crate) fn new(fallback_divisor: Option<u32>, keep_dropped: bool) -> Live {
        Live {
            names: Mutex::default(),
            table: Mutex::default(),
            tickets: AtomicU64::new(1),
            fallback_divisor,
            keep_dropped,
            observe: Arc::default(),
        }
    }

    /// Records a new limiter object of `name`; returns the name's state, which carries its
    /// overrides.
    pub(crate) fn join(&self, name: &str, spec: &LimiterSpec, metrics: &Arc<LimiterMetrics>) -> Arc<NameState> {
        let state = self.observe(name);
        let mut members = state.members.lock();
        state.prune(&mut members);
        members.push(Member {
            kind: spec.kind(),
            spec_json: spec.to_json(),
            metrics: metrics.clone(),
            joined: Instant::now(),
        });
        drop(members);
        state
    }

    /// The live state of `name` (its overrides), without joining it: an operator's reads are
    /// neither registered nor counted in the name's metrics.
    pub(crate) fn observe(&self, name: &str) -> Arc<NameState> {
        let mut names = self.names.lock();
        let state = names.entry(name.to_owned()).or_insert_with(|| {
            let state = Arc::new(NameState {
                name: name.to_owned(),
                active: AtomicBool::new(false),
                keep_dropped: self.keep_dropped,
                overrides: RwLock::default(),
                members: Mutex::default(),
                registered: Mutex::new(None),
                created: SystemTime::now(),
                told: Mutex::default(),
            });
            if let Some(entries) = self.table.lock().entries.get(name) {
                self.install(&state, entries);
            }
            state
        });
        state.clone()
    }

    /// Validates and compiles an override (its spec and options).
    pub(crate) fn compile(&self, config: &LimiterConfig) -> Result<Compiled> {
        let spec = &config.spec;
        if matches!(spec, LimiterSpec::Unlimited) {
            return Err(Error::invalid(
                "spec",
                "an override cannot be unlimited: clear_limit the name, or raise its limit",
            ));
        }
        let algorithm = spec.compile()?;
        let fallback = match self.fallback_divisor {
            Some(divisor) => Some(spec.scaled(divisor).compile()?),
            None => None,
        };
        Ok(Compiled { config: config.clone(), algorithm, fallback })
    }

    /// A ticket for a read of the override table: take it before sending the read, and pass it
    /// to [`Live::replace_table`] with what was read.
    pub(crate) fn ticket(&self) -> u64 {
        self.tickets.fetch_add(1, Ordering::Relaxed)
    }

    /// The identity of the table this process holds (see [`HeldTable::identity`]).
    pub(crate) fn identity(&self) -> String {
        self.table.lock().identity.clone()
    }

    /// Replaces the whole override table with one read from Redis, whose identity is
    /// `identity`, by a read sent with `ticket`; returns whether it changed any override. A read
    /// sent before the table held was read or written is older than it and is dropped.
    pub(crate) fn replace_table(&self, table: OverrideTable, identity: String, ticket: u64) -> bool {
        crate::fork::section(|| {
            let mut held = self.table.lock();
            if ticket < held.ticket {
                return false;
            }
            held.ticket = ticket;
            // A table that was written and is now missing: Redis lost its data (restarted empty,
            // flushed, evicted), and the registry with it; register every name again at the next
            // flush rather than up to a minute later.
            let lost = identity == MISSING_TABLE && !matches!(held.identity.as_str(), "" | MISSING_TABLE);
            held.identity = identity;
            if lost {
                self.names.lock().values().for_each(|state| *state.registered.lock() = None);
            }
            if held.entries == table {
                return false;
            }
            held.entries = table;
            let names = self.names.lock();
            let empty = HashMap::new();
            for (name, state) in names.iter() {
                self.install(state, held.entries.get(name).unwrap_or(&empty));
            }
            true
        })
    }

    /// Sets (`Some(spec)`) or clears one override in this process's table, just written to a
    /// table whose identity is now `identity` (`None` on memory).
    pub(crate) fn set_local(
        &self,
        name: &str,
        key: Option<&str>,
        spec: Option<&LimiterConfig>,
        identity: Option<String>,
    ) {
        let mut held = self.table.lock();
        // Taken under the lock, after the write's reply: every read sent before it is older.
        held.ticket = self.ticket();
        if let Some(identity) = identity {
            held.identity = identity;
        }
        let table = &mut held.entries;
        let entries = table.entry(name.to_owned()).or_default();
        match spec {
            Some(spec) => {
                entries.insert(key.map(str::to_owned), spec.to_json());
            }
            None => {
                entries.remove(&key.map(str::to_owned));
            }
        }
        let entries = entries.clone();
        if entries.is_empty() {
            table.remove(name);
        }
        drop(held);
        if let Some(state) = self.names.lock().get(name) {
            self.install(state, &entries);
        }
    }

    /// Compiles `entries` into `state`; an entry that does not compile (written by hand into
    /// Redis) is skipped: the limiter keeps its own spec for it.
    fn install(&self, state: &NameState, entries: &HashMap<Option<String>, String>) {
        let mut overrides = NameOverrides::default();
        for (key, json) in entries {
            let Ok(compiled) = LimiterConfig::from_json(json).and_then(|config| self.compile(&config)) else {
                continue;
            };
            match key {
                None => overrides.all = Some(Arc::new(compiled)),
                Some(key) => {
                    overrides.keys.insert(key.clone(), Arc::new(compiled));
                }
            }
        }
        let active = overrides.all.is_some() || !overrides.keys.is_empty();
        *state.overrides.write() = overrides;
        state.active.store(active, Ordering::Relaxed);
    }

    /// This process's overrides of `name`, as `(key, spec JSON)`, the whole-limiter one first.
    pub(crate) fn overrides_of(&self, name: &str) -> Vec<(Option<String>, String)> {
        let table = self.table.lock();
        let mut entries: Vec<_> = table
            .entries
            .get(name)
            .map(|e| e.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        entries.sort();
        entries
    }

    /// The names this process holds overrides of.
    pub(crate) fn override_names(&self) -> Vec<String> {
        self.table.lock().entries.keys().cloned().collect()
    }

    /// Every name with a live limiter object: its (kind, spec JSON) and, per kind, the summed
    /// metrics of its objects in this process.
    pub(crate) fn members(&self) -> Vec<NameMembers> {
        crate::fork::section(|| {
            let names: Vec<Arc<NameState>> = self.names.lock().values().cloned().collect();
            let mut out = Vec::new();
            for state in names {
                let mut members = state.members.lock();
                state.prune(&mut members);
                if members.is_empty() {
                    continue;
                }
                let mut per_kind: Vec<(Kind, String, Metrics, Vec<Arc<LimiterMetrics>>)> = Vec::new();
                for m in members.iter() {
                    let metrics = m.metrics.clone();
                    match per_kind.iter_mut().find(|(k, ..)| *k == m.kind) {
                        Some((_, _, sum, all)) => {
                            sum.add(&metrics.snapshot());
                            all.push(metrics);
                        }
                        None => per_kind.push((m.kind, m.spec_json.clone(), metrics.snapshot(), vec![metrics])),
                    }
                }
                drop(members);
                out.push(NameMembers { state, per_kind });
            }
            out.sort_by(|a, b| a.state.name.cmp(&b.state.name));
            out
        })
    }

    /// Names whose registration is due (never sent, or sent over [`RENEW_EVERY`] ago), marked as
    /// sent now; `force` takes every name.
    pub(crate) fn due_registrations(&self, force: bool) -> Vec<(String, Kind, String)> {
        crate::fork::section(|| {
            let now = Instant::now();
            let mut due = Vec::new();
            for entry in self.members() {
                let mut registered = entry.state.registered.lock();
                if force || registered.map_or(true, |at| now.duration_since(at) >= RENEW_EVERY) {
                    *registered = Some(now);
                    // Every kind in use under the name: the registry keeps the first and reports the
                    // others (one name, one kind; see register.lua).
                    for (kind, spec, ..) in &entry.per_kind {
                        due.push((entry.state.name.clone(), *kind, spec.clone()));
                    }
                }
            }
            due
        })
    }

    /// The registry said that a live process (`who`) uses `name` with `other`, not the spec
    /// `mine` this process uses: counts it in the name's `spec_conflicts` and says it once per
    /// other spec on stderr, naming both specs and who uses each (a binding's own logging is not
    /// reachable from the background task that registers).
    pub(crate) fn spec_conflict(&self, name: &str, mine: &str, other: &str, who: &str) {
        let Some(state) = self.names.lock().get(name).cloned() else { return };
        let members = state.members.lock();
        if let Some(m) = members.iter().find(|m| m.spec_json == mine).or(members.first()) {
            m.metrics.add(Counter::SpecConflicts, 1);
        }
        drop(members);
        let mut told = state.told.lock();
        if told.iter().any(|t| t == other) {
            return;
        }
        told.push(other.to_owned());
        drop(told);
        eprintln!("{}", conflict_warning(name, mine, &client(), other, who));
    }

    /// Forgets that `names` were registered, so the next round sends them again (their
    /// registration failed).
    pub(crate) fn registration_failed(&self, names: &[String]) {
        crate::fork::section(|| {
            let map = self.names.lock();
            for name in names {
                if let Some(state) = map.get(name) {
                    *state.registered.lock() = None;
                }
            }
        })
    }
}

/// One name's limiter objects in this process, per kind: (kind, spec JSON, summed metrics,
/// each object's metrics).
pub(crate) struct NameMembers {
    pub(crate) state: Arc<NameState>,
    pub(crate) per_kind: Vec<(Kind, String, Metrics, Vec<Arc<LimiterMetrics>>)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(limit: u64) -> LimiterSpec {
        LimiterSpec::TokenBucket { rate: 1.0, capacity: limit }
    }

    #[test]
    fn an_override_applies_to_its_kind_and_a_key_override_wins() {
        let live = Live::new(None, true);
        let metrics = Arc::new(LimiterMetrics::default());
        let state = live.join("api", &bucket(5), &metrics);
        assert!(state.lookup(Kind::TokenBucket, "a").is_none());
        live.set_local("api", None, Some(&bucket(50).into()), None);
        live.set_local("api", Some("a"), Some(&bucket(500).into()), None);
        let capacity = |key| match state.lookup(Kind::TokenBucket, key).map(|c| c.spec().clone()) {
            Some(LimiterSpec::TokenBucket { capacity, .. }) => Some(capacity),
            _ => None,
        };
        assert_eq!((capacity("a"), capacity("b")), (Some(500), Some(50)));
        assert!(state.lookup(Kind::Leaky, "b").is_none(), "another kind keeps its own spec");
        live.set_local("api", None, None, None);
        assert_eq!((capacity("a"), capacity("b")), (Some(500), None));
        live.set_local("api", Some("a"), None, None);
        assert!(!state.active.load(Ordering::Relaxed));
    }

    #[test]
    fn a_name_built_after_its_override_was_read_gets_it() {
        let live = Live::new(Some(2), true);
        let mut table = OverrideTable::new();
        table.entry("late".into()).or_default().insert(None, bucket(8).to_json());
        assert!(live.replace_table(table.clone(), "e/3/t".into(), live.ticket()));
        assert!(!live.replace_table(table, "e/3/t".into(), live.ticket()), "the same table changes nothing");
        let metrics = Arc::new(LimiterMetrics::default());
        let state = live.join("late", &bucket(1), &metrics);
        let compiled = state.lookup(Kind::TokenBucket, "").unwrap();
        assert_eq!(*compiled.spec(), bucket(8));
        assert!(compiled.fallback.is_some());
    }

    #[test]
    fn a_table_read_before_this_process_last_wrote_is_not_applied() {
        let live = Live::new(None, true);
        let metrics = Arc::new(LimiterMetrics::default());
        let state = live.join("api", &bucket(1), &metrics);
        let sent_before = live.ticket();
        live.set_local("api", Some("k"), Some(&bucket(9).into()), Some("e/5/t5".into()));
        assert!(!live.replace_table(OverrideTable::new(), "e/4/t4".into(), sent_before), "read before the write");
        assert!(state.lookup(Kind::TokenBucket, "k").is_some());
        assert_eq!(live.identity(), "e/5/t5");
        assert!(live.replace_table(OverrideTable::new(), "e/6/t6".into(), live.ticket()), "cleared elsewhere");
        assert!(state.lookup(Kind::TokenBucket, "k").is_none());
    }

    /// Redis lost the table (restart without persistence, FLUSHALL, eviction): a lower version,
    /// or none, is the truth now, and a process that held a higher one follows it.
    #[test]
    fn a_table_that_lost_its_history_replaces_a_later_version() {
        let live = Live::new(None, true);
        let metrics = Arc::new(LimiterMetrics::default());
        let state = live.join("api", &bucket(1), &metrics);
        let mut table = OverrideTable::new();
        table.entry("api".into()).or_default().insert(None, bucket(50).to_json());
        assert!(live.replace_table(table, "e1/50/t50".into(), live.ticket()));
        assert!(live.due_registrations(false).len() == 1 && live.due_registrations(false).is_empty());
        assert!(live.replace_table(OverrideTable::new(), MISSING_TABLE.into(), live.ticket()), "the table is gone");
        assert!(state.lookup(Kind::TokenBucket, "").is_none());
        assert_eq!(live.due_registrations(false).len(), 1, "the registry was lost with it: register again");
        let mut table = OverrideTable::new();
        table.entry("api".into()).or_default().insert(None, bucket(7).to_json());
        assert!(live.replace_table(table, "e2/1/t1".into(), live.ticket()), "a new history at version 1");
        assert_eq!(state.lookup(Kind::TokenBucket, "").unwrap().spec(), &bucket(7));
    }

    #[test]
    fn registrations_are_due_once_until_renewal() {
        let live = Live::new(None, true);
        let metrics = Arc::new(LimiterMetrics::default());
        let _state = live.join("reg", &bucket(1), &metrics);
        assert_eq!(live.due_registrations(false).len(), 1);
        assert!(live.due_registrations(false).is_empty());
        live.registration_failed(&["reg".to_owned()]);
        assert_eq!(live.due_registrations(false).len(), 1);
        drop(metrics);
        assert!(live.due_registrations(true).is_empty(), "a name whose limiters are gone is not registered");
    }
}
