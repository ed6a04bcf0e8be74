//! Upstream feedback: how long a third party asked its callers to stay away, read from the
//! status and headers of one of its responses (see [`crate::Limiter::observe`]).
//!
//! Only `429 Too Many Requests` and `503 Service Unavailable` pause; the first of these that is
//! well formed gives the pause:
//! 1. `Retry-After`: delta-seconds or an HTTP-date (RFC 9110 §10.2.3; all three date forms);
//! 2. `RateLimit-Reset` (delta seconds, IETF draft), only when `RateLimit-Remaining` is `0`;
//! 3. `X-RateLimit-Reset`: epoch seconds when above [`EPOCH_THRESHOLD`] (GitHub, Twitter),
//!    else delta seconds.
//!
//! Header names are compared case-insensitively. A malformed value is ignored (the next source
//! is tried), never an error: a third party's odd header must not fail the caller's request
//! path. A value that says "now or in the past" gives no pause. What is read here is what the
//! response asks for; a limiter pauses for at most its `max_pause` of it (see
//! [`crate::Limiter::with_max_pause`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::params::MAX_DURATION;

/// `X-RateLimit-Reset` values above this are instants (epoch seconds), below it delays: no API
/// asks for a delay of 30 years, and no reset instant lies before 2001.
pub const EPOCH_THRESHOLD: f64 = 1e9;

/// The pause `status` and `headers` ask for, measured from `now_micros` (µs since the epoch,
/// the clock HTTP-dates and epoch resets are compared with); `None` when nothing applies.
pub fn pause_from_response<K: AsRef<str>, V: AsRef<str>>(
    status: u16,
    headers: &[(K, V)],
    now_micros: u64,
) -> Option<Duration> {
    if status != 429 && status != 503 {
        return None;
    }
    let values = |name: &'static str| {
        headers.iter().filter(move |(k, _)| k.as_ref().trim().eq_ignore_ascii_case(name)).map(|(_, v)| v.as_ref())
    };
    let first = |name: &'static str, parse: &dyn Fn(&str) -> Option<u64>| values(name).find_map(parse);
    let until_us = first("retry-after", &|v| retry_after(v, now_micros))
        .or_else(|| {
            let exhausted = values("ratelimit-remaining").any(|v| v.trim() == "0");
            exhausted.then(|| first("ratelimit-reset", &|v| delta_seconds(v).map(|d| now_micros.saturating_add(d))))?
        })
        .or_else(|| first("x-ratelimit-reset", &|v| x_ratelimit_reset(v, now_micros)))?;
    let pause = Duration::from_micros(until_us.saturating_sub(now_micros));
    // Beyond the longest duration a limiter accepts is a broken header, not a pause.
    (!pause.is_zero() && pause <= MAX_DURATION).then_some(pause)
}

