//! The concurrent limiter: at most `limit` leases held at once. A lease older than
//! `lock_timeout` may be reclaimed when a caller needs its slot. Every grant carries a fencing
//! token `max(previous + 1, now)`: strictly increasing per key, even across idle expiry of the
//! state (as long as the clock does not go backwards).

use std::sync::{Arc, LazyLock};

use redis::Cmd;
use tokio::sync::Semaphore;

use super::contract::{
    malformed, not_applicable, Combined, DecisionReply, Engine, Evaluation, Op, Outcome, Waiter, Wake, WakeList,
};
use super::decision;
use super::lua::LuaScript;
use super::words;
use crate::decision::Lease;
use std::time::Duration;

use super::kinds::{share, KindSpec};
use super::spec_json::secs;
use super::spec_json::{JsonFields, JsonWriter};
use super::Algorithm;
use crate::defaults::DEFAULT_LOCK_TIMEOUT;
use crate::error::{Error, Result};
use crate::params::{micros, validate_count, validate_duration};
use crate::views::{lease_digest, ConcurrentUse, Holder as HolderView, MAX_HOLDERS_SHOWN};

/// Parameters in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Concurrent {
    pub limit: u64,
    pub lock_us: u64,
}

/// One held slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holder {
    id: u128,
    expires_at: u64,
    token: u64,
    granted_at: u64,
}

/// Per-key state.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConcurrentState {
    holders: Vec<Holder>,
    last_token: u64,
    /// Holders whose lease had expired and were reclaimed by a later caller.
    pub reclaimed: u64,
    /// Callers of `acquire` refused and waiting: (waiter id, instant its wait ends).
    waiters: Vec<(u128, u64)>,
}

impl ConcurrentState {
    /// What an operator sees of this state at `now`.
    pub(crate) fn usage(&self, now: u64) -> ConcurrentUse {
        let mut holders = self.holders.clone();
        holders.sort_by_key(|h| (h.granted_at, h.token));
        let mut out = ConcurrentUse {
            held: holders.len() as u64,
            waiters: self.waiters.iter().filter(|w| w.1 > now).count() as u64,
            ..ConcurrentUse::default()
        };
        out.holders = holders
            .iter()
            .take(MAX_HOLDERS_SHOWN)
            .map(|h| holder_view(&format!("{:032x}", h.id), Some((h.token, h.granted_at)), h.expires_at, now))
            .collect();
        out
    }

    /// Counts `waiter` among the waiters while its check is refused; forgets it once granted.
    fn note_waiter(&mut self, now: u64, waiter: Option<Waiter>, allowed: bool) {
        let Some(waiter) = waiter else { return };
        self.waiters.retain(|w| w.1 > now && w.0 != waiter.id);
        if !allowed && waiter.wait_us > 0 {
            self.waiters.push((waiter.id, now.saturating_add(waiter.wait_us)));
        }
    }
}

/// An operator's view of one holder: `grant` is (fencing token, granted at) when recorded.
pub(crate) fn holder_view(id_hex: &str, grant: Option<(u64, u64)>, expires_at: u64, now: u64) -> HolderView {
    let mut view = HolderView {
        lease: lease_digest(id_hex),
        fencing_token: None,
        age: None,
        expires_in: Duration::from_micros(expires_at.saturating_sub(now)),
        overdue: expires_at <= now,
    };
    if let Some((token, granted_at)) = grant {
        view.fencing_token = Some(token);
        view.age = Some(Duration::from_micros(now.saturating_sub(granted_at)));
    }
    view
}

/// What `release` (or `extend`) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The lease was held (and is now free, or renewed); `overdue` when its lock_timeout (as
    /// last extended) had already passed: the holder ran too long, though nobody reclaimed it.
    Freed { overdue: bool },
    /// The lease is unknown: reclaimed by another caller, or its state expired.
    Lost,
}

impl Concurrent {
    /// Compiles `concurrent(limit, lock_timeout)`, naming a bad parameter.
    pub(crate) fn compile(limit: u64, lock_timeout: Duration) -> Result<Concurrent> {
        Ok(Concurrent {
            limit: validate_count("limit", limit)?,
            lock_us: micros(validate_duration("lock_timeout", lock_timeout)?),
        })
    }

