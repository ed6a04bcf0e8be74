//! The exact sliding window: never more than `limit` admissions in any span of `interval`
//! (an admission at `t` stops counting at `t + interval`). Several windows may be checked and
//! recorded together (e.g. 25 per 5 s AND 300 per 60 s); only admitted calls are recorded.
//!
//! State is the log of admissions within the longest window, as `(instant, cumulative cost)`,
//! so the count inside any window is one subtraction after a binary search.
//!
//! Limiters of one name share the log whatever their windows (an admission means the same to
//! each); each decides with its own windows, and entries are kept for the longest interval any
//! configuration has used on the key, so a shorter window never deletes what a longer one counts.

use std::collections::VecDeque;
use std::sync::LazyLock;
use std::time::Duration;

use redis::Cmd;

use super::contract::{malformed, not_applicable, Combined, DecisionReply, Engine, Evaluation, Op, Outcome};
use super::kinds::{share, KindSpec};
use super::lua::LuaScript;
use super::spec_json::{at_path, secs};
use super::spec_json::{JsonFields, JsonWriter};
use super::words;
use super::Algorithm;
use super::Combine;
use crate::decision::LimitStatus;
use crate::engine::WindowLimit;
use crate::error::{Error, Result};
use crate::params::{micros, validate_count, validate_duration};
use serde_json::Value;

/// The windows of one limiter, in microseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Log {
    /// `(limit, interval_us)` in configuration order.
    pub windows: Box<[(u64, u64)]>,
    /// The longest interval: entries older than it (and than any other configuration's longest
    /// seen on the key) are dropped.
    pub longest_us: u64,
    /// Identifies this configuration among others of the same name (see [`super::fingerprint`]).
    pub fingerprint: u64,
}

/// Per-key state. Cumulative sums wrap; differences of them are exact counts.
#[derive(Debug, Clone, Default)]
pub(crate) struct LogState {
    /// `(admission instant, cumulative cost up to and including it)`, oldest first.
    entries: VecDeque<(u64, u64)>,
    /// Cumulative cost of everything already dropped.
    dropped_cum: u64,
    /// The longest interval of any configuration that used this state.
    longest_seen: u64,
    /// The fingerprint of the configuration that recorded last (0: none yet).
    fingerprint: u64,
}

impl LogState {
    fn cum_before(&self, index: usize) -> u64 {
        if index == 0 {
            self.dropped_cum
        } else {
            self.entries[index - 1].1
        }
    }

    fn last_cum(&self) -> u64 {
        self.entries.back().map_or(self.dropped_cum, |e| e.1)
    }

    /// Index of the first entry still inside a window of `interval_us` at `now`.
    fn first_inside(&self, now: u64, interval_us: u64) -> usize {
        self.entries.partition_point(|&(t, _)| t + interval_us <= now)
    }
}

impl Log {
    /// Compiles `window` / `windows`, naming a bad parameter.
    pub(crate) fn compile(windows: &[WindowLimit]) -> Result<Log> {
        if windows.is_empty() {
            return Err(Error::invalid("windows", "at least one window is required"));
        }
        let mut compiled = Vec::with_capacity(windows.len());
        for w in windows {
            compiled.push((validate_count("limit", w.limit)?, micros(validate_duration("interval", w.interval)?)));
        }
        let longest_us = compiled.iter().map(|w| w.1).max().unwrap_or(0);
        let fingerprint = super::fingerprint(compiled.iter().flat_map(|&(limit, interval)| [limit, interval]));
        Ok(Log { windows: compiled.into_boxed_slice(), longest_us, fingerprint })
    }

    /// The smallest limit: a cost above it can never be admitted.
    pub(crate) fn smallest_limit(&self) -> u64 {
        self.windows.iter().map(|w| w.0).min().unwrap_or(0)
    }

    /// Forgets the admissions older than the longest window seen; true if any were.
    fn trim(&self, state: &mut LogState, now: u64) -> bool {
        let mut trimmed = false;
        state.longest_seen = state.longest_seen.max(self.longest_us);
        while let Some(&(t, cum)) = state.entries.front() {
            if t + state.longest_seen > now {
                break;
            }
            state.dropped_cum = cum;
            state.entries.pop_front();
            trimmed = true;
        }
        trimmed
    }

