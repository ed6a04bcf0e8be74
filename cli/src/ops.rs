//! The operator's views of a backend, shared by the commands (`limits`, `inspect`, `reset`, ...)
//! and the HTTP server: the registry with fleet counts, one key's state, and the failures they
//! report.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ratekeeper::{Backend, Error, Kind, LimiterInfo, RedisConfig};
use serde::Serialize;
use serde_json::Value;

use crate::cli::BackendArgs;

/// What an operator command can fail with; printed as `error: ...` with exit code 1.
#[derive(Debug)]
pub enum Failure {
    /// The library refused or failed (bad spec, Redis down, ...); names the parameter when one
    /// is at fault.
    Ratekeeper(Error),
    /// No Redis was given: the registry and overrides only exist on Redis.
    NoBackend,
    /// The registry has no limiter of this name.
    UnknownLimiter(String),
    /// Something outside the library failed (spawning the command, binding the port, ...).
    Io(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Ratekeeper(e) => write!(f, "{e}"),
            Failure::NoBackend => {
                write!(f, "no Redis to operate on: give `--redis URL` or `--cluster SEED`, or set RATEKEEPER_REDIS_URL")
            }
            Failure::UnknownLimiter(name) => write!(
                f,
                "invalid argument `name`: no limiter {name:?} in the registry (`ratekeeper limits` lists them)"
            ),
            Failure::Io(message) => write!(f, "{message}"),
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Ratekeeper(e)
    }
}

/// The environment variable naming the Redis when no `--redis` or `--cluster` is given.
pub const REDIS_URL_VAR: &str = "RATEKEEPER_REDIS_URL";

/// The backend the global options name: Redis (`--redis`, else RATEKEEPER_REDIS_URL), a
/// Cluster (`--cluster`), or `None` when none is given.
pub fn connect(args: &BackendArgs) -> Result<Option<Backend>, Failure> {
    let from_env = || std::env::var(REDIS_URL_VAR).ok().filter(|url| !url.is_empty());
    let mut config = match (&args.redis, args.cluster.is_empty()) {
        (Some(url), _) => RedisConfig::new(url.clone()),
        (None, false) => RedisConfig::cluster(args.cluster.clone()),
        (None, true) if !args.sentinel.is_empty() => {
            RedisConfig::sentinel(args.sentinel.clone(), args.service.clone().unwrap_or_default())
        }
        (None, true) => match from_env() {
            Some(url) => RedisConfig::new(url),
            None => return Ok(None),
        },
    };
    if let Some(prefix) = &args.prefix {
        config.prefix = prefix.clone();
    }
    Ok(Some(Backend::redis_with(config)?))
}

/// [`connect`] for the commands that need Redis (the registry and overrides live there).
pub fn connect_redis(args: &BackendArgs) -> Result<Backend, Failure> {
    connect(args)?.ok_or(Failure::NoBackend)
}

/// One override of a limiter, as shown.
#[derive(Debug, Clone, Serialize)]
pub struct OverrideView {
    /// The key it applies to; `null` for the whole limiter.
    pub key: Option<String>,
    /// Its spec.
    pub spec: Value,
    /// Its spec in words (what the Limits page shows).
    pub spec_words: String,
}

/// One registered limiter, as `limits --json` and `/api/limiters` show it.
#[derive(Debug, Clone, Serialize)]
pub struct LimiterView {
    /// The limiter's name.
    pub name: String,
    /// Its kind (`token_bucket`, `concurrent`, ...).
    pub kind: String,
    /// The spec it was built with (the last process to register it wins).
    pub spec: Value,
    /// The spec in words (what `limits` and the Limits page show).
    pub spec_words: String,
    /// Live overrides.
    pub overrides: Vec<OverrideView>,
    /// Who used it: language and version, library version, host.
    pub users: Vec<String>,
    /// Processes that used it in the last three minutes.
    pub processes: u64,
    /// First registration, in seconds since the Unix epoch.
    pub first_seen: f64,
    /// Last registration, in seconds since the Unix epoch.
    pub last_seen: f64,
    /// A use of the name the registry could not take (another kind used by a live process: one
    /// name, one kind; or an override of another kind), reported in the last three minutes.
    pub conflict: Option<String>,
    /// No process has used the name yet: an override set ahead of a deploy (its kind and spec
    /// are the override's).
    pub waiting: bool,
    /// Checks allowed, summed over every process since the counts began (not a window).
    pub allowed: u64,
    /// Checks refused (over the limit, shed or paused), summed over every process.
    pub refused: u64,
    /// Checks that failed (Redis unreachable under `fail_closed`), summed over every process.
    pub errors: u64,
    /// Checks a limiter in shadow mode would have refused and admitted instead, summed over
    /// every process (not in `allowed` nor in `refused`).
    pub shadow_refused: u64,
    /// Current use and the last hour (the page's list reads them; `limits` does not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageView>,
}

