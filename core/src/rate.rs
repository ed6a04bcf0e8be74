//! Durations and rates written as text, the way users of `limits`, slowapi and flask-limiter
//! write them: `"60s"`, `"1m"`, `"500ms"`, `"minute"`; `"5/minute"`, `"100 per hour"`,
//! `"25/5s; 300/minute"`. Parsed once here so that every language accepts the same strings and
//! refuses the same mistakes with the same typed error naming the parameter.
//!
//! A duration always carries its unit. A bare number is refused: `60` means seconds in Python,
//! Ruby, C and specs but milliseconds in JavaScript timers, so text never guesses.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::params::{duration_from_secs, validate_count};

/// One rate: `limit` per `interval`, e.g. `"5/minute"` is 5 per 60 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Units allowed per interval (1..=2^53).
    pub limit: u64,
    /// The interval the limit covers.
    pub interval: Duration,
}

/// The units a duration may be written in, each with its length in seconds. Months and years
/// are not fixed lengths: they are refused with a pointer to the calendar limiter.
const UNITS: &[(&[&str], f64)] = &[
    (&["ms", "msec", "millisecond", "milliseconds"], 0.001),
    (&["s", "sec", "secs", "second", "seconds"], 1.0),
    (&["m", "min", "mins", "minute", "minutes"], 60.0),
    (&["h", "hr", "hrs", "hour", "hours"], 3600.0),
    (&["d", "day", "days"], 86_400.0),
];

const EXAMPLES: &str = "e.g. '60s', '500ms', '1m', '2 hours' or 'minute'";

/// Parses a duration with its unit: a number followed by a unit (`"60s"`, `"1.5 h"`,
/// `"500ms"`) or a unit alone (`"minute"` is one minute). Errors name `parameter`.
pub fn parse_duration(parameter: &'static str, text: &str) -> Result<Duration> {
    let trimmed = text.trim();
    // The number runs up to the first character that cannot be part of one ("1e3s" is 1000 s,
    // "5sec" 5 s: no unit starts with an `e`).
    let at = trimmed
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-' | 'e' | 'E')))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(at);
    let number = number.trim_end();
    let unit = unit.trim();
    if unit.is_empty() {
        return Err(Error::invalid(
            parameter,
            format!("must carry a unit ({EXAMPLES}), got {text:?}: a bare number means seconds in Python, Ruby, C and specs but milliseconds in JavaScript, so it is never guessed"),
        ));
    }
    let lower = unit.to_ascii_lowercase();
    let Some(seconds_per_unit) = UNITS.iter().find(|(names, _)| names.contains(&lower.as_str())).map(|(_, s)| *s)
    else {
        let hint = if matches!(lower.as_str(), "month" | "months" | "mo" | "year" | "years" | "y") {
            " (months and years have no fixed length: use a calendar limiter)"
        } else {
            ""
        };
        return Err(Error::invalid(
            parameter,
            format!(
                "has an unknown unit {unit:?} in {text:?}{hint}; units are ms, s, m, h, d or their names ({EXAMPLES})"
            ),
        ));
    };
    let count: f64 = if number.is_empty() {
        1.0
    } else {
        number
            .parse()
            .map_err(|_| Error::invalid(parameter, format!("must be a number and a unit ({EXAMPLES}), got {text:?}")))?
    };
    duration_from_secs(parameter, count * seconds_per_unit)
}

/// Parses one rate: a count, `/` or `per`, and a duration (`"5/minute"`, `"100 per hour"`,
/// `"25/5s"`, `"10 per 2 minutes"`). Errors name `parameter`.
pub fn parse_rate(parameter: &'static str, text: &str) -> Result<Rate> {
    let mut rates = parse_rates(parameter, text)?;
    if rates.len() != 1 {
        return Err(Error::invalid(
            parameter,
            format!(
                "must be one rate such as '5/minute' here, got {} in {text:?} (several go to a multi-window limiter)",
                rates.len()
            ),
        ));
    }
    Ok(rates.remove(0))
}

