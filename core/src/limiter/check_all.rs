//! Several limits, all or nothing: [`Backend::check_all`] decides every part (a limiter, a
//! key, a cost) in one atomic step, and [`Backend::acquire_all`] waits for such a step to
//! admit them all. If any part refuses, no part consumes anything.
//!
//! Every counting kind takes part (token bucket, leaky, points, bucket, window(s), sliding
//! window, calendar) and concurrent limiters (each admitted concurrent part holds a lease,
//! released with [`CombinedDecision::release`]); unlimited parts always allow. A leased token
//! bucket (it spends in process from leases) and leased partitions (they pace in process) have
//! no atomic step to share, and are refused as [`Error::InvalidArgument`] naming the part.
//!
//! Each part's decision is an ordinary [`Decision`] with its limiter and key beside it (and,
//! when admitted, its settle ticket), so a combined decision is settled part by part:
//! `part.limiter.settle(&part.decision, actual)`.

use std::time::Duration;

use super::pipeline::{counter_of, reached_backend};
use super::{next_lease_id, Limiter, Target};
use crate::backend::memory::MemoryPart;
use crate::backend::redis::RedisPart;
use crate::backend::{Backend, BackendInner};
use crate::decision::Decision;
use crate::engine::{Algorithm, Op, Outcome, Wake};
use crate::error::{Error, Result};
use crate::metrics::Counter;
use crate::observe::Call;
use crate::params::{micros, validate_cost, validate_duration, validate_key};
use crate::runtime::block_on;

/// The most parts one combination may hold: one step holds every part's keys at once.
pub const MAX_CHECK_ALL_PARTS: usize = 64;

/// One part's decision in a [`CombinedDecision`].
#[derive(Debug, Clone)]
pub struct PartDecision {
    /// The part's limiter.
    pub limiter: Limiter,
    /// The part's key.
    pub key: String,
    /// The part's cost.
    pub cost: u64,
    /// What this part decided at the combination's instant. In a refused combination a part
    /// may say `allowed` (it alone would have been admitted) but consumed nothing, and holds
    /// no lease.
    pub decision: Decision,
}

/// What [`Backend::check_all`] decided.
#[derive(Debug, Clone)]
pub struct CombinedDecision {
    /// Whether every part was admitted (and so consumed); when false, none consumed anything.
    pub allowed: bool,
    /// Zero when allowed; else the longest `retry_after` of the parts that refused.
    pub retry_after: Duration,
    /// Each part's decision, in the order of the parts.
    pub parts: Vec<PartDecision>,
}

impl CombinedDecision {
    /// Releases the lease of every admitted concurrent part (each is tried; the first error is
    /// returned). Nothing to do for other kinds or a refused combination.
    pub async fn release(&self) -> Result<()> {
        let mut first = Ok(());
        for part in &self.parts {
            if let Some(lease) = &part.decision.lease {
                let released = part.limiter.release(Some(&part.key), lease).await;
                if first.is_ok() {
                    first = released;
                }
            }
        }
        first
    }

    /// Blocking form of [`CombinedDecision::release`].
    pub fn release_blocking(&self) -> Result<()> {
        let mut first = Ok(());
        for part in &self.parts {
            if let Some(lease) = &part.decision.lease {
                let released = part.limiter.release_blocking(Some(&part.key), lease);
                if first.is_ok() {
                    first = released;
                }
            }
        }
        first
    }
}

/// A part, validated.
#[derive(Clone, Copy)]
struct Prepared<'a> {
    limiter: &'a Limiter,
    key: &'a str,
    cost: u64,
    op: Op,
}

/// A decided combination, with how a refused caller may wait for a release.
struct Decided {
    combined: CombinedDecision,
    wake: Option<Wake>,
}

impl Backend {
    /// Decides every part `(limiter, key, cost)` in one atomic step at one instant: all are
    /// admitted and consume their cost, or none consumes anything. Never waits. On Redis it is
    /// one script call; on a Redis Cluster the parts' keys must share one slot (see
    /// [`Limiter::with_colocate`]), or the call is refused as [`Error::InvalidArgument`] naming
    /// `parts` and the limiters. Bad input (no parts, a part of another backend, a cost of 0 or
    /// above a limiter's capacity, a kind that cannot take part) is refused naming the part
    /// (`parts[2].cost`) before anything is written.
    pub async fn check_all(&self, parts: &[(&Limiter, Option<&str>, u64)]) -> Result<CombinedDecision> {
        let prepared = self.prepare_all(parts)?;
        Ok(self.decide_all(&prepared).await?.combined)
    }