/// A limiter's current use and its last hour.
#[derive(Debug, Clone, Serialize)]
pub struct UsageView {
    /// Concurrent limiters: who holds one key and who waits for it (the inspected key; in the
    /// list, the busiest key).
    pub concurrent: Option<ConcurrentView>,
    /// The keys using most of their limit now, most used first.
    pub busiest_keys: Vec<KeyUseView>,
    /// The fleet's allowed and refused checks per minute, the last hour, oldest first.
    pub history: Vec<MinuteView>,
}

/// A concurrent key's holders and waiters.
#[derive(Debug, Clone, Serialize)]
pub struct ConcurrentView {
    /// The key (`""`: the limiter's own).
    pub key: String,
    /// Leases held (overdue ones included).
    pub held: u64,
    /// Callers of `acquire` waiting for a slot.
    pub waiters: u64,
    /// The leases, oldest grant first.
    pub holders: Vec<HolderView>,
}

/// One lease held.
#[derive(Debug, Clone, Serialize)]
pub struct HolderView {
    /// A digest of the lease id (never the id: it would let anyone release the lease).
    pub lease: String,
    /// The grant's fencing token (`null`: granted by an earlier ratekeeper).
    pub fencing_token: Option<u64>,
    /// Seconds since the grant (`null` as for the token).
    pub age: Option<f64>,
    /// Seconds until its lock_timeout passes (0 once it has).
    pub expires_in: f64,
    /// Its lock_timeout has passed: a caller may reclaim it.
    pub overdue: bool,
}

/// One key's use.
#[derive(Debug, Clone, Serialize)]
pub struct KeyUseView {
    /// The key (`""`: the limiter's own).
    pub key: String,
    /// The binding limit minus what remains.
    pub used: u64,
    /// The binding limit.
    pub limit: u64,
}

/// One minute of the history.
#[derive(Debug, Clone, Serialize)]
pub struct MinuteView {
    /// The minute's start, in seconds since the Unix epoch.
    pub start: f64,
    /// Checks allowed.
    pub allowed: u64,
    /// Checks refused.
    pub refused: u64,
}

/// How many busiest keys `inspect` shows.
pub const BUSIEST_SHOWN: usize = 10;

/// One key's state, as `inspect --json` and `/api/limiters/{name}` show it.
#[derive(Debug, Clone, Serialize)]
pub struct InspectView {
    /// The limiter as the registry has it.
    #[serde(flatten)]
    pub limiter: LimiterView,
    /// The key inspected; `null` for the limiter's own key.
    pub key: Option<String>,
    /// The spec that decides for this key: its override, the limiter's override, or its spec.
    pub effective_spec: Value,
    /// That spec in words.
    pub effective_spec_words: String,
    /// A peek (consumes nothing): would a call of cost 1 be allowed now?
    pub allowed_now: bool,
    /// The limit that binds.
    pub limit: u64,
    /// What is left of it.
    pub remaining: u64,
    /// Seconds until a refused call could succeed (0 when allowed).
    pub retry_after: f64,
    /// Seconds until the key is back to full.
    pub reset_after: f64,
    /// The key's holders and waiters (concurrent), the busiest keys and the last hour.
    #[serde(flatten)]
    pub usage: UsageView,
}