/// Parses one or several rates separated by `;` or `,` (`"25/5s; 300/minute"`), as `limits`
/// writes several limits in one string.
pub fn parse_rates(parameter: &'static str, text: &str) -> Result<Vec<Rate>> {
    let rates = text
        .split([';', ','])
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| one_rate(parameter, text, part))
        .collect::<Result<Vec<_>>>()?;
    if rates.is_empty() {
        return Err(Error::invalid(
            parameter,
            format!("must be a rate such as '5/minute' or '100 per hour', got {text:?}"),
        ));
    }
    Ok(rates)
}

fn one_rate(parameter: &'static str, whole: &str, part: &str) -> Result<Rate> {
    let (count, per) = match part.split_once('/') {
        Some(pair) => pair,
        None => part
            .split_once(" per ")
            .ok_or_else(|| {
                Error::invalid(
                    parameter,
                    format!("must be a rate such as '5/minute' or '100 per hour' (a count, '/' or 'per', a duration), got {whole:?}"),
                )
            })?,
    };
    let count = count.trim();
    let limit = count
        .parse::<u64>()
        .map_err(|_| {
            Error::invalid(
                parameter,
                format!("must start with a whole count such as '5/minute', got {count:?} in {whole:?}"),
            )
        })
        .and_then(|n| validate_count(parameter, n))?;
    // The duration's own message, with the whole rate for context.
    let interval = parse_duration(parameter, per).map_err(|e| match e {
        Error::InvalidArgument { message, .. } => {
            Error::invalid(parameter, format!("{message} (the interval of the rate {whole:?})"))
        }
        other => other,
    })?;
    Ok(Rate { limit, interval })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(text: &str) -> f64 {
        parse_duration("d", text).unwrap().as_secs_f64()
    }

    #[test]
    fn durations_carry_their_unit() {
        assert_eq!(secs("60s"), 60.0);
        assert_eq!(secs("1m"), 60.0);
        assert_eq!(secs("500ms"), 0.5);
        assert_eq!(secs("minute"), 60.0);
        assert_eq!(secs(" 2 hours "), 7200.0);
        assert_eq!(secs("1.5h"), 5400.0);
        assert_eq!(secs("5sec"), 5.0);
        assert_eq!(secs("1e3s"), 1000.0);
        assert_eq!(secs("1d"), 86_400.0);
    }

    #[test]
    fn bare_numbers_and_unknown_units_are_refused_naming_the_parameter() {
        for bad in ["60", "", "   ", "5 fortnights", "1 month", "s5", "5//s", "-1s", "0s", "NaNs"] {
            let error = parse_duration("interval", bad).unwrap_err();
            assert!(error.to_string().contains("interval"), "{bad:?}: {error}");
        }
        assert!(parse_duration("interval", "60").unwrap_err().to_string().contains("unit"));
        assert!(parse_duration("interval", "2 months").unwrap_err().to_string().contains("calendar"));
    }

    #[test]
    fn rates_read_as_limits_writes_them() {
        let one = |t| parse_rate("rate", t).unwrap();
        assert_eq!(one("5/minute"), Rate { limit: 5, interval: Duration::from_secs(60) });
        assert_eq!(one("100 per hour"), Rate { limit: 100, interval: Duration::from_secs(3600) });
        assert_eq!(one("10/second"), Rate { limit: 10, interval: Duration::from_secs(1) });
        assert_eq!(one("25/5s"), Rate { limit: 25, interval: Duration::from_secs(5) });
        assert_eq!(one("10 per 2 minutes"), Rate { limit: 10, interval: Duration::from_secs(120) });
        let many = parse_rates("rate", "25/5s; 300/minute").unwrap();
        assert_eq!(many.len(), 2);
        assert_eq!(many[1], Rate { limit: 300, interval: Duration::from_secs(60) });
    }

    #[test]
    fn bad_rates_are_refused_naming_the_parameter() {
        for bad in ["5", "5/minte", "five/minute", "0/minute", "5/", "/minute", "", "1/s;2/s x", "5 per"] {
            let error = parse_rate("rate", bad).unwrap_err();
            assert_eq!(error.kind(), crate::ErrorKind::InvalidArgument, "{bad:?}");
            assert!(error.to_string().contains("rate"), "{bad:?}: {error}");
        }
        assert!(parse_rate("rate", "1/s; 2/m").unwrap_err().to_string().contains("one rate"));
    }
}
