//! What every engine provides, and the vocabulary shared by engines and backends: the
//! operations ([`Op`]), what an operation produced ([`Outcome`]) and how a refused concurrent
//! caller waits ([`Wake`]).
//!
//! An engine is one algorithm written once: it applies an operation to its in-memory state, and
//! it describes the same operation as a Redis script call (script, keys by role, arguments) and
//! reads that script's reply into named fields. Backends run engines through [`Engine`] and
//! know nothing of any engine's parameters or replies; engines know nothing of backends.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Cmd;
use tokio::sync::Semaphore;

use super::lua::LuaScript;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::{Error, Result};

/// An operation on one key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    /// Consume `cost` (for concurrent limiters: grant lease `lease_id`; a refused `waiter` is
    /// counted among the key's waiters for its wait).
    Check { cost: u64, lease_id: u128, waiter: Option<Waiter> },
    /// Report without consuming.
    Peek,
    /// Correct a GCRA charge from `estimate` to `actual`.
    Adjust { estimate: u64, actual: u64 },
    /// Settle a call charged `cost` at instant `at` (µs) to its `actual` cost: charge or refund
    /// the difference, by each engine's rule (see `docs/src/concepts/settle.md`). `id` is the
    /// ticket's: a backend applies a settle of one id once.
    Settle { id: u64, cost: u64, actual: u64, at: u64 },
    /// Free a concurrent lease.
    Release { lease_id: u128 },
    /// Renew a concurrent lease for another `lock_timeout`.
    Extend { lease_id: u128 },
    /// Give up a concurrent lease a check asked for but never handed to its caller: free it if
    /// it was granted, make sure it never is otherwise. Idempotent.
    Abandon { lease_id: u128 },
    /// Leased token bucket: give back `back` unspent tokens of lease `back_id` (0: none; a
    /// used-up lease being replaced is named with `back` 0, so Redis knows it holds nothing), then
    /// take `cost` tokens and up to `want` in all as lease `lease_id` (see `leased.lua`).
    Take { cost: u64, want: u64, lease_id: u64, back_id: u64, back: u64 },
    /// Leased token bucket: give back `tokens` unspent tokens of lease `lease_id`. Idempotent.
    GiveBack { lease_id: u64, tokens: u64 },
}

impl Op {
    /// The verb a script reads as its first argument.
    pub(crate) fn verb(self) -> &'static str {
        match self {
            Op::Check { .. } => "check",
            Op::Peek => "peek",
            Op::Adjust { .. } => "adjust",
            Op::Settle { .. } => "settle",
            Op::Release { .. } => "release",
            Op::Extend { .. } => "extend",
            Op::Abandon { .. } => "abandon",
            // A take is a check: the pause check of every script applies to it.
            Op::Take { .. } => "check",
            Op::GiveBack { .. } => "return",
        }
    }

    /// The cost a check asks for; 1 for anything else (what a peek reports on).
    pub(crate) fn cost(self) -> u64 {
        match self {
            Op::Check { cost, .. } | Op::Take { cost, .. } => cost,
            _ => 1,
        }
    }
}

/// A caller of `acquire` on a concurrent limiter, about to wait for a slot: a refused check
/// counts it among the key's waiters until its wait ends (`wait_us` from the check), a granted
/// one stops counting it. `id` stays the same over the caller's attempts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Waiter {
    pub id: u128,
    pub wait_us: u64,
}

/// What an engine returns: the decision, and whether the state it was given changed.
#[derive(Debug)]
pub(crate) struct Evaluation {
    pub decision: Decision,
    pub changed: bool,
}

/// What an operation on one key produced.
pub(crate) struct Outcome {
    pub decision: Decision,
    /// Set when a concurrent limiter refused: how to wait for a slot to be released.
    pub wake: Option<Wake>,
    /// Overdue leases this call reclaimed (concurrent limiters).
    pub reclaimed: u64,
    /// For a release or extension: the lease had outlived its lock_timeout (an overage).
    pub lease_overdue: bool,
    /// The state was last recorded by another configuration of the same name (counted in
    /// [`crate::BackendStats::config_mismatches`]).
    pub config_mismatch: bool,
    /// Who decided: the backend, or the failure policy while Redis failed.
    pub served: Served,
    /// For a leased take: the tokens Redis granted to the lease (the cost included).
    pub granted: u64,
    /// The call was refused by a block (see [`super::block`]), not by the limiter's state.
    pub blocked: bool,
    /// The call was refused by a hold, a pause or a block (see [`super::pause`]), not by the
    /// limiter's state.
    pub held: bool,
    /// For a settle: its id had been applied already, so this call changed nothing.
    #[allow(dead_code)] // set by every backend; read by tests of the backends
    pub settle_repeated: bool,
    /// For an admitted leased check: the instant (µs, Redis's clock) the tokens it spent were
    /// granted at, which its settle ticket carries (a refund finds their lease by it).
    pub charged_at: Option<u64>,
}

