//! Counters over sub-buckets (Josiah Carlson's sliding window): several
//! `(duration, limit, precision)` limits checked in one pass and recorded in a second, so only
//! admitted calls are counted. A limit whose precision equals its duration is a plain fixed
//! window aligned to the epoch: that is the `bucket` limiter.
//!
//! Time is cut into blocks of `precision`; a limit covers the `blocks = ceil(duration/precision)`
//! most recent blocks, so block `b` stops counting at instant `(b + blocks) * precision`.
//!
//! The rule ([`Sliding::decide`]) reads each limit's counts through [`Counts`]: the units in the
//! window, the newest counting block, and the block by whose end a given number of units has
//! left. The memory backend answers from its [`Counter`]s; the Redis script keeps running totals
//! and returns those three figures (see `sliding.lua`), so no call's work or reply grows with
//! the number of blocks.
//!
//! Counts belong to a limit's [`LimitId`] (position, duration, precision): two limits of one
//! limiter never share counts, and limiters of one name with other configurations (a rolling
//! deploy) neither read nor delete each other's.

use std::collections::VecDeque;
use std::sync::LazyLock;

use redis::Cmd;

use super::contract::{malformed, not_applicable, Combined, Engine, Evaluation, Op, Outcome};
use super::lua::LuaScript;
use super::packed::Packed;
use super::words;
use super::Combine;
use std::time::Duration;

use super::kinds::{share, KindSpec};
use super::spec_json::{at_path, secs};
use super::spec_json::{JsonFields, JsonWriter};
use super::Algorithm;
use crate::engine::SlidingLimit;
use crate::error::{Error, Result};
use crate::params::{micros, validate_count, validate_duration};
use serde_json::Value;

/// The most sub-buckets one sliding-window limit may have (memory is O(duration/precision)).
pub const MAX_BLOCKS: u64 = 100_000;

/// One limit, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlidingParams {
    pub limit: u64,
    pub duration_us: u64,
    pub precision_us: u64,
    pub blocks: u64,
}

/// All the limits of one limiter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sliding {
    pub limits: Box<[SlidingParams]>,
    /// Identifies this configuration among others of the same name (see [`super::fingerprint`]).
    pub fingerprint: u64,
    /// The limits as `sliding.lua` reads them, packed once ([`Packed`]): their number, then
    /// per limit its fields' prefix `index:duration_us:precision_us:` (the stored layout, made
    /// here rather than joined in Lua on every call), limit, precision_us and blocks.
    spec: Box<[u8]>,
}

/// What owns a limit's counts: its position in the limiter, its duration and its precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LimitId {
    index: usize,
    duration_us: u64,
    precision_us: u64,
    blocks: u64,
}

/// What the rule reads of one limit's counts at `now`, once the blocks that stopped counting are
/// out of them.
pub(crate) trait Counts {
    /// Units counting in the window.
    fn total(&self) -> u64;
    /// The newest non-empty block still counting.
    fn newest(&self) -> Option<u64>;
    /// The oldest counting block by whose end `over` (1..=total) units have left the window.
    fn freeing(&self, over: u64) -> Option<u64>;
    /// Records `cost` units in `block` (the newest block or a newer one).
    fn record(&mut self, block: u64, cost: u64);
}

/// One limit's counts in memory: the cumulative count at the end of each non-empty block, so
/// that the count in the window and the block that frees `over` units are a subtraction and a
/// binary search. Cumulative counts wrap; differences of them are exact.
#[derive(Debug, Clone)]
pub(crate) struct Counter {
    id: LimitId,
    /// `(block id, cumulative count at its end)`, oldest first.
    blocks: VecDeque<(u64, u64)>,
    /// The cumulative count of the blocks already dropped.
    floor: u64,
}

impl Counter {
    fn new(id: LimitId) -> Counter {
        Counter { id, blocks: VecDeque::new(), floor: 0 }
    }

    fn cum(&self) -> u64 {
        self.blocks.back().map_or(self.floor, |b| b.1)
    }

    /// Drops the blocks that no longer count at `now`; true if any did.
    fn trim(&mut self, now: u64) -> bool {
        let first = (now / self.id.precision_us + 1).saturating_sub(self.id.blocks);
        let before = self.blocks.len();
        while let Some(&(block, cum)) = self.blocks.front() {
            if block >= first {
                break;
            }
            self.floor = cum;
            self.blocks.pop_front();
        }
        self.blocks.len() != before
    }