fn json(spec: &str) -> Value {
    // The registry holds canonical JSON written by the library; keep it as text if it is not.
    serde_json::from_str(spec).unwrap_or_else(|_| Value::String(spec.to_owned()))
}

fn epoch_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn view(info: &LimiterInfo, counts: Option<&(u64, u64, u64)>) -> LimiterView {
    let &(allowed, refused, errors) = counts.unwrap_or(&(0, 0, 0));
    LimiterView {
        name: info.name.clone(),
        kind: info.kind.clone(),
        spec: json(&info.spec),
        spec_words: crate::words::spec_words(&info.spec),
        overrides: info
            .overrides
            .iter()
            .map(|(key, spec)| OverrideView {
                key: key.clone(),
                spec: json(spec),
                spec_words: crate::words::spec_words(spec),
            })
            .collect(),
        users: info.users.clone(),
        processes: info.processes,
        first_seen: epoch_secs(info.first_seen),
        last_seen: epoch_secs(info.last_seen),
        conflict: info.conflict.clone(),
        waiting: info.waiting,
        allowed,
        refused,
        errors,
        shadow_refused: 0,
        usage: None,
    }
}

/// What an operator sees of `limiter` now: holders and waiters of `key` (concurrent; `None`:
/// the busiest key), the `busiest` busiest keys, and the fleet's last hour.
pub async fn usage(
    backend: &Backend,
    limiter: &ratekeeper::Limiter,
    key: Option<&str>,
    busiest: usize,
) -> Result<UsageView, Failure> {
    let busiest_keys = limiter.busiest_keys(busiest).await?;
    let concurrent = if limiter.kind() == Kind::Concurrent {
        let key = key.or(busiest_keys.first().map(|k| k.key.as_str())).unwrap_or("");
        let seen = limiter.concurrent_use(Some(key)).await?;
        Some(ConcurrentView {
            key: key.to_owned(),
            held: seen.held,
            waiters: seen.waiters,
            holders: seen
                .holders
                .iter()
                .map(|h| HolderView {
                    lease: h.lease.clone(),
                    fencing_token: h.fencing_token,
                    age: h.age.map(|a| a.as_secs_f64()),
                    expires_in: h.expires_in.as_secs_f64(),
                    overdue: h.overdue,
                })
                .collect(),
        })
    } else {
        None
    };
    let history = backend
        .history(limiter.name(), limiter.kind())
        .await?
        .into_iter()
        .map(|m| MinuteView { start: epoch_secs(m.start), allowed: m.allowed, refused: m.refused })
        .collect();
    let busiest_keys =
        busiest_keys.into_iter().map(|k| KeyUseView { key: k.key, used: k.used, limit: k.limit }).collect();
    Ok(UsageView { concurrent, busiest_keys, history })
}

