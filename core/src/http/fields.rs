//! The rate-limit header fields of a request's decisions, in each form a middleware offers:
//! draft-11 (the default: `RateLimit-Policy` and `RateLimit` as Structured Field lists, one
//! member per limit), draft-7 (one `RateLimit` field), draft-6 (three fields) and legacy
//! (`X-RateLimit-*`). Seconds are whole and rounded up, so a client that waits as told is never
//! early. The forms are described in docs/src/guides/http/index.md.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::Duration;

use crate::params::MAX_COUNT;

/// The rate-limit header fields a response carries: draft-11's `RateLimit-Policy` + `RateLimit`
/// structured fields (the default everywhere), draft-7's, draft-6's `RateLimit-Limit` /
/// `-Remaining` / `-Reset`, or the legacy `X-RateLimit-*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HeaderForm {
    /// `RateLimit-Policy: "api";q=100;w=60` and `RateLimit: "api";r=99;t=60`.
    #[default]
    Draft11,
    /// `RateLimit-Policy: 100;w=60` and `RateLimit: limit=100, remaining=99, reset=60`.
    Draft7,
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (and `RateLimit-Policy`).
    Draft6,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (seconds).
    Legacy,
}

impl HeaderForm {
    /// Every form's name, default first.
    pub const NAMES: [&'static str; 4] = ["draft-11", "draft-7", "draft-6", "legacy"];

    /// Reads `"draft-11"`, `"draft-7"`, `"draft-6"` or `"legacy"`; anything else is an
    /// invalid-argument error naming `parameter`.
    pub fn from_name(parameter: &'static str, name: &str) -> crate::Result<HeaderForm> {
        match name {
            "draft-11" => Ok(HeaderForm::Draft11),
            "draft-7" => Ok(HeaderForm::Draft7),
            "draft-6" => Ok(HeaderForm::Draft6),
            "legacy" => Ok(HeaderForm::Legacy),
            other => Err(crate::Error::invalid(
                parameter,
                format!("must be \"draft-11\", \"draft-7\", \"draft-6\" or \"legacy\", got {other:?}"),
            )),
        }
    }
}

/// A duration as HTTP headers give it: whole seconds, rounded up (to the microsecond first), so
/// a client that waits as told is never early. Bindings format a `Retry-After` by it too.
pub fn http_seconds(duration: Duration) -> u64 {
    duration.as_micros().div_ceil(1_000_000) as u64
}

/// An RFC 9651 sf-string: quoted, `\` and `"` escaped, anything but printable ASCII as `?`.
pub fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    push_sf_string(&mut out, text);
    out
}

/// Appends `text` as an sf-string (see [`sf_string`]).
fn push_sf_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '\\' | '"' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
}

/// One limit as the fields report it: a single-limit limiter's decision, or one limit of a
/// multi-limit limiter's.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ReportLimit {
    /// The limit's size (the quota, `q`). 2^53 (an `unlimited` limiter's) announces nothing.
    pub limit: u64,
    /// What is left of it (`r`).
    pub remaining: u64,
    /// The time until it is full again (`t`).
    pub reset_after: Duration,
    /// The time until the call could succeed (zero: admitted).
    pub retry_after: Duration,
    /// Whether this limit admitted the call.
    pub allowed: bool,
    /// The span it covers (`w`), where the limiter has one.
    pub window: Option<Duration>,
}

impl ReportLimit {
    /// One limit of a multi-limit decision: it admitted the call when its wait is zero.
    pub fn of_limit(
        window: Duration,
        limit: u64,
        remaining: u64,
        reset_after: Duration,
        retry_after: Duration,
    ) -> Self {
        ReportLimit { limit, remaining, reset_after, retry_after, allowed: retry_after.is_zero(), window: Some(window) }
    }
}

/// What one limiter decided about a request, as the fields read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Report<'a> {
    /// The policy's name: the limiter's (`shedder` for a load shedder).
    pub name: &'a str,
    /// The decision, with the limiter's window ([`crate::Limiter::window`]).
    pub decision: ReportLimit,
    /// A multi-limit limiter's limits, each with its window: a member each, named
    /// `name/<window>s`.
    pub limits: Vec<ReportLimit>,
}

