//! A spec in plain words: "1,000 per hour", "5 per second, bursts of 10", "2 at once, reclaimed
//! after 30 s", "1,000 per billing month from the 15th, Europe/Berlin". Each kind words its own
//! fields ([`super::kinds::KindSpec::words`], beside them in its engine's file) with the pieces
//! here; [`super::LimiterSpec::words`] and [`super::LimiterConfig::words`] are what the CLI's
//! `limits` table and the Limits page show.

use std::time::Duration;

/// `n` with thousands separators and at most three decimals: "1,000", "1.5", "0.333".
pub(crate) fn number(n: f64) -> String {
    let rounded = (n * 1000.0).round() / 1000.0;
    let whole = rounded.trunc() as i64;
    let digits = whole.abs().to_string();
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if rounded < 0.0 { "-" } else { "" };
    let fraction = format!("{:.3}", (rounded - rounded.trunc()).abs());
    let fraction = fraction.trim_start_matches('0').trim_end_matches('0').trim_end_matches('.');
    format!("{sign}{grouped}{fraction}")
}

/// A count in words: "1,000".
pub(crate) fn count(n: u64) -> String {
    number(n as f64)
}

/// A duration in words: "30 s", "1.5 s", "5 min", "2 h", "1 h 30 min", "3 days".
pub(crate) fn duration(d: Duration) -> String {
    seconds(d.as_secs_f64())
}

fn seconds(s: f64) -> String {
    if s < 60.0 {
        return format!("{} s", number(s));
    }
    if s < 3600.0 {
        let minutes = (s / 60.0).floor();
        return if s % 60.0 == 0.0 {
            format!("{} min", number(s / 60.0))
        } else {
            format!("{} min {} s", number(minutes), number(s % 60.0))
        };
    }
    if s < 86400.0 || s % 86400.0 != 0.0 {
        let hours = (s / 3600.0).floor();
        let minutes = ((s % 3600.0) / 60.0).round();
        return if minutes == 0.0 {
            format!("{} h", number(hours))
        } else {
            format!("{} h {} min", number(hours), number(minutes))
        };
    }
    if s == 86400.0 {
        "1 day".to_owned()
    } else {
        format!("{} days", number(s / 86400.0))
    }
}

/// "per hour", "per 5 minutes", "per 10 seconds", "per 1.5 seconds".
pub(crate) fn per(d: Duration) -> String {
    let s = d.as_secs_f64();
    for (size, unit) in [(604800.0, "week"), (86400.0, "day"), (3600.0, "hour"), (60.0, "minute"), (1.0, "second")] {
        if s == size {
            return format!("per {unit}");
        }
        if s > size && s % size == 0.0 {
            return format!("per {} {unit}s", number(s / size));
        }
    }
    format!("per {} seconds", number(s))
}

/// "5 per second", or "1 every 2 s" for rates below one per second.
pub(crate) fn rate(r: f64) -> String {
    if r >= 1.0 || r.fract() == 0.0 {
        format!("{} per second", number(r))
    } else {
        format!("1 every {}", seconds(1.0 / r))
    }
}

/// "1st", "2nd", "15th", "23rd".
pub(crate) fn ordinal(n: u64) -> String {
    let suffix = match (n % 100, n % 10) {
        (11..=13, _) => "th",
        (_, 1) => "st",
        (_, 2) => "nd",
        (_, 3) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

#[cfg(test)]
mod tests {
    use crate::engine::LimiterConfig;

    /// The Limits page's own examples (docs and the CLI's `limits`), word for word.
    #[test]
    fn specs_read_as_the_limits_page_writes_them() {
        let cases = [
            (r#"{"kind":"window","limit":1000,"interval":3600}"#, "1,000 per hour"),
            (r#"{"kind":"window","limit":10,"interval":300}"#, "10 per 5 minutes"),
            (r#"{"kind":"token_bucket","rate":5,"capacity":10}"#, "5 per second, bursts of 10"),
            (r#"{"kind":"token_bucket","rate":0.5,"capacity":3}"#, "1 every 2 s, bursts of 3"),
            (r#"{"kind":"concurrent","limit":2,"lock_timeout":30}"#, "2 at once, reclaimed after 30 s"),
            (
                r#"{"kind":"calendar","limit":1000,"period":"month","anchor":15,"tz":"Europe/Berlin"}"#,
                "1,000 per billing month from the 15th, Europe/Berlin",
            ),
            (r#"{"kind":"calendar","limit":5,"period":"week"}"#, "5 per week (from Monday), UTC"),
            (r#"{"kind":"windows","windows":[[10,1],[100,60]]}"#, "10 per second and 100 per minute"),
            (r#"{"kind":"sliding_window","limits":[[60,100,5]]}"#, "100 per minute (in 5 s steps)"),
            (r#"{"kind":"bucket","limit":5,"interval":1}"#, "5 per second, in fixed windows"),
            (
                r#"{"kind":"leased","rate":10,"capacity":100,"chunk":8,"lease_ttl":1}"#,
                "10 per second, bursts of 100, leased in chunks of 8 for 1 s",
            ),
            (r#"{"kind":"leaky","size":10,"drain":5}"#, "bursts of 10, then 1 every 0.5 s"),
            (r#"{"kind":"points","capacity":600,"refill":5400}"#, "600 points, refilled over 1 h 30 min"),
            (
                r#"{"kind":"partitions","total_rate":100,"partitions":20,"lease_ttl":15}"#,
                "100 per second over 20 partitions, leased for 15 s",
            ),
            (r#"{"kind":"unlimited"}"#, "unlimited"),
        ];
        for (spec, words) in cases {
            assert_eq!(LimiterConfig::from_json(spec).unwrap().words(), words, "{spec}");
        }
    }

    /// Every kind's samples read as words, none empty.
    #[test]
    fn every_kind_has_words() {
        for kind in crate::Kind::all() {
            for sample in kind.samples() {
                assert!(!LimiterConfig::from_json(sample).unwrap().words().is_empty(), "{sample}");
            }
        }
    }
}