/// `Retry-After`: delta-seconds or an HTTP-date, as the instant (µs) it names.
fn retry_after(value: &str, now_micros: u64) -> Option<u64> {
    let value = value.trim();
    if let Some(delta) = delta_seconds(value) {
        return Some(now_micros.saturating_add(delta));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    let since_epoch = date.duration_since(UNIX_EPOCH).ok()?;
    // A date in the past asks for no pause (it is not malformed: the next source is not read).
    Some(u64::try_from(since_epoch.as_micros()).ok()?.max(now_micros))
}

/// `X-RateLimit-Reset`: epoch seconds or delta seconds, as the instant (µs) it names.
fn x_ratelimit_reset(value: &str, now_micros: u64) -> Option<u64> {
    let seconds = decimal(value)?;
    if seconds > EPOCH_THRESHOLD {
        let at = SystemTime::UNIX_EPOCH.checked_add(Duration::try_from_secs_f64(seconds).ok()?)?;
        let micros = u64::try_from(at.duration_since(UNIX_EPOCH).ok()?.as_micros()).ok()?;
        return Some(micros.max(now_micros));
    }
    Some(now_micros.saturating_add(to_micros(seconds)?))
}

/// A non-negative decimal number of seconds, as microseconds (rounded up: a caller that waits
/// that long is past the instant asked for).
fn delta_seconds(value: &str) -> Option<u64> {
    to_micros(decimal(value)?)
}

fn to_micros(seconds: f64) -> Option<u64> {
    let micros = (seconds * 1e6).ceil();
    (micros <= MAX_DURATION.as_micros() as f64).then_some(micros as u64)
}

/// Digits with at most one `.` (no sign, exponent, `inf` or `NaN`, which `f64::from_str` would
/// accept), surrounding whitespace allowed.
fn decimal(value: &str) -> Option<f64> {
    let value = value.trim();
    let digits = value.bytes().filter(u8::is_ascii_digit).count();
    let dots = value.bytes().filter(|b| *b == b'.').count();
    if digits == 0 || dots > 1 || digits + dots != value.len() {
        return None;
    }
    value.parse().ok().filter(|s: &f64| s.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-01-01T00:00:00Z
    const NOW: u64 = 1_767_225_600_000_000;

    fn pause(status: u16, headers: &[(&str, &str)]) -> Option<Duration> {
        pause_from_response(status, headers, NOW)
    }

    const fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    #[test]
    fn retry_after_delta_seconds() {
        assert_eq!(pause(429, &[("Retry-After", "3")]), secs(3));
        assert_eq!(pause(503, &[("retry-after", " 120 ")]), secs(120));
        assert_eq!(pause(429, &[("RETRY-AFTER", "1.5")]), Some(Duration::from_millis(1500)));
        assert_eq!(pause(429, &[("Retry-After", "0")]), None, "zero asks for no pause");
    }

    #[test]
    fn retry_after_http_dates_in_all_three_forms() {
        // 2026-01-01T00:00:30Z in IMF-fixdate, RFC 850 and asctime form.
        for date in ["Thu, 01 Jan 2026 00:00:30 GMT", "Thursday, 01-Jan-26 00:00:30 GMT", "Thu Jan  1 00:00:30 2026"] {
            assert_eq!(pause(429, &[("Retry-After", date)]), secs(30), "{date}");
        }
        assert_eq!(pause(429, &[("Retry-After", "Wed, 31 Dec 2025 23:59:00 GMT")]), None, "a past date");
    }

    #[test]
    fn ratelimit_reset_applies_only_when_nothing_remains() {
        let exhausted = [("RateLimit-Remaining", "0"), ("RateLimit-Reset", "7")];
        assert_eq!(pause(429, &exhausted), secs(7));
        let left = [("ratelimit-remaining", "3"), ("ratelimit-reset", "7")];
        assert_eq!(pause(429, &left), None);
        assert_eq!(pause(429, &[("RateLimit-Reset", "7")]), None, "no RateLimit-Remaining");
    }

    #[test]
    fn x_ratelimit_reset_is_an_instant_or_a_delay() {
        let at = (NOW / 1_000_000 + 45).to_string();
        assert_eq!(pause(429, &[("X-RateLimit-Reset", at.as_str())]), secs(45));
        assert_eq!(pause(429, &[("x-ratelimit-reset", "60")]), secs(60));
        let past = (NOW / 1_000_000 - 45).to_string();
        assert_eq!(pause(429, &[("X-RateLimit-Reset", past.as_str())]), None);
    }

    #[test]
    fn retry_after_comes_first_then_ratelimit_then_x_ratelimit() {
        let all = [
            ("X-RateLimit-Reset", "30"),
            ("RateLimit-Remaining", "0"),
            ("RateLimit-Reset", "20"),
            ("Retry-After", "10"),
        ];
        assert_eq!(pause(429, &all), secs(10));
        assert_eq!(pause(429, &all[..3]), secs(20));
        assert_eq!(pause(429, &all[..1]), secs(30));
    }

    #[test]
    fn only_429_and_503_pause() {
        for status in [200, 404, 500, 502, 504] {
            assert_eq!(pause(status, &[("Retry-After", "3")]), None, "{status}");
        }
        assert_eq!(pause(429, &[] as &[(&str, &str)]), None);
        assert_eq!(pause(429, &[("Content-Type", "text/plain")]), None);
    }

    #[test]
    fn malformed_values_are_ignored_and_the_next_source_is_read() {
        for bad in [
            "",
            " ",
            "-3",
            "+3",
            "3s",
            "1e3",
            "inf",
            "NaN",
            "1.2.3",
            ".",
            "0x10",
            "Thu, 32 Jan 2026 00:00:30 GMT",
            "tomorrow",
            "99999999999999999999999",
            "3 4",
            "٣",
        ] {
            assert_eq!(pause(429, &[("Retry-After", bad)]), None, "Retry-After {bad:?}");
            assert_eq!(pause(429, &[("Retry-After", bad), ("X-RateLimit-Reset", "5")]), secs(5), "{bad:?}");
            let draft = [("RateLimit-Remaining", "0"), ("RateLimit-Reset", bad)];
            assert_eq!(pause(429, &draft), None, "RateLimit-Reset {bad:?}");
            assert_eq!(pause(429, &[("X-RateLimit-Reset", bad)]), None, "X-RateLimit-Reset {bad:?}");
        }
        // The first well-formed occurrence of a repeated header counts.
        assert_eq!(pause(429, &[("Retry-After", "soon"), ("Retry-After", "4")]), secs(4));
    }

    #[test]
    fn huge_values_never_overflow() {
        assert_eq!(pause(429, &[("Retry-After", "18446744073709551615")]), None, "beyond the longest duration");
        assert_eq!(pause(429, &[("X-RateLimit-Reset", "1e308")]), None);
        // 2096: what the response asks, read exactly; a limiter writes at most its max_pause
        // of it (one hour by default: tests/pause.rs), never these 70 years.
        let far = pause(429, &[("X-RateLimit-Reset", "4000000000")]).unwrap();
        assert_eq!(far, Duration::from_micros(4_000_000_000_000_000 - NOW));
        assert!(far > Duration::from_secs(70 * 365 * 24 * 3600));
        assert_eq!(far.min(crate::DEFAULT_MAX_PAUSE), Duration::from_secs(3600));
        assert_eq!(pause_from_response(429, &[("Retry-After", "5")], u64::MAX), None);
    }
}
