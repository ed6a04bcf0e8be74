//! Calendar quotas: at most `limit` per calendar day, ISO week (from Monday), month (from an
//! anchor day, clamped to the month's last day) or year, in an IANA time zone, so a day lasts 23
//! or 25 hours across a DST change. A fixed window whose bounds are the calendar period
//! containing now ([`super::calendar_period`]); `retry_after` and `reset_after` reach the exact
//! next boundary.
//!
//! State is the end of the period counted and its count: a count of another period is zero.
//! On Redis the client computes the boundaries (the script has no time-zone database) of the
//! previous, current and next periods around its own instant, and the script picks the one
//! containing the server's (see `calendar.lua`).

use std::sync::LazyLock;

use redis::Cmd;

use super::calendar_period::{CalendarClock, CalendarPeriod};
use super::contract::{malformed, not_applicable, Combined, Engine, Op, Outcome};
use super::decision;
use super::kinds::{share, KindSpec};
use super::lua::LuaScript;
use super::spec_json::at_path;
use super::spec_json::{JsonFields, JsonWriter};
use super::words;
use super::Algorithm;
use crate::clock::{Clock, SystemClock};
use crate::decision::Decision;
use crate::error::Result;
use crate::params::validate_count;

/// A compiled calendar quota.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Calendar {
    pub limit: u64,
    pub clock: CalendarClock,
}

/// Per-key state in memory: the end (µs) of the period counted, and its count.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CalendarState {
    end_us: u64,
    count: u64,
}

impl Calendar {
    /// Compiles `calendar(limit, period, tz, anchor)`, naming a bad parameter.
    pub(crate) fn compile(limit: u64, period: CalendarPeriod, tz: &str, anchor: Option<u8>) -> Result<Calendar> {
        Ok(Calendar { limit: validate_count("limit", limit)?, clock: CalendarClock::new(period, tz, anchor)? })
    }

    /// The rule: decides `op` (a check or a peek, which asks about cost 1) at `now`, given
    /// `count` units recorded in the period ending at `end_us` (which contains `now`). Returns
    /// the decision and, for an admitted check, the count to record.
    pub(crate) fn decide(&self, count: u64, end_us: u64, now: u64, op: Op) -> (Decision, Option<u64>) {
        let commit = matches!(op, Op::Check { .. });
        let asked = op.cost();
        // Cost 0 is always admitted, even above the limit (a same-named limiter may be larger).
        let allowed = asked == 0 || asked <= self.limit.saturating_sub(count);
        let record = (allowed && commit && asked > 0).then(|| count.saturating_add(asked));
        let after = record.unwrap_or(count);
        let until_end = end_us.saturating_sub(now);
        let retry = if allowed { 0 } else { until_end };
        let reset = if after > 0 { until_end } else { 0 };
        let mut d = decision(allowed, self.limit, self.limit.saturating_sub(after), retry, reset);
        d.decided_at_micros = now;
        (d, record)
    }

    /// The rule of a settle: the count of the period containing now, after settling a call
    /// charged `cost` at `at` to `actual`. A charge goes to the current period (the work was
    /// done, whichever period it was checked in), even past the limit; a refund goes back only
    /// to the period the call was charged in, if it is still the current one, and never below
    /// zero.
    pub(crate) fn settled_count(count: u64, start_us: u64, end_us: u64, op: Op) -> u64 {
        let Op::Settle { cost, actual, at, .. } = op else { return count };
        if actual >= cost {
            count.saturating_add(actual - cost)
        } else if (start_us..end_us).contains(&at) {
            count.saturating_sub(cost - actual)
        } else {
            count
        }
    }

    /// Four consecutive boundaries around `now`: the previous, current and next periods.
    fn boundaries(&self, now: u64) -> Result<[u64; 4]> {
        let current = self.clock.bounds(now)?;
        let previous = self.clock.bounds(current.start_us.saturating_sub(1))?;
        let next = self.clock.bounds(current.end_us)?;
        Ok([previous.start_us, current.start_us, current.end_us, next.end_us])
    }
}

/// `calendar.lua`: picks the server's period, records an admitted call, returns what the rule
/// reads.
pub(crate) static SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("calendar", include_str!("calendar.lua")));

/// What `calendar.lua` returns: the instant, the end of the period containing it, and the count
/// recorded in that period before the call.
struct Reply {
    now: u64,
    end_us: u64,
    count: u64,
}

impl Reply {
    fn read(reply: &[i64]) -> Result<Reply> {
        match *reply {
            [now, end_us, count] => {
                Ok(Reply { now: now.max(0) as u64, end_us: end_us.max(0) as u64, count: count.max(0) as u64 })
            }
            _ => Err(malformed("calendar", reply)),
        }
    }
}

