//! The leased token bucket: the token bucket of [`Gcra`], whose tokens a process takes from
//! Redis in chunks (leases) and spends in-process (see `crate::limiter::leased`).
//!
//! In memory (the memory backend, and the fallback of the `fallback` policy) it is exactly the
//! token bucket: a take is a check of its cost and a give-back changes nothing. On Redis,
//! `leased.lua` takes up to a lease's worth of tokens from the shared bucket in one atomic call
//! and gives unspent ones back exactly once per lease.
//!
//! A settle (see `docs/src/concepts/settle.md`) works on the shared bucket, so that it is exact
//! from any process: a charge is debt on the bucket, as for a token bucket; a refund is a
//! give-back to the lease the call's tokens were granted in (named by the ticket's instant,
//! the grant's), bounded by that lease's low, so the leased rule holds with settles in the mix.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Cmd;

use super::contract::{not_applicable, DecisionReply, Engine, Op, Outcome};
use super::gcra::{Gcra, GcraState};
use super::kinds::{share, KindSpec};
use super::lua::LuaScript;
use super::spec_json::{number, secs};
use super::spec_json::{JsonFields, JsonWriter};
use super::words;
use super::Algorithm;
use crate::defaults::DEFAULT_LEASED_LEASE_TTL;
use crate::error::{Error, Result};
use crate::params::{micros, validate_count, validate_duration};

/// How many chunks a full bucket holds when the spec leaves `chunk` out.
const DEFAULT_CHUNKS_PER_CAPACITY: u64 = 16;

/// A compiled leased token bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Leased {
    /// The shared bucket.
    pub gcra: Gcra,
    /// The most tokens one lease asks for.
    pub chunk: u64,
    /// How long a lease's tokens may be spent (µs).
    pub lease_us: u64,
}

impl Leased {
    /// Compiles `leased(rate, capacity, chunk, lease_ttl)`, naming the bad parameter.
    pub(crate) fn compile(rate: f64, capacity: u64, chunk: Option<u64>, lease_ttl: Duration) -> Result<Leased> {
        let gcra = Gcra::token_bucket(rate, capacity)?;
        let chunk = match chunk {
            None => Leased::default_chunk(capacity),
            Some(chunk) => {
                let chunk = validate_count("chunk", chunk)?;
                if chunk > capacity {
                    return Err(Error::invalid(
                        "chunk",
                        format!("{chunk} exceeds the capacity of {capacity}; a lease never holds more than the bucket"),
                    ));
                }
                chunk
            }
        };
        let lease_ttl = validate_duration("lease_ttl", lease_ttl)?;
        if lease_ttl < Duration::from_millis(1) {
            return Err(Error::invalid("lease_ttl", format!("must be at least 1 ms, got {lease_ttl:?}")));
        }
        Ok(Leased { gcra, chunk, lease_us: micros(lease_ttl) })
    }

    /// The default chunk of a bucket of `capacity` (see [`Leased::compile`]).
    pub(crate) fn default_chunk(capacity: u64) -> u64 {
        capacity.div_ceil(DEFAULT_CHUNKS_PER_CAPACITY).max(1)
    }
}

/// `leased.lua`.
pub(crate) static SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::token_bucket("leased", include_str!("leased.lua")));

