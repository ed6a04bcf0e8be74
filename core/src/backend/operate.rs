//! Operating a backend: the registry of limiters, live limits, metrics flushes and the
//! Prometheus exposition.

use std::time::{SystemTime, UNIX_EPOCH};

use super::{Backend, BackendInner};
use crate::engine::{Kind, LimiterConfig, LimiterSpec};
use crate::error::{Error, Result};
use crate::live::{client, LimiterInfo};
use crate::metrics::Metrics;
use crate::params::{validate_key, validate_name};
use crate::prometheus::{render, Series};
use crate::runtime::block_on;
use crate::views::MinuteCounts;

impl Backend {
    /// Every limiter known to the backend, by name: on Redis, the registry (every limiter any
    /// process in any language built in the last 90 days); on memory, this process's limiters.
    /// Each comes with its overrides.
    pub async fn limiters(&self) -> Result<Vec<LimiterInfo>> {
        match &*self.inner {
            BackendInner::Redis(redis) => {
                // This process's own limiters are listed even before their first registration.
                redis.flush_all(false, false, None).await?;
                redis.registry().await
            }
            BackendInner::Memory(memory) => {
                let live = &memory.live;
                let mut out: Vec<LimiterInfo> = live
                    .members()
                    .into_iter()
                    .map(|entry| {
                        let (kind, spec, ..) = &entry.per_kind[0];
                        LimiterInfo {
                            name: entry.state.name().to_owned(),
                            kind: kind.as_str().to_owned(),
                            spec: spec.clone(),
                            overrides: live.overrides_of(entry.state.name()),
                            users: vec![client()],
                            processes: 1,
                            first_seen: entry.state.created(),
                            last_seen: SystemTime::now(),
                            conflict: None,
                            waiting: false,
                        }
                    })
                    .collect();
                // Overrides set before this process built a limiter of their name wait for it.
                for name in live.override_names() {
                    if out.iter().any(|info| info.name == name) {
                        continue;
                    }
                    let overrides = live.overrides_of(&name);
                    let Some((_, spec)) = overrides.iter().find(|(key, _)| key.is_none()).or(overrides.first()) else {
                        continue;
                    };
                    let kind =
                        LimiterConfig::from_json(spec).map(|c| c.spec.kind().as_str().to_owned()).unwrap_or_default();
                    out.push(LimiterInfo {
                        name,
                        kind,
                        spec: spec.clone(),
                        overrides: overrides.clone(),
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
        }
    }

    /// Blocking form of [`Backend::limiters`].
    pub fn limiters_blocking(&self) -> Result<Vec<LimiterInfo>> {
        block_on(self.limiters())
    }

    /// Overrides the spec of limiter `name` (`key: None`) or of one of its keys, for every
    /// process using the backend: on Redis each applies it within a fraction of a second (this
    /// one at once), with no extra round trip per call. State carries over as it is (see the
    /// README's "Live limits"). The override applies to limiters of its own kind only; on Redis,
    /// one of another kind than the registered limiter is refused. Bad input is
    /// [`Error::InvalidArgument`] before anything is written.
    pub async fn set_limit(&self, name: &str, spec: &LimiterSpec, key: Option<&str>) -> Result<()> {
        self.set_override(name, &LimiterConfig::from(spec.clone()), key).await
    }

    /// [`Backend::set_limit`] with the spec's options: an override whose config says
    /// `shadow: true` puts the limiter (or the key) in shadow mode, and one that does not
    /// enforces (an override replaces the whole spec). `wait_timeout` belongs to a limiter
    /// object, not to an override, and is refused.
    pub async fn set_override(&self, name: &str, config: &LimiterConfig, key: Option<&str>) -> Result<()> {
        if config.wait_timeout.is_some() {
            return Err(Error::invalid_field("wait_timeout", "is a limiter option: an override cannot set it"));
        }
        let spec = &config.spec;
        validate_name(name)?;
        if let Some(key) = key {
            validate_key(Some(key))?;
        }
        match &*self.inner {
            BackendInner::Redis(redis) => {
                redis.live.compile(config)?;
                redis.write_override(name, key, Some(config)).await
            }
            BackendInner::Memory(memory) => {
                memory.live.compile(config)?;
                if let Some(entry) = memory.live.members().into_iter().find(|e| e.state.name() == name) {
                    let kind = entry.per_kind[0].0;
                    if kind != spec.kind() {
                        return Err(kind_mismatch(name, kind, spec.kind()));
                    }
                }
                memory.live.set_local(name, key, Some(config), None);
                Ok(())
            }
        }
    }

    /// Blocking form of [`Backend::set_override`].
    pub fn set_override_blocking(&self, name: &str, config: &LimiterConfig, key: Option<&str>) -> Result<()> {
        block_on(self.set_override(name, config, key))
    }

    /// Blocking form of [`Backend::set_limit`].
    pub fn set_limit_blocking(&self, name: &str, spec: &LimiterSpec, key: Option<&str>) -> Result<()> {
        block_on(self.set_limit(name, spec, key))
    }

    /// [`Backend::set_limit`] with a JSON spec; a bad field is named by its path.
    pub async fn set_limit_json(&self, name: &str, spec: &str, key: Option<&str>) -> Result<()> {
        self.set_override(name, &LimiterConfig::from_json(spec)?, key).await
    }

    /// Blocking form of [`Backend::set_limit_json`].
    pub fn set_limit_json_blocking(&self, name: &str, spec: &str, key: Option<&str>) -> Result<()> {
        block_on(self.set_limit_json(name, spec, key))
    }

    /// Removes the override of `name` (`key: None`) or of one of its keys; limiters go back to
    /// their own spec. Clearing an override that does not exist does nothing.
    pub async fn clear_limit(&self, name: &str, key: Option<&str>) -> Result<()> {
        validate_name(name)?;
        if let Some(key) = key {
            validate_key(Some(key))?;
        }
        match &*self.inner {
            BackendInner::Redis(redis) => redis.write_override(name, key, None).await,
            BackendInner::Memory(memory) => {
                memory.live.set_local(name, key, None, None);
                Ok(())
            }
        }
    }

    /// Blocking form of [`Backend::clear_limit`].
    pub fn clear_limit_blocking(&self, name: &str, key: Option<&str>) -> Result<()> {
        block_on(self.clear_limit(name, key))
    }

    /// Removes limiter `name` from the registry (`limiters()`, `ratekeeper limits`, the Limits
    /// page): for a limiter no process uses any more, which the registry would otherwise list
    /// for its 90-day TTL. Its state, metrics and overrides are left alone, and a process that
    /// still uses it registers it again within a minute. Returns whether it was listed. Nothing
    /// to do on the memory backend, whose list is this process's limiters.
    pub async fn forget_limiter(&self, name: &str) -> Result<bool> {
        validate_name(name)?;
        match &*self.inner {
            BackendInner::Redis(redis) => redis.forget(name).await,
            BackendInner::Memory(_) => Ok(false),
        }
    }

    /// Blocking form of [`Backend::forget_limiter`].
    pub fn forget_limiter_blocking(&self, name: &str) -> Result<bool> {
        block_on(self.forget_limiter(name))
    }

    /// Sends this process's pending metric counts and registrations to Redis now, rather than
    /// within the next second (call it before a short-lived process exits). Nothing to do on
    /// the memory backend.
    pub async fn flush(&self) -> Result<()> {
        match &*self.inner {
            BackendInner::Redis(redis) => redis.flush_all(true, false, None).await,
            BackendInner::Memory(_) => Ok(()),
        }
    }

    /// Blocking form of [`Backend::flush`].
    pub fn flush_blocking(&self) -> Result<()> {
        block_on(self.flush())
    }

    /// Flushes every Redis backend of this process that is still alive, as its last flush: the
    /// bindings call it as the process exits (Python's `atexit`, Node's `exit` event, C's
    /// `rk_backend_free`), so a process that lives under a second still counts and registers.
    /// Each limiter object's sequence key field is then removed from Redis rather than kept
    /// for a day. Errors are ignored: the process is going away either way.
    pub fn flush_every_backend_at_exit() {
        for redis in super::live_redis_backends() {
            let _ = block_on(redis.flush_all(true, true, None));
        }
    }

    /// Reads the live overrides now rather than at the background task's next poll (within
    /// 200 ms), so that the next decision of this process applies every override written before
    /// the call: for short-lived processes such as the CLI's `inspect`. Nothing to do on memory.
    pub async fn sync_limits(&self) -> Result<()> {
        match &*self.inner {
            BackendInner::Redis(redis) => redis.reload_overrides(None).await,
            BackendInner::Memory(_) => Ok(()),
        }
    }

    /// Blocking form of [`Backend::sync_limits`].
    pub fn sync_limits_blocking(&self) -> Result<()> {
        block_on(self.sync_limits())
    }

    /// The metrics of every limiter, summed over this process's limiter objects per (name,
    /// kind); with `fleet`, every process's (read from Redis after flushing this one's, for every
    /// registered limiter; the same as this process's on memory).
    pub async fn metrics(&self, fleet: bool) -> Result<Vec<(String, Kind, Metrics)>> {
        let local = || -> Vec<(String, Kind, Metrics)> {
            let members = match &*self.inner {
                BackendInner::Redis(redis) => redis.live.members(),
                BackendInner::Memory(memory) => memory.live.members(),
            };
            members
                .into_iter()
                .flat_map(|e| {
                    let name = e.state.name().to_owned();
                    e.per_kind.into_iter().map(move |(kind, _, metrics, _)| (name.clone(), kind, metrics))
                })
                .collect()
        };
        match &*self.inner {
            BackendInner::Redis(redis) if fleet => {
                redis.flush_all(false, false, None).await?;
                let mut out = Vec::new();
                for info in redis.registry().await? {
                    let Some(kind) = Kind::from_name(&info.kind) else { continue };
                    out.push((info.name.clone(), kind, redis.fleet_metrics_of(kind, &info.name).await?));
                }
                Ok(out)
            }
            _ => Ok(local()),
        }
    }

    /// Starts timing this backend's calls for [`Backend::durations`] (an OpenTelemetry
    /// instrumentation's histograms): until the matching [`Backend::stop_observing`], every
    /// check and wait of its limiters is timed (a memory check then takes the general path, not
    /// the fast one). Counted: two observers need two stops.
    pub fn start_observing(&self) {
        self.live().observe.turn(true, super::wall_clock::reads_tsc);
    }

    /// Ends one [`Backend::start_observing`]; the durations counted so far stay readable.
    pub fn stop_observing(&self) {
        self.live().observe.turn(false, super::wall_clock::reads_tsc);
    }

    /// Marks this backend's calls as traced, until [`Backend::stop_tracing`]: a binding asks
    /// [`crate::Limiter::traced`] per call and, when it is, notes the call's Redis round trips
    /// ([`crate::trace::collect`]) and makes spans of them. Counted: each start wants one stop.
    pub fn start_tracing(&self) {
        self.live().observe.trace(true);
    }

    /// Ends one [`Backend::start_tracing`].
    pub fn stop_tracing(&self) {
        self.live().observe.trace(false);
    }

    /// Identifies this backend within the process: [`crate::Limiter::backend_id`] of its
    /// limiters (for a binding that keeps something per backend, such as a tracer).
    pub fn id(&self) -> usize {
        std::sync::Arc::as_ptr(&self.live().observe) as usize
    }

    /// The durations of this process's observed calls per limiter (name, kind) and per call and
    /// outcome, cumulative (see [`Backend::start_observing`]); series with no call are left out.
    /// Several objects of one limiter add up. Never the key.
    pub fn durations(&self) -> Vec<(String, Kind, Vec<crate::observe::DurationSeries>)> {
        let mut out = Vec::new();
        for entry in self.live().members() {
            let name = entry.state.name().to_owned();
            for (kind, _, _, objects) in entry.per_kind {
                let mut series = Vec::new();
                for object in &objects {
                    object.timings.add_to(&mut series);
                }
                if !series.is_empty() {
                    out.push((name.clone(), kind, series));
                }
            }
        }
        out
    }

    fn live(&self) -> &crate::live::Live {
        match &*self.inner {
            BackendInner::Redis(redis) => &redis.live,
            BackendInner::Memory(memory) => &memory.live,
        }
    }

    /// Blocking form of [`Backend::metrics`].
    pub fn metrics_blocking(&self, fleet: bool) -> Result<Vec<(String, Kind, Metrics)>> {
        block_on(self.metrics(fleet))
    }

    /// The fleet's allowed and refused checks of limiter `name` of `kind` per minute over the
    /// last [`crate::HISTORY_MINUTES`] minutes, oldest first, the current (partial) minute last,
    /// by the Redis server's clock. Written by every process's metrics flush (once a second, no
    /// extra round trip on the check path); kept two hours after the last count. The memory
    /// backend keeps no history: empty.
    pub async fn history(&self, name: &str, kind: Kind) -> Result<Vec<MinuteCounts>> {
        validate_name(name)?;
        match &*self.inner {
            BackendInner::Redis(redis) => {
                redis.flush_all(false, false, None).await?;
                redis.history(kind, name).await
            }
            BackendInner::Memory(_) => Ok(Vec::new()),
        }
    }

    /// Blocking form of [`Backend::history`].
    pub fn history_blocking(&self, name: &str, kind: Kind) -> Result<Vec<MinuteCounts>> {
        block_on(self.history(name, kind))
    }

    /// Every limiter's metrics in the Prometheus text exposition format (version 0.0.4):
    /// `ratekeeper_checks_total{limiter,kind,outcome}`, the histogram
    /// `ratekeeper_check_duration_seconds{limiter,kind}` and the concurrent limiters'
    /// `ratekeeper_concurrent_*`. `fleet` as in [`Backend::metrics`].
    pub async fn prometheus(&self, fleet: bool) -> Result<String> {
        let series = self
            .metrics(fleet)
            .await?
            .into_iter()
            .map(|(name, kind, metrics)| Series {
                name,
                kind: kind.as_str(),
                concurrent: kind == Kind::Concurrent,
                metrics,
            })
            .collect();
        Ok(render(series))
    }

    /// Blocking form of [`Backend::prometheus`].
    pub fn prometheus_blocking(&self, fleet: bool) -> Result<String> {
        block_on(self.prometheus(fleet))
    }
}

#[cold]
fn kind_mismatch(name: &str, kind: Kind, wanted: Kind) -> Error {
    Error::invalid(
        "spec",
        format!(
            "limiter {name:?} is a {}: a {} override cannot apply to it (one name, one kind)",
            kind.as_str(),
            wanted.as_str()
        ),
    )
}