impl Engine for Calendar {
    const SCRIPTS: &'static [&'static LazyLock<LuaScript>] = &[&SCRIPT];
    const COMBINED: Option<Combined> =
        Some(Combined { name: "calendar", lua: include_str!("calendar.lua"), cost_at: 3 });

    type State = CalendarState;

    #[inline]
    fn apply(&self, state: &mut CalendarState, now: u64, op: Op, changed: &mut bool) -> Result<Outcome> {
        if !matches!(op, Op::Check { .. } | Op::Peek | Op::Settle { .. }) {
            return Err(not_applicable(op, self));
        }
        let bounds = self.clock.bounds(now)?;
        let end_us = bounds.end_us;
        let count = if state.end_us == end_us { state.count } else { 0 };
        if let Op::Settle { .. } = op {
            let settled = Self::settled_count(count, bounds.start_us, end_us, op);
            if settled != count {
                *state = CalendarState { end_us, count: settled };
                *changed = true;
            }
            return Ok(Outcome::of(self.decide(settled, end_us, now, Op::Peek).0));
        }
        let (decision, record) = self.decide(count, end_us, now, op);
        if let Some(count) = record {
            *state = CalendarState { end_us, count };
            *changed = true;
        }
        Ok(Outcome::of(decision))
    }

    fn expires_at(&self, state: &CalendarState) -> u64 {
        state.end_us
    }

    fn keys(&self, _op: Op) -> &'static [&'static str] {
        &["h"]
    }

    fn state_keys(&self) -> &'static [&'static str] {
        &["h"]
    }

    /// `cost limit b0 b1 b2 b3`, the boundaries computed at the manual clock's instant if there
    /// is one, else at this process's.
    fn encode(&self, op: Op, now: Option<u64>, cmd: &mut Cmd) -> Result<()> {
        let now = now.unwrap_or_else(|| SystemClock.now_micros());
        let [b0, b1, b2, b3] = self.boundaries(now)?;
        match op {
            Op::Check { .. } | Op::Peek => {
                cmd.arg(op.cost()).arg(self.limit).arg(b0).arg(b1).arg(b2).arg(b3);
            }
            // `… actual at` after the boundaries: the call's cost, what it really cost, and when
            // it was charged.
            Op::Settle { cost, actual, at, .. } => {
                cmd.arg(cost).arg(self.limit).arg(b0).arg(b1).arg(b2).arg(b3).arg(actual).arg(at);
            }
            _ => return Err(not_applicable(op, self)),
        }
        Ok(())
    }

    /// The script recorded an admitted call; the decision is the rule's own, replayed here on
    /// what the script read.
    fn decode(&self, op: Op, reply: &[i64]) -> Result<Outcome> {
        let r = Reply::read(reply)?;
        if let Op::Settle { .. } = op {
            let start_us = self.clock.bounds(r.now)?.start_us;
            let settled = Self::settled_count(r.count, start_us, r.end_us, op);
            return Ok(Outcome::of(self.decide(settled, r.end_us, r.now, Op::Peek).0));
        }
        Ok(Outcome::of(self.decide(r.count, r.end_us, r.now, op).0))
    }

    fn capacity(&self) -> u64 {
        self.limit
    }
}

/// The `calendar` kind.
pub(crate) struct CalendarKind;

impl KindSpec for CalendarKind {
    /// `limit`, `period`, `tz`, `anchor`.
    type Fields = (u64, CalendarPeriod, String, Option<u8>);

    const SAMPLES: &'static [&'static str] =
        &[r#"{"kind":"calendar","limit":1000,"period":"month","tz":"Europe/Berlin","anchor":15}"#];

    fn parse(_name: &str, json: &mut JsonFields<'_>) -> Result<Self::Fields> {
        Ok((
            json.count("limit")?,
            CalendarPeriod::parse(json.string("period")?).map_err(at_path("period".into()))?,
            json.optional_string("tz")?.unwrap_or("UTC").to_owned(),
            json.optional_anchor()?,
        ))
    }

    fn words((limit, period, tz, anchor): &Self::Fields) -> String {
        let period = match (period, anchor) {
            (CalendarPeriod::Day, _) => "per day".to_owned(),
            (CalendarPeriod::Week, _) => "per week (from Monday)".to_owned(),
            (CalendarPeriod::Month, Some(anchor)) => {
                format!("per billing month from the {}", words::ordinal(u64::from(*anchor)))
            }
            (CalendarPeriod::Month, None) => "per calendar month".to_owned(),
            (CalendarPeriod::Year, _) => "per year".to_owned(),
        };
        format!("{} {period}, {tz}", words::count(*limit))
    }

    fn print((limit, period, tz, anchor): &Self::Fields, json: &mut JsonWriter) {
        json.put("limit", (*limit).into());
        json.put("period", period.as_str().into());
        json.put("tz", tz.as_str().into());
        if let Some(anchor) = anchor {
            json.put("anchor", (*anchor).into());
        }
    }

    fn scaled((limit, period, tz, anchor): &Self::Fields, divisor: u64) -> Self::Fields {
        (share(*limit, divisor), *period, tz.clone(), *anchor)
    }

    fn compile((limit, period, tz, anchor): &Self::Fields) -> Result<Algorithm> {
        Ok(Algorithm::Calendar(Calendar::compile(*limit, *period, tz, *anchor)?))
    }
}