impl<'a> Report<'a> {
    /// The report of `decision` by the limiter `name`, whose window ([`crate::Limiter::window`])
    /// is `window`.
    pub fn of(name: &'a str, window: Option<Duration>, decision: &crate::Decision) -> Self {
        let limits = decision.limits.as_deref().unwrap_or_default();
        Report {
            name,
            decision: ReportLimit {
                limit: decision.limit,
                remaining: decision.remaining,
                reset_after: decision.reset_after,
                retry_after: decision.retry_after,
                allowed: decision.allowed,
                window,
            },
            limits: limits
                .iter()
                .map(|l| ReportLimit::of_limit(l.window, l.limit, l.remaining, l.reset_after, l.retry_after))
                .collect(),
        }
    }
}

/// One member of the fields: a name and one limit.
struct Member<'a> {
    name: Cow<'a, str>,
    limit: ReportLimit,
}

/// Seconds as a policy name's suffix: whole when whole (`60`), else as short as exact (`0.5`).
fn whole(window: Duration) -> String {
    let seconds = window.as_secs_f64();
    if seconds.fract() == 0.0 {
        format!("{}", seconds as u64)
    } else {
        format!("{seconds}")
    }
}

fn members<'a>(reports: &[Report<'a>]) -> Vec<Member<'a>> {
    let mut out = Vec::with_capacity(reports.len());
    for report in reports {
        if report.limits.is_empty() {
            if report.decision.limit < MAX_COUNT {
                out.push(Member { name: Cow::Borrowed(report.name), limit: report.decision });
            }
            continue;
        }
        for limit in &report.limits {
            let name = match limit.window {
                Some(window) => Cow::Owned(format!("{}/{}s", report.name, whole(window))),
                None => Cow::Borrowed(report.name),
            };
            out.push(Member { name, limit: *limit });
        }
    }
    out
}

/// Appends `;w=60` for a limit with a window (whole seconds, rounded up, at least 1).
fn push_window(out: &mut String, limit: &ReportLimit) {
    if let Some(window) = limit.window.filter(|w| !w.is_zero()) {
        let _ = write!(out, ";w={}", http_seconds(window).max(1));
    }
}

/// The one limit the single-limit forms report: the one that refused (longest wait), else the
/// least left (the first of equals).
fn binding<'m>(members: &'m [Member<'_>]) -> &'m ReportLimit {
    let mut refused = members.iter().filter(|m| !m.limit.allowed).map(|m| &m.limit);
    if let Some(first) = refused.next() {
        return refused.fold(first, |a, b| if b.retry_after > a.retry_after { b } else { a });
    }
    let mut all = members.iter().map(|m| &m.limit);
    let first = all.next().expect("members is not empty");
    all.fold(first, |a, b| if b.remaining < a.remaining { b } else { a })
}

/// The `(name, value)` fields of `reports` in `form`; `pk` (draft-11 only) is the partition
/// key's base64, sent as each `RateLimit` member's `pk` parameter. None when no limiter
/// announces a limit.
pub fn render(form: HeaderForm, reports: &[Report<'_>], pk: Option<&str>) -> Vec<(&'static str, String)> {
    let members = members(reports);
    if members.is_empty() {
        return Vec::new();
    }
    if form == HeaderForm::Draft11 {
        let mut policy = String::with_capacity(32 * members.len());
        let mut state = String::with_capacity(48 * members.len());
        for (i, m) in members.iter().enumerate() {
            if i > 0 {
                policy.push_str(", ");
                state.push_str(", ");
            }
            push_sf_string(&mut policy, &m.name);
            let _ = write!(policy, ";q={}", m.limit.limit);
            push_window(&mut policy, &m.limit);
            push_sf_string(&mut state, &m.name);
            let _ = write!(state, ";r={};t={}", m.limit.remaining, http_seconds(m.limit.reset_after));
            if let Some(pk) = pk {
                let _ = write!(state, ";pk=:{pk}:");
            }
        }
        return vec![("RateLimit-Policy", policy), ("RateLimit", state)];
    }
    let b = binding(&members);
    let (limit, remaining, reset) =
        (b.limit.to_string(), b.remaining.to_string(), http_seconds(b.reset_after).to_string());
    let mut policy = limit.clone();
    push_window(&mut policy, b);
    match form {
        HeaderForm::Draft7 => vec![
            ("RateLimit-Policy", policy),
            ("RateLimit", format!("limit={limit}, remaining={remaining}, reset={reset}")),
        ],
        HeaderForm::Draft6 => vec![
            ("RateLimit-Policy", policy),
            ("RateLimit-Limit", limit),
            ("RateLimit-Remaining", remaining),
            ("RateLimit-Reset", reset),
        ],
        _ => vec![("X-RateLimit-Limit", limit), ("X-RateLimit-Remaining", remaining), ("X-RateLimit-Reset", reset)],
    }
}