    /// Gives back up to `units` of those recorded in `block`, if it still counts (the caller
    /// trimmed the counter); a block emptied by it is dropped. Returns what was given back.
    fn refund(&mut self, block: u64, units: u64) -> u64 {
        let Some(k) = self.blocks.iter().position(|b| b.0 == block) else { return 0 };
        let before = if k == 0 { self.floor } else { self.blocks[k - 1].1 };
        let held = self.blocks[k].1.wrapping_sub(before);
        let taken = units.min(held);
        for later in self.blocks.iter_mut().skip(k) {
            later.1 = later.1.wrapping_sub(taken);
        }
        if taken == held {
            self.blocks.remove(k);
        }
        taken
    }

    /// The instant after which this counter is empty.
    fn expires_at(&self) -> u64 {
        self.blocks.back().map_or(0, |&(b, _)| (b + self.id.blocks) * self.id.precision_us)
    }
}

impl Counts for Counter {
    fn total(&self) -> u64 {
        self.cum().wrapping_sub(self.floor)
    }

    fn newest(&self) -> Option<u64> {
        self.blocks.back().map(|b| b.0)
    }

    fn freeing(&self, over: u64) -> Option<u64> {
        let k = self.blocks.partition_point(|&(_, cum)| cum.wrapping_sub(self.floor) < over);
        // When no block frees enough (the cost alone is above the limit: a live override's
        // smaller limit), the newest, as `sliding.lua`'s search ends on it.
        self.blocks.get(k).or(self.blocks.back()).map(|b| b.0)
    }

    fn record(&mut self, block: u64, cost: u64) {
        let cum = self.cum().wrapping_add(cost);
        match self.blocks.back_mut() {
            Some(last) if last.0 == block => last.1 = cum,
            _ => self.blocks.push_back((block, cum)),
        }
    }
}

/// What a Redis script read of one limit (see `sliding.lua`): the count, the newest counting
/// block, and the block that frees the units a refused call lacks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Snapshot {
    pub total: u64,
    pub newest: Option<u64>,
    pub freeing: Option<u64>,
}

impl Counts for Snapshot {
    fn total(&self) -> u64 {
        self.total
    }

    fn newest(&self) -> Option<u64> {
        self.newest
    }

    /// The script found it for the very `over` the rule asks about: it applies the same rule.
    fn freeing(&self, _over: u64) -> Option<u64> {
        self.freeing
    }

    fn record(&mut self, block: u64, cost: u64) {
        self.total += cost;
        self.newest = Some(block);
    }
}

/// Per-key state in memory: the counters of every configuration that used the key; those of the
/// configuration being evaluated come first, in its order.
#[derive(Debug, Clone, Default)]
pub(crate) struct SlidingState {
    counters: Vec<Counter>,
    /// The fingerprint of the configuration that recorded last (0: none yet).
    fingerprint: u64,
}

impl SlidingParams {
    fn block_id(&self, now: u64) -> u64 {
        now / self.precision_us
    }

    /// Instant at which block `b` stops counting.
    fn expiry_of(&self, block: u64) -> u64 {
        (block + self.blocks) * self.precision_us
    }
}

impl Sliding {
    /// Compiles `bucket(limit, interval)`: one fixed window aligned to the epoch.
    pub(crate) fn bucket(limit: u64, interval: Duration) -> Result<Sliding> {
        let limit = validate_count("limit", limit)?;
        let interval_us = micros(validate_duration("interval", interval)?);
        Ok(Sliding::new(vec![SlidingParams { limit, duration_us: interval_us, precision_us: interval_us, blocks: 1 }]))
    }

    /// Compiles `sliding_window(limits)`, naming a bad parameter.
    pub(crate) fn compile(limits: &[SlidingLimit]) -> Result<Sliding> {
        if limits.is_empty() {
            return Err(Error::invalid("limits", "at least one limit is required"));
        }
        let mut compiled = Vec::with_capacity(limits.len());
        for l in limits {
            let duration_us = micros(validate_duration("duration", l.duration)?);
            let precision_us = match l.precision {
                Some(p) => micros(validate_duration("precision", p)?).min(duration_us),
                None => duration_us,
            };
            let blocks = duration_us.div_ceil(precision_us);
            if blocks > MAX_BLOCKS {
                return Err(Error::invalid(
                    "precision",
                    format!("duration/precision must be at most {MAX_BLOCKS} sub-buckets, got {blocks}"),
                ));
            }
            compiled.push(SlidingParams {
                limit: validate_count("limit", l.limit)?,
                duration_us,
                precision_us,
                blocks,
            });
        }
        Ok(Sliding::new(compiled))
    }