/// Who decided a call (see [`Outcome::served`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Served {
    /// The limiter's backend.
    Backend,
    /// The `fail_open` policy.
    FailedOpen,
    /// The in-memory fallback of the `fallback` policy.
    FellBack,
}

impl Outcome {
    /// An outcome that carries only a decision.
    pub(crate) fn of(decision: Decision) -> Outcome {
        Outcome {
            decision,
            wake: None,
            reclaimed: 0,
            lease_overdue: false,
            config_mismatch: false,
            served: Served::Backend,
            granted: 0,
            blocked: false,
            held: false,
            settle_repeated: false,
            charged_at: None,
        }
    }
}

/// Waits for a release pushed to a list: what a remote backend offers a refused concurrent
/// caller (the narrow view of it this module needs).
pub(crate) trait ReleaseWaiter: Send + Sync {
    /// Returns when a release may have freed a slot, or after `timeout`.
    fn wait_for_release<'a>(
        self: Arc<Self>,
        list_key: &'a str,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
}

/// How a refused concurrent caller waits for a release (one waiter woken per freed slot).
pub(crate) enum Wake {
    /// The memory backend's wake-ups: a release adds a permit, a waiter takes one (a reset
    /// closes the semaphore, waking every waiter).
    Local(Arc<Semaphore>),
    /// A list that releases push to (on Redis: popped with BLPOP on a dedicated connection).
    Remote { waiter: Arc<dyn ReleaseWaiter>, list_key: String },
}

impl Wake {
    /// Returns when a release may have freed a slot, or after `timeout` by `clock`.
    pub(crate) async fn wait(&self, clock: &dyn Clock, timeout: Duration) {
        match self {
            Wake::Local(wake_ups) => {
                tokio::select! {
                    taken = wake_ups.acquire() => {
                        // The wake-up is used up; Err: the key was reset.
                        if let Ok(permit) = taken {
                            permit.forget();
                        }
                    }
                    _ = clock.sleep(timeout) => {}
                }
            }
            Wake::Remote { waiter, list_key } => waiter.clone().wait_for_release(list_key, timeout).await,
        }
    }
}

/// An engine's part in `check_all`'s combined script (see [`Engine::COMBINED`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Combined {
    /// The name of the engine's script (the one [`Engine::script`] runs).
    pub(crate) name: &'static str,
    /// The script's body, which becomes a function of the combined script.
    pub(crate) lua: &'static str,
    /// The position in ARGV of a check's cost: a dry run puts the cost it decides at there.
    pub(crate) cost_at: usize,
}

/// One engine: its in-memory rule and its Redis call.
///
/// In memory, [`Engine::apply`] runs an operation on a key's [`Engine::State`]. On Redis, a call
/// is [`Engine::script`] with the keys named by [`Engine::keys`] (in KEYS order, as roles that
/// the backend turns into full key names), then ARGV `verb`, `now` (empty: the server's TIME)
/// and what [`Engine::encode`] appends; [`Engine::decode`] reads the reply.
pub(crate) trait Engine {
    /// Per-key state in memory; a key not seen yet (or expired) has the default.
    type State: Default;

    /// How a check of this engine takes part in `check_all`'s combined script
    /// (`engine/script_all.rs`); `None`: it has no one-script step to combine (it spends or
    /// paces in process, or needs no backend).
    const COMBINED: Option<Combined> = None;

