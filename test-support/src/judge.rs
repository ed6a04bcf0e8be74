//! The over-admission judge: given the instants (on the server's clock) and costs of the calls a
//! limiter admitted, and the rule it enforces, finds the first span that holds more than the
//! rule allows. Every span is judged (a sliding judge), not only aligned ones, and there is no
//! tolerance. The Rust load test calls it directly; the soak (Python) and the Node
//! over-admission test call it through `rk-test-redis judge` (JSON on stdin and stdout), so the
//! three judge alike.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a limiter promises about the units it admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum Rule {
    /// An exact sliding window: any span `(t − interval, t]` holds at most `limit` units (the
    /// script forgets an admission at `s` exactly when `now − interval >= s`).
    Span { limit: u64, interval_us: u64 },
    /// Counted by aligned blocks: any `blocks` consecutive blocks of `block_us` hold at most
    /// `limit` units (a fixed window is one block; a sub-bucket sliding window is
    /// `ceil(duration / precision)` blocks of `precision`; a calendar day in UTC one block of a day).
    Blocks { limit: u64, block_us: u64, blocks: u64 },
    /// A token bucket (GCRA: also leaky buckets and points): the units charged from admission
    /// `a` through admission `b` never exceed `capacity + (t_b − t_a) / emission_us`.
    Rate { capacity: u64, emission_us: u64 },
}

/// One limiter's record for the judge.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Record {
    /// `(instant µs, cost)` of every admitted call, in any order.
    pub admitted: Vec<(u64, u64)>,
    /// `(instant µs, units)` charged or refunded after the fact (a points limiter's
    /// `points_used` corrections): counted by [`Rule::Rate`] only.
    #[serde(default)]
    pub corrections: Vec<(u64, i64)>,
}

/// One question to `rk-test-redis judge`: a rule and a record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Case {
    pub rule: Rule,
    #[serde(flatten)]
    pub record: Record,
}

/// Judges `record` by `rule`: `Err` describes the first excess found.
pub fn judge(rule: Rule, record: &Record) -> Result<(), String> {
    let mut admitted = record.admitted.clone();
    admitted.sort_unstable();
    if !record.corrections.is_empty() && !matches!(rule, Rule::Rate { .. }) {
        return Err(format!("{rule:?} counts no corrections, but the record has some"));
    }
    match rule {
        Rule::Span { limit, interval_us } => span(&admitted, limit, interval_us),
        Rule::Blocks { limit, block_us, blocks } => block_sums(&admitted, limit, block_us, blocks),
        Rule::Rate { capacity, emission_us } => rate(&admitted, &record.corrections, capacity, emission_us),
    }
}

/// Judges every case, in order.
pub fn judge_all(cases: &[Case]) -> Vec<Result<(), String>> {
    cases.iter().map(|case| judge(case.rule, &case.record)).collect()
}

fn span(admitted: &[(u64, u64)], limit: u64, interval_us: u64) -> Result<(), String> {
    let mut first = 0;
    let mut inside = 0;
    for &(t, cost) in admitted {
        inside += cost;
        while admitted[first].0 + interval_us <= t {
            inside -= admitted[first].1;
            first += 1;
        }
        if inside > limit {
            return Err(format!(
                "{inside} admitted in the {interval_us} µs span ending at {t} µs (limit {limit}); first at {}",
                admitted[first].0
            ));
        }
    }
    Ok(())
}

fn block_sums(admitted: &[(u64, u64)], limit: u64, block_us: u64, blocks: u64) -> Result<(), String> {
    let mut per_block: BTreeMap<u64, u64> = BTreeMap::new();
    for &(t, cost) in admitted {
        *per_block.entry(t / block_us).or_default() += cost;
    }
    for &last in per_block.keys() {
        let first = last.saturating_sub(blocks.max(1) - 1);
        let n: u64 = per_block.range(first..=last).map(|(_, n)| n).sum();
        if n > limit {
            return Err(format!(
                "{n} admitted in the {blocks} blocks of {block_us} µs from {} µs to {} µs (limit {limit})",
                first * block_us,
                (last + 1) * block_us
            ));
        }
    }
    Ok(())
}

