//! Limiter metrics in the Prometheus text exposition format, encoded by `prometheus-client`
//! from snapshots (a scrape reads counts; it never owns or resets them).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeCounterValue, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::metrics::{Metrics, Read, LATENCY_BOUNDS, OUTCOMES, SHOWN};

/// One limiter's metrics as a scrape shows them.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) kind: &'static str,
    pub(crate) concurrent: bool,
    pub(crate) metrics: Metrics,
}

#[derive(Debug)]
struct Snapshot(Vec<Series>);

type Labels<'a> = Vec<(&'static str, &'a str)>;

fn labels(s: &Series) -> Labels<'_> {
    vec![("limiter", s.name.as_str()), ("kind", s.kind)]
}

/// Writes one counter family: a sample per (series, extra label value); counts are `u64`,
/// times `f64` seconds.
fn counters<'a, V: EncodeCounterValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    series: impl Iterator<Item = (Labels<'a>, V)>,
) -> std::fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, unit, MetricType::Counter)?;
    for (labels, value) in series {
        family.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(&value, None)?;
    }
    Ok(())
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let all = || self.0.iter();
        // One sample per label of the outcomes (those of one label add up), in their order.
        let mut outcomes: Vec<(&str, &str, Vec<Read>)> = Vec::new();
        for o in &OUTCOMES {
            match outcomes.iter_mut().find(|(label, ..)| *label == o.label) {
                Some((.., reads)) => reads.push(o.read),
                None => outcomes.push((o.label, o.means, vec![o.read])),
            }
        }
        let help: Vec<String> = outcomes.iter().map(|(label, means, _)| format!("{label} ({means})")).collect();
        counters(
            &mut encoder,
            "ratekeeper_checks",
            &format!("Checks by outcome: {}.", help.join(", ")),
            None,
            all().flat_map(|s| {
                outcomes.iter().map(move |(outcome, _, reads)| {
                    let mut l = labels(s);
                    l.push(("outcome", outcome));
                    (l, reads.iter().map(|read| read(&s.metrics)).sum::<u64>())
                })
            }),
        )?;
        {
            let mut family = encoder.encode_descriptor(
                "ratekeeper_check_duration",
                "Client-side latency of checks that went to Redis.",
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?;
            for s in all().filter(|s| s.metrics.latency_count() > 0) {
                let m = &s.metrics;
                let bounds = LATENCY_BOUNDS.iter().map(|b| b.as_secs_f64()).chain([f64::INFINITY]);
                let buckets: Vec<(f64, u64)> = bounds.zip(m.latency_buckets).collect();
                family.encode_family(&labels(s))?.encode_histogram::<NoLabelSet>(
                    m.latency_sum.as_secs_f64(),
                    m.latency_count(),
                    &buckets,
                    None,
                )?;
            }
        }
        let concurrent = || all().filter(|s| s.concurrent);
        counters(
            &mut encoder,
            "ratekeeper_concurrent_held",
            "Leases granted by concurrent limiters, by whether the caller waited.",
            None,
            concurrent().flat_map(|s| {
                [("immediate", s.metrics.immediate), ("waited", s.metrics.waited)].into_iter().map(move |(how, n)| {
                    let mut l = labels(s);
                    l.push(("wait", how));
                    (l, n)
                })
            }),
        )?;
        counters(
            &mut encoder,
            "ratekeeper_concurrent_held",
            "Total time concurrent leases were held, measured at release.",
            Some(&Unit::Seconds),
            concurrent().map(|s| (labels(s), s.metrics.held_time.as_secs_f64())),
        )?;
        {
            let mut family = encoder.encode_descriptor(
                "ratekeeper_concurrent_leases_held",
                "Concurrent leases held now: granted and not yet released.",
                None,
                MetricType::Gauge,
            )?;
            for s in concurrent() {
                let held = i64::try_from(s.metrics.leases_held()).unwrap_or(i64::MAX);
                family.encode_family(&labels(s))?.encode_gauge(&held)?;
            }
        }
        counters(
            &mut encoder,
            "ratekeeper_concurrent_wait",
            "Total time callers waited for the concurrent leases granted after waiting.",
            Some(&Unit::Seconds),
            concurrent().map(|s| (labels(s), s.metrics.wait_time.as_secs_f64())),
        )?;
        counters(
            &mut encoder,
            "ratekeeper_concurrent_overages",
            "Concurrent leases released after their lock_timeout.",
            None,
            concurrent().map(|s| (labels(s), s.metrics.overages)),
        )?;
        counters(
            &mut encoder,
            "ratekeeper_concurrent_reclaimed",
            "Overdue concurrent leases reclaimed for a new caller.",
            None,
            concurrent().map(|s| (labels(s), s.metrics.reclaimed)),
        )?;
        // The counts shown on their own: a family each, of the limiters that have one.
        for (field, help, read) in SHOWN {
            counters(
                &mut encoder,
                &format!("ratekeeper_{field}"),
                help,
                None,
                all().filter(|s| read(&s.metrics) > 0).map(|s| (labels(s), read(&s.metrics))),
            )?;
        }
        let settled = || all().filter(|s| s.metrics.settles > 0);
        counters(
            &mut encoder,
            "ratekeeper_settles",
            "Settles applied: calls corrected to their actual cost once known (a repeat is not counted).",
            None,
            settled().map(|s| (labels(s), s.metrics.settles)),
        )?;
        counters(
            &mut encoder,
            "ratekeeper_settled_units",
            "Units settles charged (the call cost more than checked) or asked to refund (it cost less).",
            None,
            settled().flat_map(|s| {
                [("charged", s.metrics.settle_charged), ("refunded", s.metrics.settle_refunded)].into_iter().map(
                    move |(direction, n)| {
                        let mut l = labels(s);
                        l.push(("direction", direction));
                        (l, n)
                    },
                )
            }),
        )
    }
}