    /// Every script this engine owns, listed for tools and benchmarks; the first is the one
    /// [`Engine::script`] runs unless the engine says otherwise.
    const SCRIPTS: &'static [&'static LazyLock<LuaScript>] = &[];

    /// Runs `op` on `state` at `now` (µs); sets `changed` when the state was modified. (The
    /// outcome is returned on its own, not paired with `changed`, so that the hot path can build
    /// it in the caller's return slot.)
    fn apply(&self, state: &mut Self::State, now: u64, op: Op, changed: &mut bool) -> Result<Outcome>;

    /// The instant (µs) after which `state` equals an empty one.
    fn expires_at(&self, state: &Self::State) -> u64;

    /// The script every call of this engine runs; `None` for an engine that needs no backend.
    fn script(&self) -> Option<&'static LuaScript> {
        Self::SCRIPTS.first().map(|script| LazyLock::force(script))
    }

    /// The roles of the keys a call of `op` passes, in KEYS order.
    fn keys(&self, op: Op) -> &'static [&'static str];

    /// The roles of every key holding this engine's state, which a reset deletes.
    fn state_keys(&self) -> &'static [&'static str];

    /// Appends the arguments of `op` after the verb and the instant; refuses an operation that
    /// does not apply to this engine. `now` is the instant sent with the call (a manual
    /// clock's); `None`: the script reads the server's TIME.
    fn encode(&self, op: Op, now: Option<u64>, cmd: &mut Cmd) -> Result<()>;

    /// The outcome of `op` from its script's reply.
    fn decode(&self, op: Op, reply: &[i64]) -> Result<Outcome>;

    /// The list a refused caller waits on for a release, if the engine has one.
    fn wake_list(&self) -> Option<WakeList> {
        None
    }

    /// The most a single call may cost: the burst, the smallest limit, or the slot count.
    fn capacity(&self) -> u64;

    /// Whether the engine corrects a charge after the fact (`Op::Adjust`, `points_used`), so a
    /// charge can be given back: what `Limiter::refundable` reports.
    fn adjusts(&self) -> bool {
        false
    }

    /// Rejects a cost that no amount of waiting could admit, naming `cost`.
    #[inline]
    fn validate_cost(&self, cost: u64) -> Result<()> {
        let capacity = self.capacity();
        if cost > capacity {
            return Err(Error::invalid(
                "cost",
                format!("{cost} exceeds the limiter's capacity of {capacity}; it could never be admitted"),
            ));
        }
        Ok(())
    }
}

/// A list that releases push wake-ups to (concurrent limiters).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WakeList {
    /// The role of the list's key.
    pub role: &'static str,
    /// The most wake-ups worth keeping: one per slot (a reset pushes that many).
    pub slots: u64,
    /// How long pushed wake-ups are kept (µs).
    pub ttl_us: u64,
}

/// The first six numbers of a script that decides itself (the exact sliding window's, the
/// concurrent limiter's): `{allowed, limit, remaining, retry_us, reset_us, now_us, …}`.
pub(crate) struct DecisionReply {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    pub retry_us: u64,
    pub reset_us: u64,
    pub now: u64,
}

impl DecisionReply {
    /// Reads the six numbers; returns the rest of the reply with them.
    pub(crate) fn read<'r>(engine: &str, reply: &'r [i64]) -> Result<(DecisionReply, &'r [i64])> {
        let [allowed, limit, remaining, retry_us, reset_us, now, rest @ ..] = reply else {
            return Err(malformed(engine, reply));
        };
        let n = |v: &i64| (*v).max(0) as u64;
        let r = DecisionReply {
            allowed: *allowed == 1,
            limit: n(limit),
            remaining: n(remaining),
            retry_us: n(retry_us),
            reset_us: n(reset_us),
            now: n(now),
        };
        Ok((r, rest))
    }

    /// The decision these figures make.
    pub(crate) fn decision(&self) -> Decision {
        let mut d = super::decision(self.allowed, self.limit, self.remaining, self.retry_us, self.reset_us);
        d.decided_at_micros = self.now;
        d
    }
}

/// The error of an operation that does not apply to an engine (a release on a token bucket).
#[cold]
pub(crate) fn not_applicable(op: Op, engine: &dyn std::fmt::Debug) -> Error {
    Error::invalid("operation", format!("{op:?} does not apply to {engine:?}"))
}

/// The error of a script reply that does not have the shape its engine documents.
#[cold]
pub(crate) fn malformed(engine: &str, reply: &[i64]) -> Error {
    Error::BackendUnavailable { message: format!("Redis: unexpected {engine} reply {reply:?}") }
}
