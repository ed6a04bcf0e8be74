//! `check_all` on Redis: every part in one call of the combined script (see
//! [`crate::engine::script_all`]), so the parts are decided atomically at one instant of the
//! server's clock, and a refused combination leaves every key as it found it.
//!
//! On a Cluster one script's keys must share a slot: every part's hash tag must be the same,
//! which limiters get by co-locating their keys (see `colocate` in the limiter spec). A
//! combination whose tags differ is refused before anything is sent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use redis::Cmd;

use super::keys::KeyBuilder;
use super::{evalsha, open_decision, Failover, RedisBackend, FALLBACK_LEASE_BIT};
use crate::backend::memory::MemoryPart;
use crate::backend::FailurePolicy;
use crate::engine::concurrent::Concurrent;
use crate::engine::script_all::{self, SCRIPT};
use crate::engine::{Algorithm, Colocate, Kind, Op, Outcome, Served};
use crate::error::{Error, Result};

/// One part of a combination on Redis.
pub(crate) struct RedisPart<'a> {
    pub kind: Kind,
    pub name: &'a str,
    pub key: &'a str,
    pub algorithm: &'a Algorithm,
    pub failover: &'a Failover,
    pub op: Op,
}

/// The combined call, ready to send, each part's wake-up list, and how each part was decided:
/// its op (see `decide` in [`crate::engine::script_all`]) and the first part on its state.
struct CombinedCall {
    cmd: Cmd,
    wake_keys: Vec<Option<String>>,
    decided: Vec<(Op, usize)>,
}

/// Abandons, when a combined call ends without an answer after it was sent, the leases its
/// concurrent parts asked for (see `AbandonOnDrop` in the parent module).
struct AbandonAll<'a> {
    backend: &'a Arc<RedisBackend>,
    leases: Vec<(Kind, &'a str, &'a str, Concurrent, u128, Colocate)>,
    sent: AtomicBool,
}

impl Drop for AbandonAll<'_> {
    fn drop(&mut self) {
        if *self.sent.get_mut() {
            for (kind, name, key, c, lease_id, colocate) in self.leases.drain(..) {
                self.backend.abandon_later(kind, name, key, c, lease_id, colocate);
            }
        }
    }
}