/// The registry with fleet counts, and each limiter's current use and last hour (the page's
/// list): `busiest` keys each.
pub async fn limiters_with_usage(backend: &Backend, busiest: usize) -> Result<Vec<LimiterView>, Failure> {
    let mut views = limiters(backend).await?;
    backend.sync_limits().await?;
    for v in &mut views {
        let spec = match &v.spec {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        // A spec this version cannot read (a newer kind) leaves the row without usage.
        let Ok(limiter) = backend.observer_from_json(&v.name, &spec) else { continue };
        v.usage = Some(usage(backend, &limiter, None, busiest).await?);
    }
    Ok(views)
}

/// The registry with every limiter's fleet counts, by name.
pub async fn limiters(backend: &Backend) -> Result<Vec<LimiterView>, Failure> {
    let infos = backend.limiters().await?;
    // Fleet totals per name (a name used with two kinds has two series: sum them).
    let mut counts: HashMap<String, (u64, u64, u64)> = HashMap::new();
    let mut shadowed: HashMap<String, u64> = HashMap::new();
    for (name, _kind, m) in backend.metrics(true).await? {
        *shadowed.entry(name.clone()).or_default() += m.shadow_refused;
        let c = counts.entry(name).or_default();
        c.0 += m.allowed + m.failed_open + m.fell_back;
        c.1 += m.refused;
        c.2 += m.errors;
    }
    Ok(infos
        .iter()
        .map(|info| LimiterView {
            shadow_refused: shadowed.get(&info.name).copied().unwrap_or(0),
            ..view(info, counts.get(&info.name))
        })
        .collect())
}

/// The registry's entry for `name`.
async fn registered(backend: &Backend, name: &str) -> Result<LimiterInfo, Failure> {
    ratekeeper::params::validate_name(name)?;
    let infos = backend.limiters().await?;
    infos.into_iter().find(|i| i.name == name).ok_or_else(|| Failure::UnknownLimiter(name.to_owned()))
}

/// A limiter built from the registry's spec, with every override written so far applied.
async fn registered_limiter(backend: &Backend, name: &str) -> Result<(LimiterInfo, ratekeeper::Limiter), Failure> {
    let info = registered(backend, name).await?;
    let limiter = backend.observer_from_json(name, &info.spec)?;
    // A new process applies overrides at its background task's first poll; read them now so
    // the peek below decides as every other process does.
    backend.sync_limits().await?;
    Ok((info, limiter))
}

/// Peeks at one key of a registered limiter.
pub async fn inspect(backend: &Backend, name: &str, key: Option<&str>) -> Result<InspectView, Failure> {
    let (info, limiter) = registered_limiter(backend, name).await?;
    let decision = limiter.peek(key).await?;
    let effective = info
        .overrides
        .iter()
        .find(|(k, _)| k.is_some() && k.as_deref() == key)
        .or_else(|| info.overrides.iter().find(|(k, _)| k.is_none()))
        .map_or(info.spec.as_str(), |(_, spec)| spec.as_str());
    let metrics = limiters(backend).await?.into_iter().find(|v| v.name == name);
    let shadow_refused = metrics.as_ref().map_or(0, |v| v.shadow_refused);
    let counts = metrics.map(|v| (v.allowed, v.refused, v.errors));
    // The holders of the key inspected (the limiter's own when none), as the peek above.
    let usage = usage(backend, &limiter, Some(key.unwrap_or("")), BUSIEST_SHOWN).await?;
    Ok(InspectView {
        effective_spec: json(effective),
        effective_spec_words: crate::words::spec_words(effective),
        limiter: LimiterView { shadow_refused, ..view(&info, counts.as_ref()) },
        key: key.map(str::to_owned),
        allowed_now: decision.allowed,
        limit: decision.limit,
        remaining: decision.remaining,
        retry_after: decision.retry_after.as_secs_f64(),
        reset_after: decision.reset_after.as_secs_f64(),
        usage,
    })
}

/// Forgets one key's state of a registered limiter.
pub async fn reset(backend: &Backend, name: &str, key: Option<&str>) -> Result<(), Failure> {
    let (_, limiter) = registered_limiter(backend, name).await?;
    limiter.reset(key).await?;
    Ok(())
}

/// Ends one key's pause of a registered limiter; whether one was in effect.
pub async fn resume(backend: &Backend, name: &str, key: Option<&str>) -> Result<bool, Failure> {
    let (_, limiter) = registered_limiter(backend, name).await?;
    Ok(limiter.resume(key).await?)
}

/// Blocks one key of a registered limiter for `seconds` (validated, naming `duration`); the
/// block in effect.
pub async fn block(
    backend: &Backend,
    name: &str,
    key: Option<&str>,
    seconds: f64,
) -> Result<std::time::Duration, Failure> {
    let duration = ratekeeper::params::duration_from_secs("duration", seconds)?;
    let (_, limiter) = registered_limiter(backend, name).await?;
    Ok(limiter.block(key, duration).await?)
}

/// Ends one key's block of a registered limiter; whether one was in effect.
pub async fn unblock(backend: &Backend, name: &str, key: Option<&str>) -> Result<bool, Failure> {
    let (_, limiter) = registered_limiter(backend, name).await?;
    Ok(limiter.unblock(key).await?)
}

/// "12s ago", "3m ago", "5h ago", "2d ago": how long ago `then` (seconds since the epoch) was.
pub fn ago(then: f64, now: SystemTime) -> String {
    let secs = (epoch_secs(now) - then).max(0.0) as u64;
    match secs {
        0..=59 => format!("{secs}s ago"),
        60..=3599 => format!("{}m ago", secs / 60),
        3600..=86_399 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86_400),
    }
}