    /// The rule of a settle: a charge is recorded as an admission now (even past the limits);
    /// a refund takes back, from the admission the call made (its instant), up to what that
    /// admission holds, if it is still in the log, and the admissions after it move down with
    /// it. Returns whether the log changed.
    pub(crate) fn settle(&self, state: &mut LogState, now: u64, op: Op) -> bool {
        let Op::Settle { cost, actual, at, .. } = op else { return false };
        let trimmed = self.trim(state, now);
        if actual > cost {
            let cum = state.last_cum().wrapping_add(actual - cost);
            match state.entries.back_mut() {
                Some(last) if last.0 == now => last.1 = cum,
                _ => state.entries.push_back((now, cum)),
            }
            return true;
        }
        let Some(k) = state.entries.iter().position(|e| e.0 == at).filter(|_| actual < cost) else {
            return trimmed;
        };
        let held = state.entries[k].1.wrapping_sub(state.cum_before(k));
        let taken = (cost - actual).min(held);
        for entry in state.entries.iter_mut().skip(k) {
            entry.1 = entry.1.wrapping_sub(taken);
        }
        if taken == held {
            state.entries.remove(k);
        }
        true
    }

    /// Runs a check of `cost` (or a peek when `commit` is false) on the memory `state`; also
    /// says whether another configuration of the name had recorded last.
    pub(crate) fn run(&self, state: &mut LogState, now: u64, cost: u64, commit: bool) -> (Evaluation, bool) {
        let mismatch = state.fingerprint != 0 && state.fingerprint != self.fingerprint;
        let e = self.evaluate(state, now, cost, commit);
        if commit && e.changed {
            state.fingerprint = self.fingerprint;
        }
        (e, mismatch)
    }

    /// Evaluates a call of `cost` (a peek when `commit` is false, which asks about cost 1).
    pub(crate) fn evaluate(&self, state: &mut LogState, now: u64, cost: u64, commit: bool) -> Evaluation {
        let trimmed = self.trim(state, now);
        let asked = if commit { cost } else { 1 };
        let count_in = |state: &LogState, interval_us: u64| {
            let first = state.first_inside(now, interval_us);
            (first, state.last_cum().wrapping_sub(state.cum_before(first)))
        };
        // Cost 0 is always admitted, even if a window is above its limit (a limiter of the same
        // name with a larger limit may have filled the shared log).
        let allowed =
            asked == 0 || self.windows.iter().all(|&(limit, interval)| count_in(state, interval).1 + asked <= limit);
        let record = allowed && commit && cost > 0;
        if record {
            let cum = state.last_cum().wrapping_add(cost);
            match state.entries.back_mut() {
                Some(last) if last.0 == now => last.1 = cum,
                _ => state.entries.push_back((now, cum)),
            }
        }
        let mut combine = Combine::new(self.windows.len() > 1, self.windows.len());
        for &(limit, interval) in self.windows.iter() {
            let (first, count) = count_in(state, interval);
            let over = (count + asked).saturating_sub(limit);
            let retry = if allowed || over == 0 {
                0
            } else {
                // The oldest admissions leave first; find the one whose departure frees enough.
                // Cumulative sums relative to the dropped prefix grow monotonically from index 0.
                let target = state.cum_before(first).wrapping_sub(state.dropped_cum) + over;
                let k = state.entries.partition_point(|&(_, cum)| cum.wrapping_sub(state.dropped_cum) < target);
                match state.entries.get(k) {
                    Some(entry) => entry.0 + interval - now,
                    // No departure frees enough: the cost alone is above the limit (a live
                    // override's smaller limit). Refused until the window is empty, or for a
                    // whole interval when it already is; `log.lua` says the same.
                    None if count == 0 => interval,
                    None => state.entries.back().map_or(interval, |e| e.0 + interval - now),
                }
            };
            let reset = if count == 0 { 0 } else { state.entries.back().map_or(0, |e| e.0 + interval - now) };
            combine.push(interval, limit, limit.saturating_sub(count), retry, reset);
        }
        Evaluation { decision: combine.finish(allowed), changed: record || trimmed }
    }
}

/// `log.lua`: mirrors [`Log::evaluate`] on a sorted set of admissions.
pub(crate) static SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new("log", include_str!("log.lua")));

/// What `log.lua` returns: the decision, whether another configuration recorded last, and (for
/// several windows) each window's figures.
struct Reply {
    decision: DecisionReply,
    mismatch: bool,
    windows: Vec<LimitStatus>,
}

impl Reply {
    fn read(reply: &[i64]) -> Result<Reply> {
        let (decision, rest) = DecisionReply::read("window", reply)?;
        let [mismatch, windows @ ..] = rest else { return Err(malformed("window", reply)) };
        if windows.len() % 5 != 0 {
            return Err(malformed("window", reply));
        }
        let us = |v: i64| Duration::from_micros(v.max(0) as u64);
        let windows = windows
            .chunks_exact(5)
            .map(|w| LimitStatus {
                window: us(w[0]),
                limit: w[1].max(0) as u64,
                remaining: w[2].max(0) as u64,
                retry_after: us(w[3]),
                reset_after: us(w[4]),
            })
            .collect();
        Ok(Reply { decision, mismatch: *mismatch == 1, windows })
    }
}