impl Engine for Leased {
    const SCRIPTS: &'static [&'static LazyLock<LuaScript>] = &[&SCRIPT];

    type State = GcraState;

    /// The token bucket: a take admits exactly its cost (no lease is kept in memory), a
    /// give-back reads as a peek, and a settle is the token bucket's.
    #[inline]
    fn apply(&self, tat: &mut GcraState, now: u64, op: Op, changed: &mut bool) -> Result<Outcome> {
        let mut outcome = match op {
            Op::Take { cost, .. } => {
                self.gcra.apply(tat, now, Op::Check { cost, lease_id: 0, waiter: None }, changed)?
            }
            Op::GiveBack { .. } => self.gcra.apply(tat, now, Op::Peek, changed)?,
            Op::Check { .. } | Op::Peek | Op::Settle { .. } => self.gcra.apply(tat, now, op, changed)?,
            _ => return Err(not_applicable(op, self)),
        };
        if let (Op::Take { cost, .. }, true) = (op, outcome.decision.allowed) {
            outcome.granted = cost;
        }
        Ok(outcome)
    }

    fn expires_at(&self, tat: &GcraState) -> u64 {
        self.gcra.expires_at(tat)
    }

    fn keys(&self, _op: Op) -> &'static [&'static str] {
        &["s", "l"]
    }

    fn state_keys(&self) -> &'static [&'static str] {
        &["s", "l"]
    }

    /// `tick_ns T tau max_ahead capacity cost want lease_id back_id back lease_ms`; a plain
    /// check is a take of exactly its cost that keeps no lease open; a settle passes its cost,
    /// actual cost and the instant its tokens were granted in place of `cost want lease_id`.
    fn encode(&self, op: Op, _now: Option<u64>, cmd: &mut Cmd) -> Result<()> {
        let (cost, want, lease_id, back_id, back) = match op {
            Op::Take { cost, want, lease_id, back_id, back } => (cost, want.max(cost), lease_id, back_id, back),
            Op::Check { cost, .. } => (cost, cost, 0, 0, 0),
            Op::GiveBack { lease_id, tokens } => (0, 0, 0, lease_id, tokens),
            Op::Peek => (0, 0, 0, 0, 0),
            // The refund's lease is found by the instant its tokens were granted (see `leased.lua`).
            Op::Settle { cost, actual, at, .. } => (cost, actual, at, 0, 0),
            _ => return Err(not_applicable(op, self)),
        };
        let g = &self.gcra;
        cmd.arg(g.tick_ns).arg(g.emission).arg(g.tau).arg(g.max_ahead).arg(g.capacity);
        cmd.arg(cost).arg(want).arg(lease_id).arg(back_id).arg(back).arg(self.lease_us.div_ceil(1000));
        Ok(())
    }

    fn decode(&self, _op: Op, reply: &[i64]) -> Result<Outcome> {
        let (r, rest) = DecisionReply::read("leased", reply)?;
        let granted = rest.first().map_or(0, |g| (*g).max(0) as u64);
        Ok(Outcome { granted, ..Outcome::of(r.decision()) })
    }

    fn capacity(&self) -> u64 {
        self.gcra.capacity
    }
}

/// The `leased` kind.
pub(crate) struct LeasedKind;

impl KindSpec for LeasedKind {
    /// `rate`, `capacity`, `chunk`, `lease_ttl`.
    type Fields = (f64, u64, Option<u64>, Duration);

    const SAMPLES: &'static [&'static str] =
        &[r#"{"kind":"leased","rate":100,"capacity":100,"chunk":10,"lease_ttl":1}"#];
    const NOT_IN_CHECK_ALL: Option<&'static str> =
        Some("is a leased token bucket, which spends in process and cannot take part in check_all; use a token_bucket");

    fn parse(_name: &str, json: &mut JsonFields<'_>) -> Result<Self::Fields> {
        Ok((
            json.number("rate")?,
            json.count("capacity")?,
            json.optional_count("chunk")?,
            json.optional_seconds("lease_ttl")?.unwrap_or(DEFAULT_LEASED_LEASE_TTL),
        ))
    }

    fn words((rate, capacity, chunk, lease_ttl): &Self::Fields) -> String {
        format!(
            "{}, bursts of {}, leased{} for {}",
            words::rate(*rate),
            words::count(*capacity),
            chunk.map_or(String::new(), |chunk| format!(" in chunks of {}", words::count(chunk))),
            words::duration(*lease_ttl)
        )
    }

    fn print(&(rate, capacity, chunk, lease_ttl): &Self::Fields, json: &mut JsonWriter) {
        json.put("rate", number(rate));
        json.put("capacity", capacity.into());
        // Left out when not given: the default follows the capacity.
        if let Some(chunk) = chunk {
            json.put("chunk", chunk.into());
        }
        json.put("lease_ttl", secs(lease_ttl));
    }

    fn scaled(&(rate, capacity, chunk, lease_ttl): &Self::Fields, divisor: u64) -> Self::Fields {
        let capacity = share(capacity, divisor);
        (rate / divisor as f64, capacity, chunk.map(|c| c.min(capacity)), lease_ttl)
    }

    fn compile(&(rate, capacity, chunk, lease_ttl): &Self::Fields) -> Result<Algorithm> {
        Ok(Algorithm::Leased(Leased::compile(rate, capacity, chunk, lease_ttl)?))
    }
}