/// Compact JSON of a spec for tables.
pub fn compact(spec: &Value) -> String {
    match spec {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The `limits` table: one row per limiter, columns padded to their widest cell; each spec in
/// words (`limits --json` keeps the JSON).
pub fn table(views: &[LimiterView], now: SystemTime) -> String {
    let header = ["NAME", "KIND", "SPEC", "OVERRIDES", "PROCESSES", "LAST SEEN", "ALLOWED", "REFUSED"];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for v in views {
        let overrides = if v.overrides.is_empty() {
            "-".to_owned()
        } else {
            v.overrides
                .iter()
                .map(|o| {
                    format!("{}={}", o.key.as_deref().map_or_else(|| "*".into(), printable), printable(&o.spec_words))
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        rows.push(vec![
            v.name.clone(),
            v.kind.clone(),
            printable(&v.spec_words),
            overrides,
            v.processes.to_string(),
            if v.waiting { WAITING.to_owned() } else { ago(v.last_seen, now) },
            v.allowed.to_string(),
            v.refused.to_string(),
        ]);
    }
    let widths: Vec<usize> =
        (0..header.len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                // Numbers right-aligned, text left-aligned, as `ps` and `kubectl` do.
                if c >= 6 || c == 4 {
                    format!("{cell:>w$}", w = widths[c])
                } else {
                    format!("{cell:<w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    for v in views.iter().filter(|v| v.conflict.is_some()) {
        // The conflict names a process's host and language: text from the registry, escaped.
        out.push_str(&format!("conflict: {}: {}\n", v.name, printable(&conflict_text(v))));
    }
    out
}

/// How `limits` and `inspect` show an override that no process has used yet.
const WAITING: &str = "waiting for a first user";

fn conflict_text(v: &LimiterView) -> String {
    let conflict = v.conflict.as_deref().unwrap_or("");
    // Two specs of one kind (the registry says "N specs in use: …"), or another kind.
    if conflict.contains(" specs in use: ") {
        format!(
            "{conflict} (one name, one spec: each process enforces its own number on the same counter; give \
             every process the same spec, or change it fleet-wide with `ratekeeper set`)"
        )
    } else {
        format!("{conflict} (one name, one kind: this {} keeps the name; rename the other)", v.kind)
    }
}

/// `text` safe to print on a terminal: control characters (an escape sequence in a key name
/// could rewrite the screen or hide a line), bidirectional overrides and backslashes are written
/// as Rust escapes (`\u{1b}`, `\n`, `\\`); everything else as is.
pub fn printable(text: &str) -> String {
    let hidden = |c: char| {
        c.is_control() || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(|c| hidden(c) || c == '\\') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c == '\\' || hidden(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Seconds for humans: "0", "1.5s", "59.999s".
pub fn seconds(secs: f64) -> String {
    if secs == 0.0 {
        "0".to_owned()
    } else {
        format!("{}s", (secs * 1000.0).round() / 1000.0)
    }
}

/// The text `inspect` prints.
pub fn inspect_text(v: &InspectView) -> String {
    let mut out = String::new();
    let overrides = if v.limiter.overrides.is_empty() {
        "-".to_owned()
    } else {
        v.limiter
            .overrides
            .iter()
            .map(|o| format!("{}={}", o.key.as_deref().map_or_else(|| "*".into(), printable), compact(&o.spec)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let lines = [
        ("name", v.limiter.name.clone()),
        ("key", v.key.as_deref().map_or_else(|| "-".into(), printable)),
        ("kind", v.limiter.kind.clone()),
        ("spec", compact(&v.limiter.spec)),
        ("overrides", overrides),
        ("deciding spec", compact(&v.effective_spec)),
        ("status", if v.limiter.waiting { WAITING.to_owned() } else { "in use".to_owned() }),
        ("conflict", if v.limiter.conflict.is_some() { printable(&conflict_text(&v.limiter)) } else { "-".to_owned() }),
        ("allowed", v.allowed_now.to_string()),
        ("limit", v.limit.to_string()),
        ("remaining", v.remaining.to_string()),
        ("retry after", seconds(v.retry_after)),
        ("reset after", seconds(v.reset_after)),
    ];
    for (label, value) in lines {
        out.push_str(&format!("{label:<14}{value}\n"));
    }
    out.push_str(&usage_text(&v.usage));
    out
}

/// `inspect`'s tables: holders and waiters, busiest keys, the last hour.
fn usage_text(u: &UsageView) -> String {
    let mut out = String::new();
    if let Some(c) = &u.concurrent {
        out.push_str(&format!("{:<14}{}\n", "holders", c.held));
        out.push_str(&format!("{:<14}{}\n", "waiters", c.waiters));
        if !c.holders.is_empty() {
            let mut rows = vec![["LEASE", "FENCING TOKEN", "AGE", "EXPIRES IN"].map(str::to_owned).to_vec()];
            for h in &c.holders {
                let expires = if h.overdue { "overdue".to_owned() } else { seconds(h.expires_in) };
                rows.push(vec![
                    h.lease.clone(),
                    h.fencing_token.map_or("-".into(), |t| t.to_string()),
                    h.age.map_or("-".into(), seconds),
                    expires,
                ]);
            }
            out.push_str(&indented_table(&rows));
        }
    }
    if u.busiest_keys.is_empty() {
        out.push_str(&format!("{:<14}-\n", "busiest keys"));
    } else {
        out.push_str("busiest keys\n");
        let mut rows = vec![["KEY", "USED", "LIMIT"].map(str::to_owned).to_vec()];
        for k in &u.busiest_keys {
            let key = if k.key.is_empty() { "(own)".to_owned() } else { printable(&k.key) };
            rows.push(vec![key, k.used.to_string(), k.limit.to_string()]);
        }
        out.push_str(&indented_table(&rows));
    }
    let (allowed, refused) = u.history.iter().fold((0, 0), |(a, r), m| (a + m.allowed, r + m.refused));
    let hour = if u.history.is_empty() { "-".to_owned() } else { format!("allowed {allowed}, refused {refused}") };
    out.push_str(&format!("{:<14}{hour}\n", "last hour"));
    out
}

/// Rows under a header, indented two spaces, columns padded to their widest cell.
fn indented_table(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        out.push_str(&format!("  {}\n", cells.join("  ").trim_end()));
    }
    out
}

/// A duration in seconds given on the command line or in a request, checked.
pub fn duration_arg(parameter: &'static str, secs: f64) -> Result<Duration, Failure> {
    if !secs.is_finite() || !(0.0..=86_400.0 * 365.0).contains(&secs) {
        return Err(Error::invalid(parameter, format!("must be between 0 and one year of seconds, got {secs}")).into());
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ago_is_relative_and_coarse() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(ago(1_000_000.0 - 12.4, now), "12s ago");
        assert_eq!(ago(1_000_000.0 - 180.0, now), "3m ago");
        assert_eq!(ago(1_000_000.0 - 7200.0, now), "2h ago");
        assert_eq!(ago(1_000_000.0 - 3.0 * 86_400.0, now), "3d ago");
        // A clock a little behind another host's never shows a negative age.
        assert_eq!(ago(1_000_000.0 + 2.0, now), "0s ago");
    }

    #[test]
    fn bad_durations_name_their_parameter() {
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let Err(Failure::Ratekeeper(e)) = duration_arg("wait", bad) else { panic!("{bad} accepted") };
            assert_eq!(e.parameter(), Some("wait"));
        }
        assert_eq!(duration_arg("wait", 1.5).unwrap(), Duration::from_millis(1500));
    }

    #[test]
    fn printable_escapes_what_would_act_on_a_terminal() {
        assert_eq!(printable("user:42 é 键"), "user:42 é 键");
        assert_eq!(printable("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(printable("line\nfake row\r"), "line\\nfake row\\r");
        assert_eq!(printable("x\u{202e}y"), "x\\u{202e}y");
        assert_eq!(printable("back\\slash"), "back\\\\slash", "a literal backslash stays distinguishable");
    }
}