impl Engine for Log {
    const SCRIPTS: &'static [&'static LazyLock<LuaScript>] = &[&SCRIPT];
    const COMBINED: Option<Combined> = Some(Combined { name: "log", lua: include_str!("log.lua"), cost_at: 3 });

    type State = LogState;

    #[inline]
    fn apply(&self, state: &mut LogState, now: u64, op: Op, changed: &mut bool) -> Result<Outcome> {
        let (commit, settled) = match op {
            Op::Check { .. } => (true, false),
            Op::Peek => (false, false),
            // Reported as a peek after it.
            Op::Settle { .. } => (false, self.settle(state, now, op)),
            _ => return Err(not_applicable(op, self)),
        };
        let (mut e, mismatch) = self.run(state, now, op.cost(), commit);
        *changed = e.changed || settled;
        e.decision.decided_at_micros = now;
        Ok(Outcome { config_mismatch: mismatch, ..Outcome::of(e.decision) })
    }

    fn expires_at(&self, state: &LogState) -> u64 {
        state.entries.back().map_or(0, |e| e.0 + self.longest_us.max(state.longest_seen))
    }

    fn keys(&self, _op: Op) -> &'static [&'static str] {
        &["z", "d", "l"]
    }

    fn state_keys(&self) -> &'static [&'static str] {
        &["z", "d", "l"]
    }

    /// `cost longest_us fingerprint n (limit interval_us)…`, then for a settle `actual at` (the
    /// cost is then the one the call was charged).
    fn encode(&self, op: Op, _now: Option<u64>, cmd: &mut Cmd) -> Result<()> {
        let cost = match op {
            Op::Check { .. } | Op::Peek => op.cost(),
            Op::Settle { cost, .. } => cost,
            _ => return Err(not_applicable(op, self)),
        };
        cmd.arg(cost).arg(self.longest_us).arg(self.fingerprint).arg(self.windows.len());
        for &(limit, interval) in self.windows.iter() {
            cmd.arg(limit).arg(interval);
        }
        if let Op::Settle { actual, at, .. } = op {
            cmd.arg(actual).arg(at);
        }
        Ok(())
    }

    fn decode(&self, _op: Op, reply: &[i64]) -> Result<Outcome> {
        let r = Reply::read(reply)?;
        let mut d = r.decision.decision();
        if !r.windows.is_empty() {
            d.limits = Some(r.windows.into_boxed_slice());
        }
        Ok(Outcome { config_mismatch: r.mismatch, ..Outcome::of(d) })
    }

    fn capacity(&self) -> u64 {
        self.smallest_limit()
    }
}

/// The `window` kind (`windows` in the JSON form when it has several).
pub(crate) struct WindowKind;

impl KindSpec for WindowKind {
    /// `windows`.
    type Fields = (Vec<WindowLimit>,);

    const SAMPLES: &'static [&'static str] =
        &[r#"{"kind":"window","limit":100,"interval":60}"#, r#"{"kind":"windows","windows":[[25,5],[300,60]]}"#];

    fn window((windows,): &Self::Fields) -> Option<Duration> {
        match windows.as_slice() {
            [one] => Some(one.interval),
            _ => None,
        }
    }

    /// `window` has one `limit` and `interval`; `windows` a list of them.
    fn parse(name: &str, json: &mut JsonFields<'_>) -> Result<Self::Fields> {
        if name == "windows" {
            return Ok((json.windows()?,));
        }
        Ok((vec![WindowLimit { limit: json.count("limit")?, interval: json.seconds("interval")? }],))
    }

    fn words((windows,): &Self::Fields) -> String {
        windows
            .iter()
            .map(|w| format!("{} {}", words::count(w.limit), words::per(w.interval)))
            .collect::<Vec<_>>()
            .join(" and ")
    }

    fn print((windows,): &Self::Fields, json: &mut JsonWriter) {
        if let [window] = windows.as_slice() {
            json.put("limit", window.limit.into());
            json.put("interval", secs(window.interval));
        } else {
            json.put("windows", windows.iter().map(|w| Value::Array(vec![w.limit.into(), secs(w.interval)])).collect());
        }
    }

    fn json_name((windows,): &Self::Fields, name: &'static str) -> &'static str {
        if windows.len() == 1 {
            name
        } else {
            "windows"
        }
    }

    fn scaled((windows,): &Self::Fields, divisor: u64) -> Self::Fields {
        (windows.iter().map(|w| WindowLimit { limit: share(w.limit, divisor), interval: w.interval }).collect(),)
    }

    fn compile((windows,): &Self::Fields) -> Result<Algorithm> {
        Ok(Algorithm::Log(Log::compile(windows)?))
    }

    fn check_parts((windows,): &Self::Fields) -> Result<()> {
        if windows.len() > 1 {
            for (i, window) in windows.iter().enumerate() {
                Log::compile(&[*window]).map_err(at_path(format!("windows[{i}]")))?;
            }
        }
        Ok(())
    }
}
