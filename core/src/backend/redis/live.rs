//! The registry and live limits in Redis, and the one background task per backend that keeps a
//! process in step with them: it polls the override table's identity (one `HMGET`, five times a
//! second) and reads the overrides when it is not the one the process holds, flushes every limiter's metrics once a second, and
//! registers the process's limiters once a minute each. Checks never wait for any of it.
//!
//! Every key lives under one hash tag, `<prefix>:{registry}:…`, so on a Cluster the registry is
//! one slot, read and written by single-slot commands and scripts.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use super::connection::Conn;
use super::RedisBackend;
use crate::engine::{Kind, LimiterConfig};
use crate::error::{Error, Result};
use crate::live::{client, LimiterInfo, OverrideTable};
use crate::metrics::{from_values, Metrics, FIELDS};
use crate::runtime::{forked_since, runtime};

/// How often a process reads the override version: the bound on how late it applies a change.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Metrics flushes and registrations run every this many polls (once a second).
const FLUSH_EVERY_POLLS: u32 = 5;

/// The most users (language, version and host) the registry keeps per limiter: the latest
/// seen. Each deploy on new hosts (pod churn) names new users; older ones are dropped past this.
pub(crate) const MAX_USERS_PER_LIMITER: usize = 32;

/// How long the registry keeps a limiter after its last registration (Sidekiq's metadata TTL).
pub(crate) const REGISTRY_TTL: Duration = Duration::from_secs(90 * 24 * 3600);

const OVERRIDE_SCRIPT: &str = include_str!("operating_lua/override.lua");

/// The overrides hash's fields that hold its identity (see `override.lua`): they start with `:`,
/// which no limiter name holds, so they are kept and lost with the overrides.
const IDENTITY_FIELDS: [&str; 3] = [":epoch", ":version", ":written"];

/// The identity of an overrides table from its identity fields (`crate::live::MISSING_TABLE` for a missing
/// table), in the form `override.lua` returns it.
fn identity_of(fields: [Option<String>; 3]) -> String {
    fields.map(Option::unwrap_or_default).join("/")
}
const REGISTER_SCRIPT: &str = include_str!("operating_lua/register.lua");

/// The registry's keys.
struct RegistryKeys<'a>(&'a str);

impl RegistryKeys<'_> {
    fn key(&self, suffix: &str) -> String {
        format!("{}:{{registry}}:{suffix}", self.0)
    }
    fn names(&self) -> String {
        self.key("names")
    }
    fn overrides(&self) -> String {
        self.key("overrides")
    }
    fn limiter(&self, name: &str) -> String {
        self.key(&format!("limiter:{name}"))
    }
}

/// The overrides hash's field for `name` (whole limiter) or one `key` of it: names hold no `:`,
/// so the first `:` splits them.
fn override_field(name: &str, key: Option<&str>) -> String {
    match key {
        None => name.to_owned(),
        Some(key) => format!("{name}:{key}"),
    }
}

fn split_field(field: &str) -> (String, Option<String>) {
    match field.split_once(':') {
        Some((name, key)) => (name.to_owned(), Some(key.to_owned())),
        None => (field.to_owned(), None),
    }
}