    /// The engine for `limits`, with its configuration's fingerprint.
    pub(crate) fn new(limits: Vec<SlidingParams>) -> Sliding {
        let fingerprint =
            super::fingerprint(limits.iter().flat_map(|l| [l.limit, l.duration_us, l.precision_us, l.blocks]));
        let mut spec = Vec::new();
        Packed::push_uint(&mut spec, limits.len() as u64);
        for (index, l) in limits.iter().enumerate() {
            Packed::push_text(&mut spec, &format!("{index}:{}:{}:", l.duration_us, l.precision_us));
            for v in [l.limit, l.precision_us, l.blocks] {
                Packed::push_uint(&mut spec, v);
            }
        }
        Sliding { limits: limits.into_boxed_slice(), fingerprint, spec: spec.into_boxed_slice() }
    }

    /// The smallest limit: a cost above it can never be admitted.
    pub(crate) fn smallest_limit(&self) -> u64 {
        self.limits.iter().map(|l| l.limit).min().unwrap_or(0)
    }

    fn id(&self, index: usize) -> LimitId {
        let l = &self.limits[index];
        LimitId { index, duration_us: l.duration_us, precision_us: l.precision_us, blocks: l.blocks }
    }

    /// Runs `op` (a check or a peek) on the memory `state` at `now`: the one dispatch from
    /// operations to this engine for the memory backend. Other operations do not apply (the
    /// caller refuses them) and read as a peek. Also says whether another configuration of the
    /// name had recorded last.
    pub(crate) fn run(&self, state: &mut SlidingState, now: u64, op: Op) -> (Evaluation, bool) {
        let mut trimmed = false;
        // This configuration's counters first, in its order; others are kept (and trimmed, and
        // forgotten once empty), never read.
        for index in 0..self.limits.len() {
            let id = self.id(index);
            match state.counters[index..].iter().position(|c| c.id == id) {
                Some(0) => {}
                Some(at) => state.counters.swap(index, index + at),
                None => {
                    state.counters.push(Counter::new(id));
                    let last = state.counters.len() - 1;
                    state.counters.swap(index, last);
                }
            }
        }
        for counter in state.counters.iter_mut() {
            trimmed |= counter.trim(now);
        }
        let n = self.limits.len();
        if state.counters.len() > n {
            let before = state.counters.len();
            let mut index = 0;
            state.counters.retain(|c| {
                index += 1;
                index <= n || !c.blocks.is_empty()
            });
            trimmed |= state.counters.len() != before;
        }
        let mismatch = state.fingerprint != 0 && state.fingerprint != self.fingerprint;
        if let Op::Settle { .. } = op {
            let settled = self.settle(&mut state.counters[..n], now, op);
            let e = self.decide(&mut state.counters[..n], now, Op::Peek);
            return (Evaluation { changed: settled || trimmed, ..e }, mismatch);
        }
        let e = self.decide(&mut state.counters[..n], now, op);
        if e.changed && matches!(op, Op::Check { .. }) {
            state.fingerprint = self.fingerprint;
        }
        (Evaluation { changed: e.changed || trimmed, ..e }, mismatch)
    }

    /// The rule of a settle, on trimmed counters: a charge is recorded like an admitted call
    /// (in the newest block, even past the limit); a refund gives back, in every limit, up to the
    /// units recorded in the block the call was charged in, if that block still counts. Returns
    /// whether anything changed.
    fn settle(&self, counters: &mut [Counter], now: u64, op: Op) -> bool {
        let Op::Settle { cost, actual, at, .. } = op else { return false };
        let mut changed = false;
        for (params, counter) in self.limits.iter().zip(counters.iter_mut()) {
            if actual > cost {
                let block = params.block_id(now).max(counter.newest().unwrap_or(0));
                counter.record(block, actual - cost);
                changed = true;
            } else if actual < cost {
                changed |= counter.refund(params.block_id(at), cost - actual) > 0;
            }
        }
        changed
    }