    /// Blocking form of [`Backend::check_all`].
    pub fn check_all_blocking(&self, parts: &[(&Limiter, Option<&str>, u64)]) -> Result<CombinedDecision> {
        let prepared = self.prepare_all(parts)?;
        Ok(self.decide_all_blocking(&prepared)?.combined)
    }

    /// Like [`Backend::check_all`], waiting up to `wait_timeout` (default: the shortest of the
    /// parts' limiters' wait timeouts) for a step that admits every part. Waits sleep exactly
    /// until the combination can change (or until a release frees a concurrent part's slot);
    /// when waiting cannot succeed in time, fails at once with [`Error::OverLimit`] carrying
    /// the combination's `retry_after`.
    pub async fn acquire_all(
        &self,
        parts: &[(&Limiter, Option<&str>, u64)],
        wait_timeout: Option<Duration>,
    ) -> Result<CombinedDecision> {
        let prepared = self.prepare_all(parts)?;
        let deadline = self.acquire_all_deadline(&prepared, wait_timeout)?;
        let first = self.decide_all(&prepared).await?;
        self.wait_all(parts, deadline, first).await
    }

    /// Blocking form of [`Backend::acquire_all`]. Call it from plain threads, not from inside
    /// an async task. Its first attempt is made on the calling thread; only a refused one that
    /// may wait goes on to wait on the runtime (the same steps as the async form, from that
    /// attempt: a refusal is one attempt, counted once).
    pub fn acquire_all_blocking(
        &self,
        parts: &[(&Limiter, Option<&str>, u64)],
        wait_timeout: Option<Duration>,
    ) -> Result<CombinedDecision> {
        let prepared = self.prepare_all(parts)?;
        let deadline = self.acquire_all_deadline(&prepared, wait_timeout)?;
        let first = self.decide_all_blocking(&prepared)?;
        if first.combined.allowed {
            return Ok(first.combined);
        }
        block_on(self.wait_all(parts, deadline, first))
    }