    /// Tries to grant lease `id` (or, when `commit` is false, tells whether one would be granted).
    pub(crate) fn evaluate(&self, state: &mut ConcurrentState, now: u64, id: u128, commit: bool) -> Evaluation {
        let live = state.holders.iter().filter(|h| h.expires_at > now).count() as u64;
        let mut changed = false;
        if commit && state.holders.len() as u64 >= self.limit && live < self.limit {
            // Full only because of overdue holders: reclaim them.
            let before = state.holders.len();
            state.holders.retain(|h| h.expires_at > now);
            state.reclaimed += (before - state.holders.len()) as u64;
            changed = true;
        }
        let allowed = live < self.limit;
        if !allowed || !commit {
            let retry = if allowed { 0 } else { self.retry_us(state, now, live) };
            let d = decision(allowed, self.limit, self.limit - live.min(self.limit), retry, self.reset_us(state, now));
            return Evaluation { decision: d, changed };
        }
        let token = (state.last_token + 1).max(now);
        state.last_token = token;
        state.holders.push(Holder { id, expires_at: now + self.lock_us, token, granted_at: now });
        let mut d = decision(true, self.limit, self.limit - live - 1, 0, self.reset_us(state, now));
        d.lease = Some(Lease { id, fencing_token: token, granted_at_micros: now });
        Evaluation { decision: d, changed: true }
    }

    /// Renews lease `id` for another `lock_timeout` from `now`, if it is still held.
    pub(crate) fn extend(&self, state: &mut ConcurrentState, now: u64, id: u128) -> Released {
        match state.holders.iter_mut().find(|h| h.id == id) {
            Some(holder) => {
                let overdue = holder.expires_at <= now;
                holder.expires_at = now + self.lock_us;
                Released::Freed { overdue }
            }
            None => Released::Lost,
        }
    }

    /// Frees lease `id` if it is still held.
    pub(crate) fn release(&self, state: &mut ConcurrentState, now: u64, id: u128) -> Released {
        match state.holders.iter().position(|h| h.id == id) {
            Some(index) => {
                let holder = state.holders.swap_remove(index);
                Released::Freed { overdue: holder.expires_at <= now }
            }
            None => Released::Lost,
        }
    }

    /// For a refused call: the time until the live holders drop below the limit, when the
    /// `live - limit + 1`-th earliest live lease expires. Overdue holders still stored (full
    /// with live ones, nothing was reclaimed) do not count: their expiry has passed.
    fn retry_us(&self, state: &ConcurrentState, now: u64, live: u64) -> u64 {
        let mut expiries: Vec<u64> = state.holders.iter().map(|h| h.expires_at).filter(|&e| e > now).collect();
        if expiries.is_empty() {
            return 0; // not refused: a refusal means `live >= limit >= 1`
        }
        let index = (live.saturating_sub(self.limit) as usize).min(expiries.len() - 1);
        let (_, expiry, _) = expiries.select_nth_unstable(index);
        *expiry - now
    }

    fn reset_us(&self, state: &ConcurrentState, now: u64) -> u64 {
        state.holders.iter().map(|h| h.expires_at).max().unwrap_or(0).saturating_sub(now)
    }
}

/// The roles of a concurrent call's keys, in KEYS order (see `concurrent.lua`).
pub(crate) const KEYS: [&str; 6] = ["h", "t", "w", "x", "g", "q"];

/// `concurrent.lua`: the same rule on a hash of holders.
pub(crate) static SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("concurrent", include_str!("concurrent.lua")));

/// What `concurrent.lua` returns for a release or an extension: whether the lease was held,
/// the instant, and whether it had outlived its lock_timeout.
struct LeaseReply {
    held: bool,
    now: u64,
    overdue: bool,
}

/// What `concurrent.lua` returns for a check or a peek: the decision, the fencing token of a
/// grant and how many overdue leases the call reclaimed.
struct CheckReply {
    decision: DecisionReply,
    token: u64,
    reclaimed: u64,
}

impl Concurrent {
    /// The outcome of a release or an extension in memory.
    fn renewed(&self, state: &mut ConcurrentState, now: u64, released: Released) -> Result<Outcome> {
        match released {
            Released::Freed { overdue } => {
                let mut e = self.evaluate(state, now, 0, false);
                e.decision.decided_at_micros = now;
                Ok(Outcome { lease_overdue: overdue, ..Outcome::of(e.decision) })
            }
            Released::Lost => Err(Error::lease_lost()),
        }
    }
}