    /// The rule: decides `op` (a check or a peek, which asks about cost 1) at `now` on each
    /// limit's counts (in configuration order), and records an admitted check in them.
    pub(crate) fn decide<C: Counts>(&self, counts: &mut [C], now: u64, op: Op) -> Evaluation {
        let (cost, commit) = match op {
            Op::Check { cost, .. } => (cost, true),
            _ => (1, false),
        };
        let asked = if commit { cost } else { 1 };
        // Cost 0 is always admitted, even if the count is above this limit (a limiter of the
        // same name with a larger limit may have filled the shared counters).
        let allowed = asked == 0
            || self.limits.iter().zip(counts.iter()).all(|(p, c)| c.total().saturating_add(asked) <= p.limit);
        let record = allowed && commit && cost > 0;
        let mut combine = Combine::new(self.limits.len() > 1, self.limits.len());
        for (params, counter) in self.limits.iter().zip(counts.iter_mut()) {
            if record {
                // A clock that went back records into the newest block: counts never move back.
                let block = params.block_id(now).max(counter.newest().unwrap_or(0));
                counter.record(block, cost);
            }
            let total = counter.total();
            let over = total.saturating_add(asked).saturating_sub(params.limit);
            let retry = match (allowed, over) {
                (true, _) | (_, 0) => 0,
                // Nothing counted, yet refused: the cost alone is above the limit (a live
                // override's smaller limit). Refused until the current block has left.
                _ => params.expiry_of(counter.freeing(over).unwrap_or(params.block_id(now))).saturating_sub(now),
            };
            let reset = counter.newest().map_or(0, |b| params.expiry_of(b).saturating_sub(now));
            combine.push(params.duration_us, params.limit, params.limit.saturating_sub(total), retry, reset);
        }
        Evaluation { decision: combine.finish(allowed), changed: record }
    }
}

/// `sliding.lua`: applies the rule's write on running totals and returns what the rule reads.
pub(crate) static SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("sliding", include_str!("sliding.lua")));

/// What `sliding.lua` returns: the instant, whether another configuration recorded last, and
/// per limit what the rule reads.
struct Reply {
    now: u64,
    mismatch: bool,
    limits: Vec<Snapshot>,
}

impl Reply {
    fn read(reply: &[i64], limits: usize) -> Result<Reply> {
        let [now, mismatch, per_limit @ ..] = reply else { return Err(malformed("sliding-window", reply)) };
        if per_limit.len() != 3 * limits {
            return Err(malformed("sliding-window", reply));
        }
        let block = |v: i64| u64::try_from(v).ok();
        let limits = per_limit
            .chunks_exact(3)
            .map(|c| Snapshot { total: c[0].max(0) as u64, newest: block(c[1]), freeing: block(c[2]) })
            .collect();
        Ok(Reply { now: (*now).max(0) as u64, mismatch: *mismatch == 1, limits })
    }
}

impl Engine for Sliding {
    const SCRIPTS: &'static [&'static LazyLock<LuaScript>] = &[&SCRIPT];
    const COMBINED: Option<Combined> = Some(Combined { name: "sliding", lua: include_str!("sliding.lua"), cost_at: 3 });

    type State = SlidingState;

    #[inline]
    fn apply(&self, state: &mut SlidingState, now: u64, op: Op, changed: &mut bool) -> Result<Outcome> {
        if !matches!(op, Op::Check { .. } | Op::Peek | Op::Settle { .. }) {
            return Err(not_applicable(op, self));
        }
        let (mut e, mismatch) = self.run(state, now, op);
        *changed = e.changed;
        e.decision.decided_at_micros = now;
        Ok(Outcome { config_mismatch: mismatch, ..Outcome::of(e.decision) })
    }

    /// The instant after which this state is indistinguishable from an empty one (for every
    /// configuration that used it).
    fn expires_at(&self, state: &SlidingState) -> u64 {
        state.counters.iter().map(Counter::expires_at).max().unwrap_or(0)
    }

    /// The hash (`h`), and the sorted set of sub-buckets (`b`) only when some limit has them:
    /// a fixed window is a counter in the hash.
    fn keys(&self, _op: Op) -> &'static [&'static str] {
        if self.limits.iter().all(|l| l.blocks == 1) {
            &["h"]
        } else {
            &["h", "b"]
        }
    }

    fn state_keys(&self) -> &'static [&'static str] {
        &["h", "b"]
    }

    /// `cost fingerprint [n (prefix limit precision_us blocks)…]`: the cost (a settle's: the
    /// one the call was charged) and the fingerprint on their own (`check_all` puts the cost it
    /// decides at in the first, [`Combined::cost_at`]; the script compares and stores the
    /// fingerprint as text), then the limits packed into one argument (`spec`), a settle's
    /// `actual at` packed after them.
    fn encode(&self, op: Op, _now: Option<u64>, cmd: &mut Cmd) -> Result<()> {
        let cost = match op {
            Op::Check { .. } | Op::Peek => op.cost(),
            Op::Settle { cost, .. } => cost,
            _ => return Err(not_applicable(op, self)),
        };
        cmd.arg(cost).arg(self.fingerprint);
        if let Op::Settle { actual, at, .. } = op {
            let mut spec = self.spec.to_vec();
            Packed::push_uint(&mut spec, actual);
            Packed::push_uint(&mut spec, at);
            cmd.arg(spec);
        } else {
            cmd.arg(&*self.spec);
        }
        Ok(())
    }

    /// The script applied the rule's write; the decision is the rule's own, replayed here on
    /// what the script read.
    fn decode(&self, op: Op, reply: &[i64]) -> Result<Outcome> {
        let mut r = Reply::read(reply, self.limits.len())?;
        // A settle's reply is the state after it (see `sliding.lua`): reported as a peek.
        let op = if let Op::Settle { .. } = op { Op::Peek } else { op };
        let mut decision = self.decide(&mut r.limits, r.now, op).decision;
        decision.decided_at_micros = r.now;
        Ok(Outcome { config_mismatch: r.mismatch, ..Outcome::of(decision) })
    }

    fn capacity(&self) -> u64 {
        self.smallest_limit()
    }
}

