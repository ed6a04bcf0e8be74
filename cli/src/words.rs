//! A spec in plain words, as the Limits page writes it (`cli/src/web/words.js`, the same rules
//! in the same order): "1,000 per hour", "5 per second, bursts of 10", "2 at once, reclaimed
//! after 30 s", "1,000 per billing month from the 15th, Europe/Berlin". `limits` prints these;
//! `limits --json` keeps the spec's JSON. `tests/cli.rs` checks both against the page's words.

use serde_json::Value;

/// `n` with thousands separators and at most three decimals: "1,000", "1.5", "0.333".
fn number(n: f64) -> String {
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

/// A duration in words: "30 s", "1.5 s", "5 min", "2 h", "1 h 30 min", "3 days".
fn duration(s: f64) -> String {
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
fn per(s: f64) -> String {
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
fn rate(r: f64) -> String {
    if r >= 1.0 || r.fract() == 0.0 {
        format!("{} per second", number(r))
    } else {
        format!("1 every {}", duration(1.0 / r))
    }
}

/// "1st", "2nd", "15th", "23rd".
fn ordinal(n: u64) -> String {
    let suffix = match (n % 100, n % 10) {
        (11..=13, _) => "th",
        (_, 1) => "st",
        (_, 2) => "nd",
        (_, 3) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// A spec (the registry's JSON, durations in seconds) in words; its compact JSON for a kind
/// (or a shape) these words do not know.
pub fn spec_words(spec: &str) -> String {
    let Ok(s) = serde_json::from_str::<Value>(spec) else { return spec.to_owned() };
    match words(&s) {
        // Shadow mode is an option of every kind: said after the limit it does not enforce.
        Some(w) if s.get("shadow") == Some(&Value::Bool(true)) => format!("{w}, in shadow mode"),
        Some(w) => w,
        None => s.to_string(),
    }
}

fn words(s: &Value) -> Option<String> {
    let f = |field: &str| s.get(field).and_then(Value::as_f64);
    let pairs = |field: &str| -> Option<Vec<Vec<f64>>> {
        s.get(field)?.as_array()?.iter().map(|p| p.as_array()?.iter().map(Value::as_f64).collect()).collect()
    };
    Some(match s.get("kind")?.as_str()? {
        "window" => format!("{} {}", number(f("limit")?), per(f("interval")?)),
        "windows" => pairs("windows")?
            .iter()
            .map(|p| Some(format!("{} {}", number(*p.first()?), per(*p.get(1)?))))
            .collect::<Option<Vec<_>>>()?
            .join(" and "),
        "bucket" => format!("{} {}, in fixed windows", number(f("limit")?), per(f("interval")?)),
        "sliding_window" => pairs("limits")?
            .iter()
            .map(|p| {
                let steps = p.get(2).filter(|precision| **precision > 0.0);
                let steps = steps.map_or(String::new(), |precision| format!(" (in {} steps)", duration(*precision)));
                Some(format!("{} {}{steps}", number(*p.get(1)?), per(*p.first()?)))
            })
            .collect::<Option<Vec<_>>>()?
            .join(" and "),
        "token_bucket" => format!("{}, bursts of {}", rate(f("rate")?), number(f("capacity")?)),
        "leased" => format!(
            "{}, bursts of {}, leased{} for {}",
            rate(f("rate")?),
            number(f("capacity")?),
            f("chunk").map_or(String::new(), |chunk| format!(" in chunks of {}", number(chunk))),
            duration(f("lease_ttl")?)
        ),
        "leaky" => format!("bursts of {}, then 1 every {}", number(f("size")?), duration(f("drain")? / f("size")?)),
        "points" => format!("{} points, refilled over {}", number(f("capacity")?), duration(f("refill")?)),
        "concurrent" => format!("{} at once, reclaimed after {}", number(f("limit")?), duration(f("lock_timeout")?)),
        "calendar" => {
            let period = s.get("period")?.as_str()?;
            let anchor = s.get("anchor").and_then(Value::as_u64);
            let period = match (period, anchor) {
                ("day", _) => "per day".to_owned(),
                ("week", _) => "per week (from Monday)".to_owned(),
                ("month", Some(anchor)) => format!("per billing month from the {}", ordinal(anchor)),
                ("month", None) => "per calendar month".to_owned(),
                ("year", _) => "per year".to_owned(),
                (other, _) => format!("per {other}"),
            };
            let tz = s.get("tz").and_then(Value::as_str).unwrap_or("UTC");
            format!("{} {period}, {tz}", number(f("limit")?))
        }
        "partitions" => format!(
            "{} over {} partitions, leased for {}",
            rate(f("total_rate")?),
            number(f("partitions")?),
            duration(f("lease_ttl")?)
        ),
        "unlimited" => "unlimited".to_owned(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::spec_words;

    /// The page's own examples (docs and `words.js`), word for word.
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
            (r#"{"kind":"windows","windows":[[10,1],[100,60]]}"#, "10 per second and 100 per minute"),
            (r#"{"kind":"sliding_window","limits":[[60,100,5]]}"#, "100 per minute (in 5 s steps)"),
            (
                r#"{"kind":"leased","rate":10,"capacity":100,"chunk":8,"lease_ttl":1}"#,
                "10 per second, bursts of 100, leased in chunks of 8 for 1 s",
            ),
            (r#"{"kind":"leaky","size":10,"drain":5}"#, "bursts of 10, then 1 every 0.5 s"),
            (r#"{"kind":"points","capacity":600,"refill":5400}"#, "600 points, refilled over 1 h 30 min"),
            (r#"{"kind":"unlimited"}"#, "unlimited"),
            (r#"{"kind":"someday","x":1}"#, r#"{"kind":"someday","x":1}"#),
        ];
        for (spec, words) in cases {
            assert_eq!(spec_words(spec), words, "{spec}");
        }
    }
}