/// Renders `series` in the Prometheus text exposition format (version 0.0.4).
pub(crate) fn render(mut series: Vec<Series>) -> String {
    series.sort_by(|a, b| (&a.name, a.kind).cmp(&(&b.name, b.kind)));
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Snapshot(series)));
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry).expect("writing to a String cannot fail");
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn renders_counters_and_histograms_with_limiter_labels() {
        // Every outcome with a count of its own; the deny cache's refusal is among `refused`.
        let mut values = [0; crate::metrics::COUNTERS];
        for (i, o) in OUTCOMES.iter().enumerate() {
            values[o.counter as usize] = 10 + i as u64;
        }
        values[crate::metrics::Counter::Refused as usize] =
            2 + values[crate::metrics::Counter::RefusedLocally as usize];
        let mut m = crate::metrics::from_values(values);
        m.latency_buckets[0] = 2;
        m.latency_buckets[13] = 1;
        m.latency_sum = Duration::from_millis(1500);
        let text = render(vec![Series { name: "api".into(), kind: "token_bucket", concurrent: false, metrics: m }]);
        assert!(
            text.contains(r#"ratekeeper_checks_total{limiter="api",kind="token_bucket",outcome="allowed"} 10"#),
            "{text}"
        );
        assert!(
            text.contains(r#"ratekeeper_checks_total{limiter="api",kind="token_bucket",outcome="refused"} 15"#),
            "refused, local refusals included: {text}"
        );
        for o in OUTCOMES.iter().filter(|o| o.label != "refused") {
            let sample = format!(
                r#"ratekeeper_checks_total{{limiter="api",kind="token_bucket",outcome="{}"}} {}"#,
                o.label,
                (o.read)(&m)
            );
            assert!(text.contains(&sample), "{sample} in {text}");
        }
        assert_eq!(text.matches("ratekeeper_checks_total{").count(), 6, "one sample per label: {text}");
        assert!(
            text.contains(
                r#"ratekeeper_check_duration_seconds_bucket{limiter="api",kind="token_bucket",le="0.0001"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"ratekeeper_check_duration_seconds_bucket{limiter="api",kind="token_bucket",le="+Inf"} 3"#),
            "{text}"
        );
        assert!(
            text.contains(r#"ratekeeper_check_duration_seconds_sum{limiter="api",kind="token_bucket"} 1.5"#),
            "{text}"
        );
        assert!(!text.contains("ratekeeper_concurrent_overages_total{"), "no concurrent series: {text}");
    }

    #[test]
    fn renders_leases_held_as_a_gauge_and_pause_refusals() {
        let pool = Metrics { held: 5, released: 3, ..Metrics::default() };
        let quiet = Metrics { refused: 2, paused: 2, ..Metrics::default() };
        let text = render(vec![
            Series { name: "pool".into(), kind: "concurrent", concurrent: true, metrics: pool },
            Series { name: "quiet".into(), kind: "token_bucket", concurrent: false, metrics: quiet },
        ]);
        assert!(text.contains("# TYPE ratekeeper_concurrent_leases_held gauge"), "{text}");
        assert!(text.contains(r#"ratekeeper_concurrent_leases_held{limiter="pool",kind="concurrent"} 2"#), "{text}");
        assert!(text.contains(r#"ratekeeper_paused_total{limiter="quiet",kind="token_bucket"} 2"#), "{text}");
    }
}