/// The `bucket` kind: fixed windows.
pub(crate) struct BucketKind;

impl KindSpec for BucketKind {
    /// `limit`, `interval`.
    type Fields = (u64, Duration);

    const SAMPLES: &'static [&'static str] = &[r#"{"kind":"bucket","limit":5,"interval":1}"#];

    fn window((_, interval): &Self::Fields) -> Option<Duration> {
        Some(*interval)
    }

    fn parse(_name: &str, json: &mut JsonFields<'_>) -> Result<Self::Fields> {
        Ok((json.count("limit")?, json.seconds("interval")?))
    }

    fn words((limit, interval): &Self::Fields) -> String {
        format!("{} {}, in fixed windows", words::count(*limit), words::per(*interval))
    }

    fn print(&(limit, interval): &Self::Fields, json: &mut JsonWriter) {
        json.put("limit", limit.into());
        json.put("interval", secs(interval));
    }

    fn scaled(&(limit, interval): &Self::Fields, divisor: u64) -> Self::Fields {
        (share(limit, divisor), interval)
    }

    fn compile(&(limit, interval): &Self::Fields) -> Result<Algorithm> {
        Ok(Algorithm::Sliding(Sliding::bucket(limit, interval)?))
    }
}

/// The `sliding_window` kind.
pub(crate) struct SlidingWindowKind;

impl KindSpec for SlidingWindowKind {
    /// `limits`.
    type Fields = (Vec<SlidingLimit>,);

    const SAMPLES: &'static [&'static str] = &[r#"{"kind":"sliding_window","limits":[[60,100],[1,10,0.1]]}"#];

    fn parse(_name: &str, json: &mut JsonFields<'_>) -> Result<Self::Fields> {
        Ok((json.sliding_limits()?,))
    }

    fn words((limits,): &Self::Fields) -> String {
        limits
            .iter()
            .map(|l| {
                let steps = l.precision.filter(|p| !p.is_zero());
                let steps = steps.map_or(String::new(), |p| format!(" (in {} steps)", words::duration(p)));
                format!("{} {}{steps}", words::count(l.limit), words::per(l.duration))
            })
            .collect::<Vec<_>>()
            .join(" and ")
    }

    fn print((limits,): &Self::Fields, json: &mut JsonWriter) {
        let limits = limits.iter().map(|l| {
            let mut item = vec![secs(l.duration), l.limit.into()];
            item.extend(l.precision.map(secs));
            Value::Array(item)
        });
        json.put("limits", limits.collect());
    }

    fn scaled((limits,): &Self::Fields, divisor: u64) -> Self::Fields {
        (limits.iter().map(|l| SlidingLimit { limit: share(l.limit, divisor), ..*l }).collect(),)
    }

    fn compile((limits,): &Self::Fields) -> Result<Algorithm> {
        Ok(Algorithm::Sliding(Sliding::compile(limits)?))
    }

    fn check_parts((limits,): &Self::Fields) -> Result<()> {
        for (i, limit) in limits.iter().enumerate() {
            Sliding::compile(&[*limit]).map_err(at_path(format!("limits[{i}]")))?;
        }
        Ok(())
    }
}