fn rate(admitted: &[(u64, u64)], corrections: &[(u64, i64)], capacity: u64, emission_us: u64) -> Result<(), String> {
    // What one server instant holds. A batched script decides several calls at one instant in
    // an order the record does not keep, so the judge takes the lenient order at both ends of a
    // span: at its first instant the charges came before the first admission and the refunds
    // after it; at its last instant the refunds came before the last admission and the charges
    // after it. (Between the two instants every correction counts.)
    #[derive(Default)]
    struct Instant {
        admitted: i128,
        charged: i128,
        refunded: i128,
    }
    let mut instants: BTreeMap<u64, Instant> = BTreeMap::new();
    for &(t, cost) in admitted {
        instants.entry(t).or_default().admitted += i128::from(cost);
    }
    for &(t, units) in corrections {
        let at = instants.entry(t).or_default();
        if units >= 0 {
            at.charged += i128::from(units);
        } else {
            at.refunded += i128::from(units);
        }
    }
    // In units × T: GCRA's theoretical arrival time only grows by what is charged, and an
    // admission needs it within tau of now, so the units charged from admission a through
    // admission b never exceed capacity + (t_b − t_a) / T.
    let (t_us, tau) = (i128::from(emission_us), i128::from(capacity) * i128::from(emission_us));
    let mut charged: i128 = 0; // Σ units × T at instants before the current one
    let mut best: Option<(i128, u64)> = None; // min over earlier first instants of (charged before − t)
    for (&t, at) in &instants {
        let ti = i128::from(t);
        if at.admitted > 0 {
            let through = charged + (at.admitted + at.refunded) * t_us; // the span's last instant
            let alone = (at.admitted + at.refunded) * t_us; // a span of this instant only
            let (excess, from, units) = match best {
                Some((b, from)) if through - ti - b > alone => {
                    (through - ti - b - tau, from, (through - ti - b) / t_us)
                }
                _ => (alone - tau, t, alone / t_us),
            };
            if excess > 0 {
                return Err(format!(
                    "from {from} µs to {t} µs, {units} units were charged: more than capacity {capacity} + elapsed/T ({emission_us} µs per unit) by {:.2} units",
                    excess as f64 / t_us as f64
                ));
            }
            let before = charged + at.charged * t_us - ti; // the span's first instant
            if best.map_or(true, |(b, _)| before < b) {
                best = Some((before, t));
            }
        }
        charged += (at.admitted + at.charged + at.refunded) * t_us;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    fn ones(at: &[u64]) -> Record {
        Record { admitted: at.iter().map(|&t| (t, 1)).collect(), corrections: Vec::new() }
    }

    #[test]
    fn span_counts_every_span_not_only_aligned_ones() {
        let rule = Rule::Span { limit: 2, interval_us: 100_000 };
        assert!(judge(rule, &ones(&[S + 90_000, S + 110_000, S + 120_000])).is_err());
        assert!(judge(rule, &ones(&[S + 90_000, S + 110_000, S + 190_000])).is_ok());
        // Exactly `interval` later is a new span.
        assert!(judge(rule, &ones(&[S, S + 1, S + 100_000])).is_ok());
        assert!(judge(rule, &ones(&[S, S + 1, S + 99_999])).is_err());
        // Costs count.
        assert!(judge(rule, &Record { admitted: vec![(S, 1), (S + 1, 2)], corrections: vec![] }).is_err());
    }

    #[test]
    fn blocks_count_consecutive_aligned_blocks() {
        let fixed = Rule::Blocks { limit: 2, block_us: 100_000, blocks: 1 };
        assert!(judge(fixed, &ones(&[S + 10_000, S + 20_000, S + 90_000])).is_err());
        assert!(judge(fixed, &ones(&[S + 90_000, S + 110_000, S + 120_000])).is_ok());
        let sliding = Rule::Blocks { limit: 2, block_us: 50_000, blocks: 2 };
        assert!(judge(sliding, &ones(&[S + 40_000, S + 60_000, S + 90_000])).is_err());
        assert!(judge(sliding, &ones(&[S + 40_000, S + 60_000, S + 100_000])).is_ok());
    }

    #[test]
    fn rate_allows_capacity_plus_what_refilled() {
        let rule = Rule::Rate { capacity: 2, emission_us: 100_000 };
        let rec = |admitted: Vec<(u64, u64)>, corrections: Vec<(u64, i64)>| Record { admitted, corrections };
        assert!(judge(rule, &rec(vec![(0, 2), (100_000, 1), (200_000, 1)], vec![])).is_ok());
        assert!(judge(rule, &rec(vec![(0, 2), (100_000, 1), (199_999, 1)], vec![])).is_err());
        assert!(judge(rule, &rec(vec![(5 * S, 1), (5 * S + 1, 2)], vec![])).is_err());
        // A correction charges (or refunds) units between admissions.
        assert!(judge(rule, &rec(vec![(0, 1), (10, 1)], vec![(5, 1)])).is_err());
        assert!(judge(rule, &rec(vec![(0, 2), (10, 1)], vec![(5, -1)])).is_ok());
    }

    #[test]
    fn rate_leaves_the_order_within_one_instant_open() {
        // One batched script decides several calls at one server instant, in an order the record
        // does not keep. Capacity 2, 100 ms per unit.
        let rule = Rule::Rate { capacity: 2, emission_us: 100_000 };
        let rec = |admitted: Vec<(u64, u64)>, corrections: Vec<(u64, i64)>| Record { admitted, corrections };
        // A refund at the first admission's instant may have come after it (a check and a
        // settle in one batch): 2 admitted, 1 refunded, 1 admitted is within capacity.
        assert!(judge(rule, &rec(vec![(0, 2), (10, 1)], vec![(0, -1)])).is_ok());
        // A charge at the last admission's instant may have come after it.
        assert!(judge(rule, &rec(vec![(0, 1), (10, 1)], vec![(10, 1)])).is_ok());
        // …but a charge between the two instants is surely between them.
        assert!(judge(rule, &rec(vec![(0, 1), (10, 1)], vec![(5, 1)])).is_err());
        // One instant alone: its admissions and refunds, never its charges, count against capacity.
        assert!(judge(rule, &rec(vec![(0, 2)], vec![(0, 1)])).is_ok());
        assert!(judge(rule, &rec(vec![(0, 3)], vec![(0, -1)])).is_ok());
        assert!(judge(rule, &rec(vec![(0, 3)], vec![])).is_err());
        // Charges at earlier instants still count.
        assert!(judge(rule, &rec(vec![(0, 1), (10, 1), (20, 1)], vec![(10, 1)])).is_err());
    }

    #[test]
    fn only_rate_counts_corrections() {
        let record = Record { admitted: vec![(0, 1)], corrections: vec![(1, 1)] };
        assert!(judge(Rule::Span { limit: 5, interval_us: S }, &record).is_err());
    }

    #[test]
    fn cases_read_from_json() {
        let cases: Vec<Case> = serde_json::from_str(
            r#"[{"rule": {"rule": "span", "limit": 1, "interval_us": 1000}, "admitted": [[0, 1], [999, 1]]},
                {"rule": {"rule": "blocks", "limit": 1, "block_us": 1000, "blocks": 1}, "admitted": [[0, 1], [1000, 1]]}]"#,
        )
        .unwrap();
        let verdicts = judge_all(&cases);
        assert!(verdicts[0].is_err() && verdicts[1].is_ok(), "{verdicts:?}");
    }
}
