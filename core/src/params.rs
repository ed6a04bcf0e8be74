//! Validation of every user-supplied parameter, shared by the core API and all bindings, so a
//! bad value gets the same typed error naming it in every language, before any state is written.

use std::time::Duration;

use crate::error::{Error, Result};

/// The largest cost, limit or capacity accepted: 2^53, the largest integer every language
/// (JavaScript numbers, Lua doubles) represents exactly.
pub const MAX_COUNT: u64 = 1 << 53;

/// The longest duration accepted: 100 years, so that any instant plus any duration stays exact
/// in microseconds within a double.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The longest limiter name.
pub const MAX_NAME_LEN: usize = 128;

/// The longest key, in bytes of UTF-8.
pub const MAX_KEY_BYTES: usize = 1024;

/// Checks a limiter name: 1..=128 characters from `[A-Za-z0-9_-]`.
pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::invalid("name", format!("must be 1 to {MAX_NAME_LEN} characters long, got {}", name.len())));
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return Err(Error::invalid(
            "name",
            format!("may contain only letters, digits, `-` and `_`; found {bad:?} in {name:?}"),
        ));
    }
    Ok(())
}

/// Checks a key (any string up to 1 KiB); `None` is the limiter's single shared key `""`.
#[inline]
pub fn validate_key(key: Option<&str>) -> Result<&str> {
    let key = key.unwrap_or("");
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::invalid("key", format!("must be at most {MAX_KEY_BYTES} bytes, got {}", key.len())));
    }
    Ok(key)
}

/// Checks a cost: at most 2^53 (zero is allowed and consumes nothing).
#[inline]
pub fn validate_cost(parameter: &'static str, cost: u64) -> Result<u64> {
    if cost > MAX_COUNT {
        return Err(Error::invalid(parameter, format!("must be at most 2^53, got {cost}")));
    }
    Ok(cost)
}

/// Converts a cost given as a float (Python, JavaScript): a finite whole number in 0..=2^53.
pub fn cost_from_f64(parameter: &'static str, value: f64) -> Result<u64> {
    whole_from_f64(parameter, value, 0)
}

/// Converts a limit, capacity or size given as a float: a finite whole number in 1..=2^53.
pub fn count_from_f64(parameter: &'static str, value: f64) -> Result<u64> {
    whole_from_f64(parameter, value, 1)
}

/// Checks a limit, capacity or size: 1..=2^53.
pub fn validate_count(parameter: &'static str, value: u64) -> Result<u64> {
    if value == 0 || value > MAX_COUNT {
        return Err(Error::invalid(parameter, format!("must be between 1 and 2^53, got {value}")));
    }
    Ok(value)
}

fn whole_from_f64(parameter: &'static str, value: f64, min: u64) -> Result<u64> {
    if !value.is_finite() {
        return Err(Error::invalid(parameter, format!("must be a finite number, got {value}")));
    }
    if value.fract() != 0.0 {
        return Err(Error::invalid(parameter, format!("must be a whole number, got {value}")));
    }
    if value < min as f64 || value > MAX_COUNT as f64 {
        return Err(Error::invalid(parameter, format!("must be between {min} and 2^53, got {value}")));
    }
    Ok(value as u64)
}

/// Converts a duration in seconds (Python floats, vectors): finite, positive, at least one
/// microsecond once rounded to the nearest microsecond, at most [`MAX_DURATION`].
pub fn duration_from_secs(parameter: &'static str, seconds: f64) -> Result<Duration> {
    duration_in(parameter, seconds, &SECONDS)
}

/// Converts a duration in milliseconds (JavaScript), with the rules of [`duration_from_secs`];
/// errors speak in milliseconds.
pub fn duration_from_millis(parameter: &'static str, millis: f64) -> Result<Duration> {
    duration_in(parameter, millis, &MILLISECONDS)
}

/// Converts a non-negative timeout in seconds; zero means "do not wait".
pub fn timeout_from_secs(parameter: &'static str, seconds: f64) -> Result<Duration> {
    if seconds == 0.0 {
        return Ok(Duration::ZERO);
    }
    duration_from_secs(parameter, seconds)
}

/// [`timeout_from_secs`] in milliseconds (JavaScript).
pub fn timeout_from_millis(parameter: &'static str, millis: f64) -> Result<Duration> {
    if millis == 0.0 {
        return Ok(Duration::ZERO);
    }
    duration_from_millis(parameter, millis)
}

/// The unit a binding's durations are written in, for conversions and their messages.
struct Unit {
    name: &'static str,
    symbol: &'static str,
    micros: f64,
}

const SECONDS: Unit = Unit { name: "seconds", symbol: "s", micros: 1e6 };
const MILLISECONDS: Unit = Unit { name: "milliseconds", symbol: "ms", micros: 1e3 };

/// The one duration rule: finite, positive, at most [`MAX_DURATION`], to the microsecond.
fn duration_in(parameter: &'static str, value: f64, unit: &Unit) -> Result<Duration> {
    if !value.is_finite() {
        return Err(Error::invalid(parameter, format!("must be a finite number of {}, got {value}", unit.name)));
    }
    if value <= 0.0 {
        return Err(Error::invalid(parameter, format!("must be positive, got {value}")));
    }
    if value * unit.micros > MAX_DURATION.as_micros() as f64 {
        return Err(Error::invalid(parameter, format!("must be at most 100 years, got {value:e}{}", unit.symbol)));
    }
    let micros = (value * unit.micros).round() as u64;
    validate_duration(parameter, Duration::from_micros(micros))
}

/// Checks a duration: at least one microsecond, at most [`MAX_DURATION`].
pub fn validate_duration(parameter: &'static str, duration: Duration) -> Result<Duration> {
    if duration < Duration::from_micros(1) {
        return Err(Error::invalid(parameter, format!("must be at least 1 microsecond, got {duration:?}")));
    }
    if duration > MAX_DURATION {
        return Err(Error::invalid(parameter, format!("must be at most 100 years, got {duration:?}")));
    }
    Ok(duration)
}

/// Checks an HTTP status code given as a float (Python, JavaScript, C ints widened): a whole
/// number in 100..=999, the range RFC 9110 gives status codes.
pub fn status_from_f64(parameter: &'static str, status: f64) -> Result<u16> {
    if status.is_finite() && status.fract() == 0.0 && (100.0..=999.0).contains(&status) {
        Ok(status as u16)
    } else {
        Err(Error::invalid(
            parameter,
            format!("must be an HTTP status code (a whole number from 100 to 999), got {status}"),
        ))
    }
}

/// Parses an interval given as text: a name (`second`, `minute`, `hour`, `day`, as Sidekiq's
/// limiters accept) or a duration with its unit (`"60s"`, `"1m"`, `"500ms"`); see
/// [`crate::parse_duration`].
pub fn interval_from_name(parameter: &'static str, name: &str) -> Result<Duration> {
    crate::rate::parse_duration(parameter, name)
}

/// A duration as whole microseconds (validated durations always fit).
pub(crate) fn micros(duration: Duration) -> u64 {
    duration.as_micros() as u64
}