    /// The instant (µs, on the backend's clock) an acquire_all gives up: `wait_timeout` from now,
    /// by default the shortest of the parts' limiters' wait timeouts.
    fn acquire_all_deadline(&self, prepared: &[Prepared<'_>], wait_timeout: Option<Duration>) -> Result<u64> {
        let wait = match wait_timeout {
            Some(w) if !w.is_zero() => validate_duration("wait_timeout", w)?,
            Some(w) => w,
            None => prepared.iter().map(|p| p.limiter.wait_timeout()).min().unwrap_or_default(),
        };
        Ok(self.clock().now_micros().saturating_add(micros(wait)))
    }

    /// From an attempt already made (`decided`), waits and tries again until a step admits every
    /// part, or fails with [`Error::OverLimit`] when that cannot happen by `deadline`.
    async fn wait_all(
        &self,
        parts: &[(&Limiter, Option<&str>, u64)],
        deadline: u64,
        mut decided: Decided,
    ) -> Result<CombinedDecision> {
        let clock = self.clock();
        loop {
            if decided.combined.allowed {
                return Ok(decided.combined);
            }
            let retry_after = decided.combined.retry_after;
            let now = clock.now_micros();
            let ready_at = now.saturating_add(micros(retry_after));
            match decided.wake {
                Some(wake) if now < deadline => {
                    wake.wait(&*clock, Duration::from_micros(ready_at.min(deadline) - now)).await;
                }
                None if ready_at <= deadline => clock.sleep(retry_after.max(Duration::from_micros(1))).await,
                _ => return Err(Error::OverLimit { retry_after }),
            }
            // Each attempt asks for fresh lease ids.
            let prepared = self.prepare_all(parts)?;
            decided = self.decide_all(&prepared).await?;
        }
    }

    /// Validates every part, naming a bad one by its path (`parts[1].cost`).
    fn prepare_all<'a>(&self, parts: &[(&'a Limiter, Option<&'a str>, u64)]) -> Result<Vec<Prepared<'a>>> {
        if parts.is_empty() {
            return Err(Error::invalid("parts", "must hold at least one (limiter, key, cost) part"));
        }
        if parts.len() > MAX_CHECK_ALL_PARTS {
            return Err(Error::invalid(
                "parts",
                format!("must hold at most {MAX_CHECK_ALL_PARTS} parts, got {}", parts.len()),
            ));
        }
        parts
            .iter()
            .enumerate()
            .map(|(i, (limiter, key, cost))| {
                let at = |field: &str| format!("parts[{i}]{field}");
                let same_backend = match (&limiter.inner.target, &*self.inner) {
                    (Target::Memory { backend, .. }, BackendInner::Memory(ours)) => {
                        std::sync::Arc::ptr_eq(backend, ours)
                    }
                    (Target::Redis { backend, .. }, BackendInner::Redis(ours)) => std::sync::Arc::ptr_eq(backend, ours),
                    (Target::Nowhere, _) => true,
                    _ => false,
                };
                if let Some(why) = limiter.kind().not_in_check_all() {
                    return Err(Error::invalid_field(at(""), format!("{:?} {why}", limiter.name())));
                }
                if !same_backend {
                    return Err(Error::invalid_field(
                        at(""),
                        format!("{:?} belongs to another backend than the one check_all was called on", limiter.name()),
                    ));
                }
                let rename = |field: &str| {
                    let path = at(field);
                    move |e: Error| Error::invalid_field(path, crate::engine::spec_json::message_of(e))
                };
                let key = validate_key(*key).map_err(rename(".key"))?;
                if *cost == 0 {
                    return Err(Error::invalid_field(at(".cost"), "must be at least 1"));
                }
                validate_cost("cost", *cost).map_err(rename(".cost"))?;
                limiter.inner.algorithm.validate_cost(*cost).map_err(rename(".cost"))?;
                let lease_id =
                    if matches!(limiter.inner.algorithm, Algorithm::Concurrent(_)) { next_lease_id() } else { 0 };
                Ok(Prepared { limiter, key, cost: *cost, op: Op::Check { cost: *cost, lease_id, waiter: None } })
            })
            .collect::<Result<Vec<_>>>()
            .and_then(refuse_shared_state_of_other_specs)
    }

    /// Runs a validated combination on this backend: its enforcing parts in one atomic step,
    /// then its parts that never refuse (see `with_parts_alone`).
    async fn decide_all(&self, parts: &[Prepared<'_>]) -> Result<Decided> {
        let Some((enforced, alone)) = split_alone(parts) else { return self.decide_enforced(parts).await };
        let mut decided = self.decide_enforced(&enforced).await?;
        let mut decided_alone = Vec::with_capacity(alone.len());
        for (i, part) in alone {
            let key = Some(part.key);
            let decision = if decided.combined.allowed {
                part.limiter.check(key, part.cost).await?
            } else {
                part.limiter.peek(key).await?
            };
            decided_alone.push((i, part, decision));
        }
        with_parts_alone(&mut decided, decided_alone);
        Ok(decided)
    }

    /// Blocking form of `decide_all`.
    fn decide_all_blocking(&self, parts: &[Prepared<'_>]) -> Result<Decided> {
        let Some((enforced, alone)) = split_alone(parts) else { return self.decide_enforced_blocking(parts) };
        let mut decided = self.decide_enforced_blocking(&enforced)?;
        let mut decided_alone = Vec::with_capacity(alone.len());
        for (i, part) in alone {
            let key = Some(part.key);
            let decision = if decided.combined.allowed {
                part.limiter.check_blocking(key, part.cost)?
            } else {
                part.limiter.peek_blocking(key)?
            };
            decided_alone.push((i, part, decision));
        }
        with_parts_alone(&mut decided, decided_alone);
        Ok(decided)
    }

    /// Runs enforcing parts on this backend, in one atomic step.
    async fn decide_enforced(&self, parts: &[Prepared<'_>]) -> Result<Decided> {
        match &*self.inner {
            BackendInner::Redis(redis) => {
                let context = RedisContext::of(parts);
                let remote = context.parts(parts);
                redis.ensure_live_task();
                let started = std::time::Instant::now();
                let result = if remote.is_empty() { Ok((true, Vec::new())) } else { redis.execute_all(&remote).await };
                finish(parts, result, Some(started))
            }
            BackendInner::Memory(_) => self.decide_enforced_blocking(parts),
        }
    }

    /// Runs enforcing parts in one atomic step, blocking the calling thread on Redis.
    fn decide_enforced_blocking(&self, parts: &[Prepared<'_>]) -> Result<Decided> {
        match &*self.inner {
            BackendInner::Memory(memory) => {
                let overrides: Vec<_> = parts.iter().map(|p| p.limiter.override_for(p.key)).collect();
                let local: Vec<MemoryPart<'_>> = parts
                    .iter()
                    .zip(&overrides)
                    .filter_map(|(p, over)| match &p.limiter.inner.target {
                        Target::Memory { namespace, .. } => Some(MemoryPart {
                            namespace: *namespace,
                            key: p.key,
                            algorithm: over.as_ref().map_or(&p.limiter.inner.algorithm, |o| &o.algorithm),
                            op: p.op,
                        }),
                        _ => None,
                    })
                    .collect();
                let started = parts.first().and_then(|p| p.limiter.inner.observe.start());
                let result = if local.is_empty() { Ok((true, Vec::new())) } else { memory.execute_all(&local) };
                finish(parts, result, started)
            }
            BackendInner::Redis(redis) => {
                let context = RedisContext::of(parts);
                let remote = context.parts(parts);
                redis.ensure_live_task();
                let started = std::time::Instant::now();
                let result =
                    if remote.is_empty() { Ok((true, Vec::new())) } else { redis.execute_all_blocking(&remote) };
                finish(parts, result, Some(started))
            }
        }
    }
}

/// Refuses a part that shares its state (same kind, name and key) with an earlier part whose
/// limiter has another spec. Parts on one state are decided together, each at the cost of the
/// earlier ones plus its own, which holds only when one rule counts them all; one limiter
/// twice on a key is fine.
fn refuse_shared_state_of_other_specs(parts: Vec<Prepared<'_>>) -> Result<Vec<Prepared<'_>>> {
    for (j, later) in parts.iter().enumerate() {
        let earlier = parts[..j].iter().position(|p| {
            p.key == later.key
                && p.limiter.kind() == later.limiter.kind()
                && p.limiter.name() == later.limiter.name()
                && p.limiter.inner.algorithm != later.limiter.inner.algorithm
        });
        if let Some(i) = earlier {
            return Err(Error::invalid_field(
                format!("parts[{j}]"),
                format!(
                    "{:?} shares its state for key {:?} with parts[{i}], a limiter of the same name and kind with \
                     another spec; one atomic step cannot decide both",
                    later.limiter.name(),
                    later.key
                ),
            ));
        }
    }
    Ok(parts)
}

/// What each part of a combination decides under on Redis: its live override, if any, and the
/// failure policy that follows from it.
struct RedisContext<'a> {
    overrides: Vec<Option<std::sync::Arc<crate::live::Compiled>>>,
    failovers: Vec<Option<std::borrow::Cow<'a, crate::backend::Failover>>>,
}

impl<'a> RedisContext<'a> {
    fn of(parts: &[Prepared<'a>]) -> RedisContext<'a> {
        let overrides: Vec<_> = parts.iter().map(|p| p.limiter.override_for(p.key)).collect();
        let failovers = parts
            .iter()
            .zip(&overrides)
            .map(|(p, over)| match &p.limiter.inner.target {
                Target::Redis { failover, .. } => Some(Limiter::failover_for(failover, over.as_deref())),
                _ => None,
            })
            .collect();
        RedisContext { overrides, failovers }
    }

    /// The parts the Redis backend runs (unlimited parts need none).
    fn parts<'b>(&'b self, parts: &'b [Prepared<'a>]) -> Vec<RedisPart<'b>> {
        parts
            .iter()
            .zip(&self.overrides)
            .zip(&self.failovers)
            .filter_map(|((p, over), failover)| {
                Some(RedisPart {
                    kind: p.limiter.kind(),
                    name: p.limiter.name(),
                    key: p.key,
                    algorithm: over.as_ref().map_or(&p.limiter.inner.algorithm, |o| &o.algorithm),
                    failover: failover.as_deref()?,
                    op: p.op,
                })
            })
            .collect()
    }
}

/// The parts of a combination split into enforcing ones and those that never refuse for their
/// key (see [`Limiter::never_refuses`]), with their index, or `None` when every part enforces.
#[allow(clippy::type_complexity)]
fn split_alone<'a>(parts: &[Prepared<'a>]) -> Option<(Vec<Prepared<'a>>, Vec<(usize, Prepared<'a>)>)> {
    let alone: Vec<bool> = parts.iter().map(|p| p.limiter.never_refuses(p.key)).collect();
    if !alone.contains(&true) {
        return None;
    }
    let enforced = parts.iter().zip(&alone).filter(|(_, a)| !**a).map(|(p, _)| *p).collect();
    let apart = parts.iter().enumerate().filter(|(i, _)| alone[*i]).map(|(i, p)| (i, *p)).collect();
    Some((enforced, apart))
}

/// Puts the decisions of the parts that never refuse back at their places among the parts.
/// Such a part takes no part in the atomic step: it is checked on its own after the enforcing
/// parts were admitted (consuming what it admits, and saying what enforcement would have
/// refused), and only peeked when they were refused (consuming nothing, as the combination).
fn with_parts_alone(decided: &mut Decided, alone: Vec<(usize, Prepared<'_>, Decision)>) {
    for (i, part, decision) in alone {
        let at = i.min(decided.combined.parts.len());
        decided.combined.parts.insert(
            at,
            PartDecision { limiter: part.limiter.clone(), key: part.key.to_owned(), cost: part.cost, decision },
        );
    }
}

/// The combined decision from the backend's outcomes (one per part that is not unlimited, in
/// order), counted in each part's limiter's metrics.
fn finish(
    parts: &[Prepared<'_>],
    result: Result<(bool, Vec<Outcome>)>,
    started: Option<std::time::Instant>,
) -> Result<Decided> {
    let (admitted, outcomes) = match result {
        Ok(done) => done,
        Err(e) => {
            if reached_backend(&e) {
                for part in parts {
                    part.limiter.inner.metrics.add(Counter::Errors, 1);
                    part.limiter.time(Call::Check, Counter::Errors, started);
                }
            }
            return Err(e);
        }
    };
    let mut outcomes = outcomes.into_iter();
    let mut decided = Vec::with_capacity(parts.len());
    let mut retry_after = Duration::ZERO;
    let mut wake = None;
    for part in parts {
        let outcome = match &part.limiter.inner.target {
            Target::Nowhere => Outcome::of(Decision::unlimited()),
            _ => outcomes.next().ok_or_else(|| Error::BackendUnavailable {
                message: "check_all: the backend answered fewer parts than it was given".into(),
            })?,
        };
        if !outcome.decision.allowed {
            retry_after = retry_after.max(outcome.decision.retry_after);
        }
        // Counted as the combination went: a part that alone would pass consumed nothing.
        let m = &part.limiter.inner.metrics;
        let counter = counter_of(outcome.served, admitted, false);
        m.add(counter, 1);
        if let (Some(started), Target::Redis { .. }) = (started, &part.limiter.inner.target) {
            m.observe_latency(started.elapsed());
        }
        part.limiter.time(Call::Check, counter, started);
        let mut outcome = outcome;
        if !admitted && wake.is_none() && !outcome.decision.allowed {
            wake = outcome.wake.take();
        }
        let decision = if admitted {
            // Each admitted part carries its own settle ticket: a combined decision is settled
            // part by part, with each part's limiter.
            let served = outcome.served;
            let granted = part.limiter.granted(outcome, None);
            part.limiter.ticketed(granted, served, part.key, part.cost)
        } else {
            let mut decision = outcome.decision;
            decision.lease = None;
            decision
        };
        decided.push(PartDecision {
            limiter: part.limiter.clone(),
            key: part.key.to_owned(),
            cost: part.cost,
            decision,
        });
    }
    if !admitted && retry_after.is_zero() {
        // Every part alone would pass, yet the step refused (a lease abandoned in flight):
        // retry at once.
        retry_after = Duration::from_micros(1);
    }
    Ok(Decided {
        combined: CombinedDecision {
            allowed: admitted,
            retry_after: if admitted { Duration::ZERO } else { retry_after },
            parts: decided,
        },
        wake,
    })
}