fn millis_to_time(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

impl RedisBackend {
    /// Starts this backend's background task if this process has none yet (the first limiter,
    /// or the first call after a fork: a child inherits no task of its parent's runtime).
    #[inline]
    pub(crate) fn ensure_live_task(self: &Arc<Self>) {
        let known = self.live_task_pid.load(Ordering::Relaxed);
        let (pid, forked) = forked_since(known);
        if forked {
            self.start_live_task(known, pid);
        }
    }

    #[cold]
    fn start_live_task(self: &Arc<Self>, known: u32, pid: u32) {
        if self.live_task_pid.compare_exchange(known, pid, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return;
        }
        if known != 0 {
            // The parent flushes and registers what it counted before the fork.
            for entry in self.live.members() {
                for (.., objects) in &entry.per_kind {
                    objects.iter().for_each(|m| m.adopt_after_fork());
                }
            }
            self.live.registration_failed(
                &self.live.members().iter().map(|m| m.state.name().to_owned()).collect::<Vec<_>>(),
            );
        }
        let backend = Arc::downgrade(self);
        runtime().spawn(async move {
            let mut tick = tokio::time::interval(POLL_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut polls = 0u32;
            // The task's own connection: its reads never queue behind the limiters' calls.
            let mut own = None;
            loop {
                tick.tick().await;
                let Some(this) = backend.upgrade() else { return };
                if this.live_task_pid.load(Ordering::Relaxed) != pid {
                    return;
                }
                // A failed round is retried on the next tick; nothing it read is applied half.
                let _ = this.poll_overrides(&mut own).await;
                polls += 1;
                if polls % FLUSH_EVERY_POLLS == 0 {
                    let _ = this.flush_all(false, false, Some(&mut own)).await;
                }
            }
        });
    }

    /// Reads the override table's identity and, when it is not the one this process holds (a
    /// write, or a table that lost its history), the overrides; the count of leased blocks
    /// (see [`super::leased_blocks`]); and the count of clears (see [`super::cleared`]).
    async fn poll_overrides(&self, own: &mut Option<Conn>) -> Result<()> {
        let keys = RegistryKeys(&self.prefix);
        let mut pipe = redis::pipe();
        pipe.cmd("HMGET").arg(keys.overrides()).arg(&IDENTITY_FIELDS[..]);
        pipe.get(self.blocks_counter_key());
        pipe.get(self.clears_counter_key());
        let (fields, blocks, clears): (Vec<Option<String>>, Option<String>, Option<String>) =
            self.query_via(Some(&mut *own), &pipe).await?;
        let blocks = self.blocks_counted(blocks, own).await.and(self.clears_counted(clears, own).await);
        let [epoch, version, written]: [Option<String>; 3] = fields.try_into().unwrap_or_default();
        if identity_of([epoch, version, written]) == self.live.identity() {
            return blocks;
        }
        self.reload_overrides(Some(own)).await.and(blocks)
    }

    /// Reads the overrides with their identity (one `HGETALL`: no write falls between them) and
    /// applies them unless this process read or wrote the table since the read was sent. On
    /// `own` connection (the background task's) or, with `None`, the shared one.
    pub(crate) async fn reload_overrides(&self, own: Option<&mut Option<Conn>>) -> Result<()> {
        let keys = RegistryKeys(&self.prefix);
        let mut pipe = redis::pipe();
        pipe.hgetall(keys.overrides());
        let ticket = self.live.ticket();
        let (fields,): (HashMap<String, String>,) = self.query_via(own, &pipe).await?;
        let mut table = OverrideTable::new();
        let mut identity: [Option<String>; 3] = Default::default();
        for (field, value) in fields {
            if let Some(at) = IDENTITY_FIELDS.iter().position(|f| *f == field) {
                identity[at] = Some(value);
            } else if !field.starts_with(':') {
                let (name, key) = split_field(&field);
                table.entry(name).or_default().insert(key, value);
            }
        }
        self.live.replace_table(table, identity_of(identity), ticket);
        Ok(())
    }

    /// Flushes every limiter's metrics and sends due registrations (`force`: all of them), on
    /// `own` connection or the shared one.
    /// `last`: the process is exiting (see [`RedisBackend::flush_metrics`]).
    pub(crate) async fn flush_all(&self, force: bool, last: bool, mut own: Option<&mut Option<Conn>>) -> Result<()> {
        let mut first_error = None;
        for entry in self.live.members() {
            for (kind, _, _, objects) in &entry.per_kind {
                for metrics in objects {
                    let flushed =
                        self.flush_metrics(*kind, entry.state.name(), metrics, last, own.as_deref_mut()).await;
                    if let Err(e) = flushed {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        let due = self.live.due_registrations(force);
        if !due.is_empty() {
            if let Err(e) = self.register(&due, own).await {
                self.live.registration_failed(&due.into_iter().map(|(name, ..)| name).collect::<Vec<_>>());
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn register(&self, due: &[(String, Kind, String)], own: Option<&mut Option<Conn>>) -> Result<()> {
        let keys = RegistryKeys(&self.prefix);
        let mut eval = redis::cmd("EVAL");
        eval.arg(REGISTER_SCRIPT).arg(2 + due.len()).arg(keys.names()).arg(keys.overrides());
        for (name, ..) in due {
            eval.arg(keys.limiter(name));
        }
        let process = format!("{}:{}", gethostname::gethostname().to_string_lossy(), std::process::id());
        eval.arg(REGISTRY_TTL.as_millis() as u64).arg(client()).arg(process).arg(MAX_USERS_PER_LIMITER);
        for (name, kind, spec) in due {
            eval.arg(name).arg(kind.as_str()).arg(spec).arg(crate::live::spec_fingerprint(spec));
        }
        let mut pipe = redis::pipe();
        pipe.add_command(eval);
        // The names a live process uses with another spec (see register.lua): said once and
        // counted; this process's limiter keeps deciding with its own spec. (A name held with
        // another kind is recorded in its entry.)
        let (conflicts,): (Vec<String>,) = self.query_via(own, &pipe).await?;
        for c in conflicts.chunks_exact(3) {
            let Some((_, _, mine)) = due.iter().find(|(name, ..)| *name == c[0]) else { continue };
            self.live.spec_conflict(&c[0], mine, &c[1], &c[2]);
        }
        Ok(())
    }

    /// One limiter's registry hash (see register.lua).
    pub(crate) async fn registry_entry(&self, name: &str) -> Result<HashMap<String, String>> {
        let mut pipe = redis::pipe();
        pipe.hgetall(RegistryKeys(&self.prefix).limiter(name));
        let (hash,): (HashMap<String, String>,) = self.query(&pipe).await?;
        Ok(hash)
    }

    /// Writes an override (`Some(spec)`) or clears one, and applies it in this process at once.
    pub(crate) async fn write_override(
        &self,
        name: &str,
        key: Option<&str>,
        spec: Option<&LimiterConfig>,
    ) -> Result<()> {
        let keys = RegistryKeys(&self.prefix);
        let mut eval = redis::cmd("EVAL");
        eval.arg(OVERRIDE_SCRIPT).arg(2).arg(keys.overrides()).arg(keys.limiter(name));
        match spec {
            Some(config) => {
                eval.arg("set").arg(override_field(name, key)).arg(config.to_json()).arg(config.spec.kind().as_str())
            }
            None => eval.arg("clear").arg(override_field(name, key)).arg("").arg(""),
        };
        let mut pipe = redis::pipe();
        pipe.add_command(eval);
        // With `replica_acks`, an override is acknowledged like any write of state.
        let (reply,): (Vec<Value>,) = self.query_acked(&pipe).await?;
        match reply.as_slice() {
            [Value::Int(1), Value::BulkString(identity)] => {
                self.live.set_local(name, key, spec, Some(String::from_utf8_lossy(identity).into_owned()));
                Ok(())
            }
            [Value::Int(0), Value::BulkString(kind)] => Err(Error::invalid(
                "spec",
                format!(
                    "limiter {name:?} is registered as {} on this Redis: a {} override cannot apply to it \
                     (one name, one kind); if two limiters of different kinds use the name {name:?} (two \
                     apps on one Redis), give each its own name or key prefix",
                    String::from_utf8_lossy(kind),
                    spec.map_or("", |c| c.spec.kind().as_str()),
                ),
            )),
            other => Err(Error::BackendRejected {
                code: "ERR".into(),
                message: format!("unexpected reply to an override: {other:?}"),
            }),
        }
    }

    /// Removes `name` from the registry (its entry and its place in the names); see
    /// `Backend::forget_limiter`.
    pub(crate) async fn forget(&self, name: &str) -> Result<bool> {
        let keys = RegistryKeys(&self.prefix);
        let mut pipe = redis::pipe();
        pipe.zrem(keys.names(), name).del(keys.limiter(name));
        let (listed, _deleted): (u64, u64) = self.query(&pipe).await?;
        Ok(listed > 0)
    }

    /// Every limiter in the registry, with its overrides.
    pub(crate) async fn registry(&self) -> Result<Vec<LimiterInfo>> {
        let keys = RegistryKeys(&self.prefix);
        let mut pipe = redis::pipe();
        pipe.zrange(keys.names(), 0, -1).hgetall(keys.overrides());
        let (names, overrides): (Vec<String>, HashMap<String, String>) = self.query(&pipe).await?;
        let mut by_name: HashMap<String, Vec<(Option<String>, String)>> = HashMap::new();
        for (field, spec) in overrides {
            if field.starts_with(':') {
                continue; // the table's identity
            }
            let (name, key) = split_field(&field);
            by_name.entry(name).or_default().push((key, spec));
        }
        let mut pipe = redis::pipe();
        for name in &names {
            pipe.hgetall(keys.limiter(name));
        }
        let hashes: Vec<HashMap<String, String>> =
            if names.is_empty() { Vec::new() } else { self.query(&pipe).await? };
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let mut out = Vec::new();
        for (name, hash) in names.iter().zip(hashes) {
            let Some(kind) = hash.get("kind") else { continue };
            let seen = |field: &str| hash.get(field).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            let mut users: Vec<String> =
                hash.keys().filter_map(|f| f.strip_prefix("user:")).map(str::to_owned).collect();
            users.sort();
            let processes = hash
                .iter()
                .filter(|(f, v)| f.starts_with("proc:") && v.parse::<u64>().is_ok_and(|at| at + 180_000 >= now_ms))
                .count() as u64;
            let mut overrides = by_name.remove(name).unwrap_or_default();
            overrides.sort();
            let conflict = hash.get("conflict").filter(|_| seen("conflict_seen") + 180_000 >= now_ms).cloned();
            let conflict = conflict.or_else(|| super::spec_conflicts::spec_conflict(&hash, now_ms));
            out.push(LimiterInfo {
                conflict,
                waiting: false,
                name: name.clone(),
                kind: kind.clone(),
                spec: hash.get("spec").cloned().unwrap_or_default(),
                overrides,
                users,
                processes,
                first_seen: millis_to_time(seen("first_seen")),
                last_seen: millis_to_time(seen("last_seen")),
            });
        }
        // Overrides of names no process registered: set ahead of a deploy, they wait for a first
        // user, listed with the override's kind and spec.
        for (name, mut overrides) in by_name {
            overrides.sort();
            let Some(spec) =
                overrides.iter().find(|(key, _)| key.is_none()).or(overrides.first()).map(|(_, s)| s.clone())
            else {
                continue;
            };
            let kind = LimiterConfig::from_json(&spec).map(|c| c.spec.kind().as_str().to_owned()).unwrap_or_default();
            out.push(LimiterInfo {
                name,
                kind,
                spec,
                overrides,
                users: Vec::new(),
                processes: 0,
                first_seen: UNIX_EPOCH,
                last_seen: UNIX_EPOCH,
                conflict: None,
                waiting: true,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The fleet's metrics of (`kind`, `name`): what every process flushed (this one's pending
    /// counts are flushed by the caller first).
    pub(crate) async fn fleet_metrics_of(&self, kind: Kind, name: &str) -> Result<Metrics> {
        let mut pipe = redis::pipe();
        pipe.hgetall(self.metrics_key(kind, name));
        let (values,): (HashMap<String, u64>,) = self.query(&pipe).await?;
        Ok(from_values(FIELDS.map(|f| values.get(f).copied().unwrap_or(0))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn override_fields_split_at_the_first_colon() {
        for (name, key) in [("api", None), ("api", Some("tenant:7")), ("api", Some(""))] {
            let field = override_field(name, key);
            assert_eq!(split_field(&field), (name.to_owned(), key.map(str::to_owned)));
        }
    }
}