/// Leaves one wake-up for a waiter of a key whose slot was freed. A wake-up is kept until a
/// waiter takes it, so a release that comes before its waiter registers is not lost (two
/// releases wake two waiters however they interleave); at most `limit` are kept, like the Redis
/// wake-up list, so releases nobody waited for cost a later waiter at most `limit` spurious
/// re-checks.
fn wake_one(wake_ups: &Semaphore, limit: u64) {
    // Called under the memory backend's shard lock: the count cannot grow between the test and
    // the add.
    if (wake_ups.available_permits() as u64) < limit.min(1024) {
        wake_ups.add_permits(1);
    }
}

/// A key's state in memory: the holders, and the wake-ups of waiters (see [`Wake::Local`]). A
/// clone (a `check_all` snapshot) shares the wake-ups.
#[derive(Clone)]
pub(crate) struct LocalState(pub ConcurrentState, pub Arc<Semaphore>);

impl Default for LocalState {
    fn default() -> Self {
        LocalState(ConcurrentState::default(), Arc::new(Semaphore::new(0)))
    }
}

impl Engine for Concurrent {
    const SCRIPTS: &'static [&'static LazyLock<LuaScript>] = &[&SCRIPT];
    const COMBINED: Option<Combined> =
        Some(Combined { name: "concurrent", lua: include_str!("concurrent.lua"), cost_at: 8 });

    type State = LocalState;

    #[inline]
    fn apply(&self, state: &mut Self::State, now: u64, op: Op, changed: &mut bool) -> Result<Outcome> {
        let LocalState(st, wake_ups) = state;
        match op {
            Op::Check { .. } | Op::Peek => {
                let (lease_id, commit, waiter) = match op {
                    Op::Check { lease_id, waiter, .. } => (lease_id, true, waiter),
                    _ => (0, false, None),
                };
                let reclaimed_before = st.reclaimed;
                let mut e = self.evaluate(st, now, lease_id, commit);
                e.decision.decided_at_micros = now;
                if waiter.is_some() {
                    st.note_waiter(now, waiter, e.decision.allowed);
                    e.changed = true;
                }
                let wake = (!e.decision.allowed).then(|| Wake::Local(wake_ups.clone()));
                *changed = e.changed;
                Ok(Outcome { wake, reclaimed: st.reclaimed - reclaimed_before, ..Outcome::of(e.decision) })
            }
            Op::Release { lease_id } => {
                let released = self.release(st, now, lease_id);
                if let Released::Freed { .. } = released {
                    wake_one(wake_ups, self.limit);
                    *changed = true;
                }
                self.renewed(st, now, released)
            }
            // In process, a check cannot be left half done: a lease abandoned here was never
            // granted, or its caller got it (nothing to do either way), unless it is still held.
            Op::Abandon { lease_id } => {
                if let Released::Freed { .. } = self.release(st, now, lease_id) {
                    wake_one(wake_ups, self.limit);
                    *changed = true;
                }
                let mut e = self.evaluate(st, now, 0, false);
                e.decision.decided_at_micros = now;
                Ok(Outcome::of(e.decision))
            }
            Op::Extend { lease_id } => {
                let released = self.extend(st, now, lease_id);
                if let Released::Freed { .. } = released {
                    *changed = true;
                }
                self.renewed(st, now, released)
            }
            Op::Adjust { .. } | Op::Settle { .. } | Op::Take { .. } | Op::GiveBack { .. } => {
                Err(not_applicable(op, self))
            }
        }
    }

    fn expires_at(&self, state: &Self::State) -> u64 {
        let holders = state.0.holders.iter().map(|h| h.expires_at);
        holders.chain(state.0.waiters.iter().map(|w| w.1)).max().unwrap_or(0)
    }

    /// Holders (`h`), fencing token (`t`), wake-up list (`w`), abandoned leases (`x`), grants
    /// (`g`: each holder's fencing token and grant instant), waiters (`q`).
    fn keys(&self, _op: Op) -> &'static [&'static str] {
        &KEYS
    }

    fn state_keys(&self) -> &'static [&'static str] {
        &["h", "t", "x", "g", "q"]
    }

    /// `limit lock_us lease_id waiter_id wait_us` (ids in 32 hex digits; no waiter: `'' 0`).
    fn encode(&self, op: Op, _now: Option<u64>, cmd: &mut Cmd) -> Result<()> {
        let (lease_id, waiter) = match op {
            Op::Check { lease_id, waiter, .. } => (lease_id, waiter),
            Op::Release { lease_id } | Op::Extend { lease_id } | Op::Abandon { lease_id } => (lease_id, None),
            Op::Peek => (0, None),
            Op::Adjust { .. } | Op::Settle { .. } | Op::Take { .. } | Op::GiveBack { .. } => {
                return Err(not_applicable(op, self))
            }
        };
        cmd.arg(self.limit).arg(self.lock_us).arg(format!("{lease_id:032x}"));
        match waiter {
            Some(w) => cmd.arg(format!("{:032x}", w.id)).arg(w.wait_us),
            None => cmd.arg("").arg(0),
        };
        Ok(())
    }

    fn decode(&self, op: Op, reply: &[i64]) -> Result<Outcome> {
        match op {
            // Freed, or remembered so that the check it belongs to grants nothing: done either way.
            Op::Abandon { .. } => Ok(Outcome::of(decision(true, self.limit, 0, 0, 0))),
            Op::Release { .. } | Op::Extend { .. } => {
                let r = match *reply {
                    [held, now, overdue] => {
                        LeaseReply { held: held == 1, now: now.max(0) as u64, overdue: overdue == 1 }
                    }
                    [_, now] => LeaseReply { held: false, now: now.max(0) as u64, overdue: false },
                    _ => return Err(malformed("concurrent", reply)),
                };
                if !r.held {
                    return Err(Error::lease_lost());
                }
                let mut d = decision(true, self.limit, 0, 0, 0);
                d.decided_at_micros = r.now;
                Ok(Outcome { lease_overdue: r.overdue, ..Outcome::of(d) })
            }
            _ => {
                let (decision, rest) = DecisionReply::read("concurrent", reply)?;
                let &[token, reclaimed] = rest else { return Err(malformed("concurrent", reply)) };
                let r = CheckReply { decision, token: token.max(0) as u64, reclaimed: reclaimed.max(0) as u64 };
                let mut d = r.decision.decision();
                if let (true, Op::Check { lease_id, .. }) = (d.allowed, op) {
                    d.lease =
                        Some(Lease { id: lease_id, fencing_token: r.token, granted_at_micros: d.decided_at_micros });
                }
                Ok(Outcome { reclaimed: r.reclaimed, ..Outcome::of(d) })
            }
        }
    }

    fn wake_list(&self) -> Option<WakeList> {
        Some(WakeList { role: "w", slots: self.limit, ttl_us: self.lock_us })
    }

    fn capacity(&self) -> u64 {
        self.limit
    }

    /// A concurrent limiter grants one slot per call, whatever its capacity.
    #[inline]
    fn validate_cost(&self, cost: u64) -> Result<()> {
        if cost == 1 {
            return Ok(());
        }
        Err(Error::invalid(
            "cost",
            format!("a concurrent limiter grants one slot per call; cost must be 1, got {cost}"),
        ))
    }
}