impl RedisBackend {
    /// Runs every part in one script call; returns whether all were admitted and each part's
    /// outcome. When Redis cannot answer, the failure policy applies to the combination as a
    /// whole: open (every part allowed) when every part's policy is `fail_open`, the in-memory
    /// fallback (itself all or nothing) when every part has one, else the error.
    pub(crate) async fn execute_all(self: &Arc<Self>, parts: &[RedisPart<'_>]) -> Result<(bool, Vec<Outcome>)> {
        let call = self.prepare_all(parts)?;
        let mut abandon = self.abandon_all(parts);
        let reply = evalsha::run_cmd(self.connections(), self.deadline(), &SCRIPT, call.cmd, &abandon.sent).await;
        let result = reply.and_then(|reply| self.finish_all(parts, call.wake_keys, call.decided, &reply));
        if result.is_ok() {
            abandon.leases.clear();
        }
        self.policy_all(result, parts)
    }

    /// The blocking form of [`Self::execute_all`].
    pub(crate) fn execute_all_blocking(self: &Arc<Self>, parts: &[RedisPart<'_>]) -> Result<(bool, Vec<Outcome>)> {
        let call = self.prepare_all(parts)?;
        let mut abandon = self.abandon_all(parts);
        let reply = evalsha::run_cmd_blocking(self.connections(), self.deadline(), &SCRIPT, call.cmd, &abandon.sent);
        let result = reply.and_then(|reply| self.finish_all(parts, call.wake_keys, call.decided, &reply));
        if result.is_ok() {
            abandon.leases.clear();
        }
        self.policy_all(result, parts)
    }

    fn abandon_all<'a>(self: &'a Arc<Self>, parts: &[RedisPart<'a>]) -> AbandonAll<'a> {
        let leases = parts
            .iter()
            .filter_map(|p| match (p.algorithm, p.op) {
                (Algorithm::Concurrent(c), Op::Check { lease_id, .. }) => {
                    Some((p.kind, p.name, p.key, *c, lease_id, p.failover.colocate))
                }
                _ => None,
            })
            .collect();
        AbandonAll { backend: self, leases, sent: AtomicBool::new(false) }
    }

    /// The combined call: each part's single call (see [`RedisBackend::prepare`]), its keys and
    /// arguments laid end to end after the shapes, each shape with the cost the part is decided
    /// at: its own plus every earlier part's on the same state (same first key), or for a
    /// concurrent part the slots they take. On a Cluster, every part must have the same hash
    /// tag; a combination that spans slots is refused, naming the limiters.
    fn prepare_all(&self, parts: &[RedisPart<'_>]) -> Result<CombinedCall> {
        if self.cluster {
            let tags: Vec<String> = parts
                .iter()
                .map(|p| KeyBuilder::for_limiter(self.prefix(), p.kind, p.name, p.key, p.failover.colocate).hash_tag())
                .collect();
            if tags.iter().any(|t| *t != tags[0]) {
                let names: Vec<String> = parts
                    .iter()
                    .enumerate()
                    .map(|(i, p)| format!("parts[{i}] ({} {:?}, key {:?})", p.kind.as_str(), p.name, p.key))
                    .collect();
                return Err(Error::invalid(
                    "parts",
                    format!(
                        "span several Redis Cluster slots: {}; one atomic step needs one slot, so give these \
                         limiters \"colocate\": \"tenant\" and keys that share their tenant (the part before the \
                         first ':')",
                        names.join(", ")
                    ),
                ));
            }
        }
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut args: Vec<Vec<u8>> = Vec::new();
        let mut shapes = Vec::with_capacity(parts.len());
        let mut wake_keys = Vec::with_capacity(parts.len());
        let mut decided = Vec::with_capacity(parts.len());
        let mut asked: HashMap<Vec<u8>, (u64, usize)> = HashMap::new();
        for (i, part) in parts.iter().enumerate() {
            let call =
                self.prepare_for(part.kind, part.name, part.key, part.algorithm, part.op, part.failover.colocate)?;
            let engine = script_all::engine_index(call.script.name).ok_or_else(|| {
                Error::invalid_field(
                    format!("parts[{i}]"),
                    format!("a {} limiter cannot take part", part.kind.as_str()),
                )
            })?;
            let words: Vec<&[u8]> = call
                .cmd
                .args_iter()
                .filter_map(|a| match a {
                    redis::Arg::Simple(bytes) => Some(bytes),
                    _ => None,
                })
                .collect();
            let key_count: usize = std::str::from_utf8(words[2]).ok().and_then(|n| n.parse().ok()).unwrap_or(0);
            keys.extend(words[3..3 + key_count].iter().map(|k| k.to_vec()));
            args.extend(words[3 + key_count..].iter().map(|a| a.to_vec()));
            let (op, decide) = match part.op {
                Op::Check { cost, lease_id, waiter } => {
                    let own = if matches!(part.algorithm, Algorithm::Concurrent(_)) { 1 } else { cost };
                    let (sum, first) = asked.entry(words[3].to_vec()).or_insert((0, i));
                    *sum += own;
                    ((Op::Check { cost: cost - own + *sum, lease_id, waiter }, *first), *sum)
                }
                other => ((other, i), 0),
            };
            shapes.push((engine, key_count, words.len() - 3 - key_count, decide));
            wake_keys.push(call.wake_key);
            decided.push(op);
        }
        let mut cmd = SCRIPT.evalsha(keys.len());
        for key in &keys {
            cmd.arg(key.as_slice());
        }
        match self.manual_now() {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        cmd.arg(parts.len());
        for (engine, key_count, arg_count, decide) in shapes {
            cmd.arg(engine).arg(key_count).arg(arg_count).arg(decide);
        }
        for arg in &args {
            cmd.arg(arg.as_slice());
        }
        Ok(CombinedCall { cmd, wake_keys, decided })
    }

    /// Each part's outcome from the combined reply, read by its own engine: as its own check
    /// when the combination was admitted, else as the check it was decided as.
    fn finish_all(
        self: &Arc<Self>,
        parts: &[RedisPart<'_>],
        wake_keys: Vec<Option<String>>,
        decided: Vec<(Op, usize)>,
        reply: &[i64],
    ) -> Result<(bool, Vec<Outcome>)> {
        let malformed =
            || Error::BackendUnavailable { message: format!("Redis: unexpected check_all reply {reply:?}") };
        let (admitted, replies) = script_all::split(reply).ok_or_else(malformed)?;
        if replies.len() != parts.len() {
            return Err(malformed());
        }
        let mut outcomes = Vec::with_capacity(parts.len());
        // The latest part of each state that its dry run admitted.
        let mut last_admitted: HashMap<usize, usize> = HashMap::new();
        for (i, (((part, wake_key), (decided, first)), reply)) in
            parts.iter().zip(wake_keys).zip(decided).zip(replies).enumerate()
        {
            let op = if admitted { part.op } else { decided };
            let mut outcome = self.finish(part.algorithm, op, wake_key, reply.to_vec())?;
            if !admitted {
                // A refused part reports the state the earlier admitted parts on its state
                // would have left, as when the parts run one after the other.
                if outcome.decision.allowed {
                    last_admitted.insert(first, i);
                } else if let Some(&before) = last_admitted.get(&first) {
                    let before: &Outcome = &outcomes[before];
                    outcome.decision.remaining = before.decision.remaining;
                    outcome.decision.reset_after = before.decision.reset_after;
                }
            }
            outcomes.push(outcome);
        }
        for outcome in &outcomes {
            if outcome.config_mismatch {
                self.counters.config_mismatches.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok((admitted, outcomes))
    }

    /// What a combination returns given what Redis did (see [`Self::execute_all`]).
    fn policy_all(
        &self,
        remote: Result<(bool, Vec<Outcome>)>,
        parts: &[RedisPart<'_>],
    ) -> Result<(bool, Vec<Outcome>)> {
        let error = match remote {
            Ok(done) => return Ok(done),
            Err(e @ (Error::BackendUnavailable { .. } | Error::Timeout { .. })) => e,
            Err(e @ Error::BackendRejected { .. }) => {
                self.counters.rejected.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let n = parts.len() as u64;
        if parts.iter().all(|p| p.failover.policy == FailurePolicy::FailOpen) {
            self.counters.failed_open.fetch_add(n, Ordering::Relaxed);
            let open = parts
                .iter()
                .map(|p| Outcome { served: Served::FailedOpen, ..Outcome::of(open_decision(p.algorithm, p.op)) })
                .collect();
            return Ok((true, open));
        }
        let fallbacks: Option<Vec<MemoryPart<'_>>> = parts
            .iter()
            .map(|p| {
                let (algorithm, namespace) = p.failover.fallback.as_ref()?;
                let op = match p.op {
                    Op::Check { cost, lease_id, waiter } => {
                        Op::Check { cost, lease_id: lease_id | FALLBACK_LEASE_BIT, waiter }
                    }
                    other => other,
                };
                Some(MemoryPart { namespace: *namespace, key: p.key, algorithm, op })
            })
            .collect();
        if let (Some(fallbacks), FailurePolicy::Fallback { .. }) = (fallbacks, self.policy) {
            self.counters.fell_back.fetch_add(n, Ordering::Relaxed);
            let (admitted, outcomes) = self.fallback.execute_all(&fallbacks)?;
            let outcomes = outcomes.into_iter().map(|o| Outcome { served: Served::FellBack, ..o }).collect();
            return Ok((admitted, outcomes));
        }
        self.counters.failed.fetch_add(n, Ordering::Relaxed);
        Err(error)
    }
}