/// The `concurrent` kind.
pub(crate) struct ConcurrentKind;

impl KindSpec for ConcurrentKind {
    /// `limit`, `lock_timeout`.
    type Fields = (u64, Duration);

    const SAMPLES: &'static [&'static str] = &[r#"{"kind":"concurrent","limit":10,"lock_timeout":30}"#];

    fn parse(_name: &str, json: &mut JsonFields<'_>) -> Result<Self::Fields> {
        Ok((json.count("limit")?, json.optional_seconds("lock_timeout")?.unwrap_or(DEFAULT_LOCK_TIMEOUT)))
    }

    fn words((limit, lock_timeout): &Self::Fields) -> String {
        format!("{} at once, reclaimed after {}", words::count(*limit), words::duration(*lock_timeout))
    }

    fn print(&(limit, lock_timeout): &Self::Fields, json: &mut JsonWriter) {
        json.put("limit", limit.into());
        json.put("lock_timeout", secs(lock_timeout));
    }

    fn scaled(&(limit, lock_timeout): &Self::Fields, divisor: u64) -> Self::Fields {
        (share(limit, divisor), lock_timeout)
    }

    fn compile(&(limit, lock_timeout): &Self::Fields) -> Result<Algorithm> {
        Ok(Algorithm::Concurrent(Concurrent::compile(limit, lock_timeout)?))
    }
}
