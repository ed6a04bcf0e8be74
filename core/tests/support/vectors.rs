//! Runs the language-neutral conformance vectors (`tests/vectors/*.json` at the workspace root)
//! against any backend with a manual clock.
//!
//! Each case gets a fresh backend (from the caller's factory) whose clock starts at `start_us`; its limiters are built through
//! the public API with parameters converted by `ratekeeper::params`, so validation is the core's.
//! Every failing step of every case is reported (file, case, step, expected, actual) before the
//! test fails, and the totals are asserted so that deleting vectors fails the test too.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ratekeeper::params::{cost_from_f64, count_from_f64, duration_from_secs, interval_from_name};
use ratekeeper::{
    Backend, CalendarPeriod, Decision, Error, Lease, Limiter, LimiterSpec, ManualClock, SlidingLimit, WindowLimit,
};
use serde_json::{json, Map, Value};

/// Every limiter kind; each must be exercised by at least [`MIN_PER_KIND`] cases.
const KINDS: [&str; 9] =
    ["concurrent", "bucket", "window", "sliding_window", "token_bucket", "leaky", "points", "calendar", "unlimited"];
const MIN_PER_KIND: usize = 15;
const MIN_TOTAL: usize = 120;

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("tests").join("vectors")
}

/// A malformed vector (as opposed to a behaviour mismatch): reported as a failure too.
type Malformed = String;

// ------------------------------------------------------------------------------------ parameters

/// A JSON number, or one of the strings "NaN", "Infinity", "-Infinity".
fn number(value: &Value) -> Result<f64, Malformed> {
    match value {
        Value::Number(n) => n.as_f64().ok_or_else(|| format!("number out of range: {n}")),
        Value::String(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            other => Err(format!("expected a number, got the string {other:?}")),
        },
        other => Err(format!("expected a number, got {other}")),
    }
}

fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Result<&'a Value, Malformed> {
    obj.get(name).ok_or_else(|| format!("missing field `{name}`"))
}

/// What building a limiter produced: the limiter, or the core's error.
type Built = Result<Limiter, Error>;

fn count(parameter: &'static str, value: &Value) -> Result<Result<u64, Error>, Malformed> {
    Ok(count_from_f64(parameter, number(value)?))
}

fn duration(parameter: &'static str, value: &Value) -> Result<Result<Duration, Error>, Malformed> {
    Ok(duration_from_secs(parameter, number(value)?))
}

/// A bucket/window interval: seconds, or a name ("second", "minute", "hour", "day").
fn interval(value: &Value) -> Result<Result<Duration, Error>, Malformed> {
    match value {
        Value::String(s) if !matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity") => {
            Ok(interval_from_name("interval", s))
        }
        other => duration("interval", other),
    }
}

/// `?` for the inner (core) error of a converted parameter.
macro_rules! core {
    ($e:expr) => {
        match $e? {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        }
    };
}

fn build_limiter(backend: &Backend, spec: &Value) -> Result<Built, Malformed> {
    let built = build_limiter_of_kind(backend, spec)?;
    // `colocate` is a limiter option (as `wait_timeout` is): applied to whichever kind was built.
    match spec.get("colocate").and_then(Value::as_str) {
        Some(colocate) => Ok(built.and_then(|l| Ok(l.with_colocate(ratekeeper::Colocate::from_name(colocate)?)))),
        None => Ok(built),
    }
}

fn build_limiter_of_kind(backend: &Backend, spec: &Value) -> Result<Built, Malformed> {
    let obj = spec.as_object().ok_or("a limiter must be an object")?;
    let kind = field(obj, "kind")?.as_str().ok_or("`kind` must be a string")?;
    let name = match obj.get("name") {
        Some(Value::String(s)) => Some(s.as_str()),
        None | Some(Value::Null) => None,
        Some(other) => return Err(format!("`name` must be a string, got {other}")),
    };
    let name_req = || name.ok_or_else(|| format!("a {kind} limiter needs a `name`"));
    // A limiter option (`block_for`) is carried by the spec as data: such a limiter is built
    // from its JSON form, as the bindings build it. Shadow mode is an option of every kind: the
    // named constructors' limiters take it by `with_shadow`, specs as data as a field.
    let kind = if obj.contains_key("block_for") { "<as data>" } else { kind };
    let shadow = match obj.get("shadow") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(format!("`shadow` must be a boolean, got {other}")),
    };
    let built = match kind {
        "concurrent" => {
            let limit = core!(count("limit", field(obj, "limit")?));
            let lock_timeout = core!(duration("lock_timeout", field(obj, "lock_timeout")?));
            backend.concurrent(name_req()?, limit, lock_timeout)
        }
        "bucket" => {
            let limit = core!(count("limit", field(obj, "limit")?));
            let interval = core!(interval(field(obj, "interval")?));
            backend.bucket(name_req()?, limit, interval)
        }
        "window" => {
            if let Some(windows) = obj.get("windows") {
                let list = windows.as_array().ok_or("`windows` must be an array")?;
                let mut parsed = Vec::with_capacity(list.len());
                for w in list {
                    let w = w.as_object().ok_or("each window must be an object")?;
                    let limit = core!(count("limit", field(w, "limit")?));
                    let interval = core!(interval(field(w, "interval")?));
                    parsed.push(WindowLimit { limit, interval });
                }
                backend.windows(name_req()?, &parsed)
            } else {
                let limit = core!(count("limit", field(obj, "limit")?));
                let interval = core!(interval(field(obj, "interval")?));
                backend.window(name_req()?, limit, interval)
            }
        }
        "sliding_window" => {
            let list = field(obj, "limits")?.as_array().ok_or("`limits` must be an array")?;
            let mut parsed = Vec::with_capacity(list.len());
            for l in list {
                let l = l.as_array().ok_or("each limit must be [duration, limit] or [duration, limit, precision]")?;
                if !(2..=3).contains(&l.len()) {
                    return Err("each limit must be [duration, limit] or [duration, limit, precision]".into());
                }
                let duration_v = core!(duration("duration", &l[0]));
                let limit = core!(count("limit", &l[1]));
                let precision = match l.get(2) {
                    Some(p) => Some(core!(duration("precision", p))),
                    None => None,
                };
                parsed.push(SlidingLimit { duration: duration_v, limit, precision });
            }
            backend.sliding_window(name_req()?, &parsed)
        }
        "token_bucket" => {
            let rate = number(field(obj, "rate")?)?;
            let capacity = core!(count("capacity", field(obj, "capacity")?));
            backend.token_bucket(name_req()?, rate, capacity)
        }
        "leaky" => {
            let size = core!(count("size", field(obj, "size")?));
            let drain = core!(duration("drain", field(obj, "drain")?));
            backend.leaky(name_req()?, size, drain)
        }
        "points" => {
            let capacity = core!(count("capacity", field(obj, "capacity")?));
            let refill = core!(duration("refill", field(obj, "refill")?));
            backend.points(name_req()?, capacity, refill)
        }
        "calendar" => {
            let limit = core!(count("limit", field(obj, "limit")?));
            let period = field(obj, "period")?.as_str().ok_or("`period` must be a string")?;
            let period = core!(Ok::<_, Malformed>(CalendarPeriod::parse(period)));
            let tz = field(obj, "tz")?.as_str().ok_or("`tz` must be a string")?;
            // An anchor beyond a byte is as invalid as 32: the core names it.
            let anchor = match obj.get("anchor") {
                None | Some(Value::Null) => None,
                Some(a) => Some(a.as_u64().ok_or("`anchor` must be a non-negative integer")?.min(255) as u8),
            };
            backend.calendar(name_req()?, limit, period, tz, anchor)
        }
        "unlimited" => match name {
            Some(name) => backend.limiter(name, LimiterSpec::Unlimited),
            None => Ok(Limiter::unlimited()),
        },
        // Any other kind is built from its spec as data, as the bindings build it.
        _ => {
            let mut spec = obj.clone();
            spec.remove("name");
            spec.remove("colocate");
            return Ok(backend.limiter_from_json(name_req()?, &Value::Object(spec).to_string()));
        }
    };
    Ok(built.and_then(|limiter| limiter.with_shadow(shadow)))
}

/// The same limiter rebuilt from its canonical JSON spec, which must read back unchanged: every
/// vector then runs on a limiter built from data (specs as data), not by the named constructor.
fn through_json(backend: &Backend, limiter: Limiter) -> Limiter {
    let json = limiter.spec_json();
    let rebuilt = backend
        .limiter_from_json(limiter.name(), &json)
        .unwrap_or_else(|e| panic!("{json} does not build the limiter it was read from: {e}"));
    assert_eq!(rebuilt.spec_json(), json, "a spec must read back as it was given");
    assert_eq!(rebuilt.spec(), limiter.spec());
    rebuilt
}

// ------------------------------------------------------------------------------------ results

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).expect("durations fit in u64 microseconds")
}

fn decision_json(d: &Decision) -> Value {
    let mut v = json!({
        "allowed": d.allowed,
        "limit": d.limit,
        "remaining": d.remaining,
        "retry_after_us": us(d.retry_after),
        "reset_after_us": us(d.reset_after),
    });
    if let Some(limits) = &d.limits {
        v["limits"] = limits
            .iter()
            .map(|l| {
                json!({
                    "window_us": us(l.window),
                    "limit": l.limit,
                    "remaining": l.remaining,
                    "retry_after_us": us(l.retry_after),
                    "reset_after_us": us(l.reset_after),
                })
            })
            .collect();
    }
    if let Some(lease) = &d.lease {
        v["fencing_token"] = json!(lease.fencing_token);
    }
    if d.shadow_refused {
        v["shadow_refused"] = json!(true);
    }
    v
}

fn error_json(e: &Error) -> Value {
    let mut v = json!({ "kind": e.kind().as_str() });
    if let Some(p) = e.parameter() {
        v["parameter"] = json!(p);
    }
    v
}

/// Checks an `error` expectation: `kind`, and `parameter` when given (required for
/// invalid_argument).
fn error_matches(expected: &Value, actual: &Error) -> Result<bool, Malformed> {
    let exp = expected.as_object().ok_or("`error` must be an object")?;
    let kind = field(exp, "kind")?.as_str().ok_or("error `kind` must be a string")?;
    if kind == "invalid_argument" && !exp.contains_key("parameter") {
        return Err("an invalid_argument expectation must name its `parameter`".into());
    }
    if actual.kind().as_str() != kind {
        return Ok(false);
    }
    Ok(match exp.get("parameter") {
        Some(p) => Some(p.as_str().ok_or("error `parameter` must be a string")?) == actual.parameter(),
        None => true,
    })
}

/// Reads a whole number from an expectation.
fn exp_u64(obj: &Map<String, Value>, name: &str) -> Result<u64, Malformed> {
    field(obj, name)?.as_u64().ok_or_else(|| format!("expected `{name}` must be a non-negative integer"))
}

/// Normalises an `expect` object to the shape [`decision_json`] produces (checking it is
/// well-formed), so the two compare with `==`.
fn normalise_expect(expect: &Value, with_token: bool) -> Result<Value, Malformed> {
    let obj = expect.as_object().ok_or("`expect` must be an object")?;
    const KNOWN: [&str; 8] = [
        "allowed",
        "limit",
        "remaining",
        "retry_after_us",
        "reset_after_us",
        "limits",
        "fencing_token",
        "shadow_refused",
    ];
    if let Some(unknown) = obj.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(format!("unknown field `{unknown}` in `expect`"));
    }
    let mut v = json!({
        "allowed": field(obj, "allowed")?.as_bool().ok_or("`allowed` must be a boolean")?,
        "limit": exp_u64(obj, "limit")?,
        "remaining": exp_u64(obj, "remaining")?,
        "retry_after_us": exp_u64(obj, "retry_after_us")?,
        "reset_after_us": exp_u64(obj, "reset_after_us")?,
    });
    if let Some(limits) = obj.get("limits") {
        let list = limits.as_array().ok_or("`limits` must be an array")?;
        let mut out = Vec::with_capacity(list.len());
        for l in list {
            let l = l.as_object().ok_or("each of `limits` must be an object")?;
            out.push(json!({
                "window_us": exp_u64(l, "window_us")?,
                "limit": exp_u64(l, "limit")?,
                "remaining": exp_u64(l, "remaining")?,
                "retry_after_us": exp_u64(l, "retry_after_us")?,
                "reset_after_us": exp_u64(l, "reset_after_us")?,
            }));
        }
        v["limits"] = Value::Array(out);
    }
    // Absent means false: only a shadow limiter's would-be refusals carry it.
    match obj.get("shadow_refused") {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => v["shadow_refused"] = json!(true),
        Some(_) => return Err("`shadow_refused` must be a boolean".into()),
    }
    if with_token {
        if let Some(token) = obj.get("fencing_token") {
            v["fencing_token"] = json!(token.as_u64().ok_or("`fencing_token` must be a non-negative integer")?);
        }
    } else if obj.contains_key("fencing_token") {
        return Err("`fencing_token` only applies to checks".into());
    }
    Ok(v)
}

// ------------------------------------------------------------------------------------ cases

struct Failure {
    file: String,
    case: String,
    step: Option<usize>,
    message: String,
}

fn key_of(step: &Map<String, Value>) -> Result<Option<String>, Malformed> {
    match step.get("key") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Object(o)) => {
            let repeat = field(o, "repeat")?.as_str().ok_or("`repeat` must be a string")?;
            let times = field(o, "times")?.as_u64().ok_or("`times` must be a non-negative integer")?;
            Ok(Some(repeat.repeat(times as usize)))
        }
        Some(other) => Err(format!("`key` must be a string, null or {{\"repeat\", \"times\"}}, got {other}")),
    }
}

/// Which form of the API the steps call: the blocking methods, or the async ones awaited.
#[derive(Clone, Copy, Debug)]
#[allow(dead_code)] // each test binary uses the styles it needs
pub enum CallStyle {
    Blocking,
    Async,
}

impl CallStyle {
    fn check(self, limiter: &Limiter, key: Option<&str>, cost: u64) -> Result<Decision, Error> {
        match self {
            CallStyle::Blocking => limiter.check_blocking(key, cost),
            CallStyle::Async => ratekeeper::block_on(limiter.check(key, cost)),
        }
    }

    fn peek(self, limiter: &Limiter, key: Option<&str>) -> Result<Decision, Error> {
        match self {
            CallStyle::Blocking => limiter.peek_blocking(key),
            CallStyle::Async => ratekeeper::block_on(limiter.peek(key)),
        }
    }

    fn reset(self, limiter: &Limiter, key: Option<&str>) -> Result<(), Error> {
        match self {
            CallStyle::Blocking => limiter.reset_blocking(key),
            CallStyle::Async => ratekeeper::block_on(limiter.reset(key)),
        }
    }

    fn points_used(self, limiter: &Limiter, key: Option<&str>, estimate: u64, actual: u64) -> Result<Decision, Error> {
        match self {
            CallStyle::Blocking => limiter.points_used_blocking(key, estimate, actual),
            CallStyle::Async => ratekeeper::block_on(limiter.points_used(key, estimate, actual)),
        }
    }

    fn check_all(
        self,
        backend: &Backend,
        parts: &[(&Limiter, Option<&str>, u64)],
    ) -> Result<ratekeeper::CombinedDecision, Error> {
        match self {
            CallStyle::Blocking => backend.check_all_blocking(parts),
            CallStyle::Async => ratekeeper::block_on(backend.check_all(parts)),
        }
    }

    fn block(self, limiter: &Limiter, key: Option<&str>, duration: Duration) -> Result<Duration, Error> {
        match self {
            CallStyle::Blocking => limiter.block_blocking(key, duration),
            CallStyle::Async => ratekeeper::block_on(limiter.block(key, duration)),
        }
    }

    fn unblock(self, limiter: &Limiter, key: Option<&str>) -> Result<bool, Error> {
        match self {
            CallStyle::Blocking => limiter.unblock_blocking(key),
            CallStyle::Async => ratekeeper::block_on(limiter.unblock(key)),
        }
    }

    fn settle(self, limiter: &Limiter, decision: &Decision, actual: u64) -> Result<Decision, Error> {
        match self {
            CallStyle::Blocking => limiter.settle_blocking(decision, actual),
            CallStyle::Async => ratekeeper::block_on(limiter.settle(decision, actual)),
        }
    }

    fn release(self, limiter: &Limiter, key: Option<&str>, lease: &Lease) -> Result<(), Error> {
        match self {
            CallStyle::Blocking => limiter.release_blocking(key, lease),
            CallStyle::Async => ratekeeper::block_on(limiter.release(key, lease)),
        }
    }
}

/// What one step did: a decision (check, peek, points_used), nothing (reset, release), or an error.
enum Outcome {
    Decision(Decision),
    Done,
    Failed(Error),
}

/// Runs one case; returns the failures of its steps (or one for a malformed case).
fn run_case(
    file: &str,
    case: &Value,
    style: CallStyle,
    make_backend: MakeBackend,
) -> (String, Vec<String>, Vec<Failure>) {
    let name = case.get("name").and_then(Value::as_str).unwrap_or("<unnamed>").to_string();
    let mut kinds = Vec::new();
    let mut failures = Vec::new();
    let fail =
        |step: Option<usize>, message: String| Failure { file: file.to_string(), case: name.clone(), step, message };
    if let Err(message) =
        run_case_inner(case, style, make_backend, &mut kinds, &mut |step, message| failures.push(fail(step, message)))
    {
        failures.push(fail(None, format!("malformed vector: {message}")));
    }
    (name, kinds, failures)
}

fn run_case_inner(
    case: &Value,
    style: CallStyle,
    make_backend: MakeBackend,
    kinds: &mut Vec<String>,
    report: &mut dyn FnMut(Option<usize>, String),
) -> Result<(), Malformed> {
    let case = case.as_object().ok_or("a case must be an object")?;
    let start_us = field(case, "start_us")?.as_u64().ok_or("`start_us` must be a non-negative integer")?;
    let limiters = field(case, "limiters")?.as_object().ok_or("`limiters` must be an object")?;
    let steps = field(case, "steps")?.as_array().ok_or("`steps` must be an array")?;
    if limiters.is_empty() {
        return Err("a case needs at least one limiter".into());
    }
    for spec in limiters.values() {
        let kind = spec.get("kind").and_then(Value::as_str).ok_or("every limiter needs a string `kind`")?;
        if ratekeeper::Kind::from_name(kind).is_none() {
            return Err(format!("unknown limiter kind {kind:?}"));
        }
        if !kinds.iter().any(|k| k == kind) {
            kinds.push(kind.to_string());
        }
    }

    let clock = Arc::new(ManualClock::new(start_us));
    let backend = make_backend(clock.clone());

    // Build every limiter (in id order); the first error is the case's limiter error, if any.
    let mut built: HashMap<&str, Limiter> = HashMap::new();
    let mut build_error: Option<(String, Error)> = None;
    for (id, spec) in limiters {
        match build_limiter(&backend, spec)? {
            Ok(limiter) => {
                built.insert(id.as_str(), through_json(&backend, limiter));
            }
            Err(e) => {
                build_error.get_or_insert((id.clone(), e));
            }
        }
    }
    if let Some(expected) = case.get("limiter_error") {
        if !steps.is_empty() {
            return Err("a case with `limiter_error` must have no steps".into());
        }
        match &build_error {
            Some((_, e)) if error_matches(expected, e)? => {}
            Some((id, e)) => {
                report(None, format!("building limiter {id}: expected error {expected}, got {} ({e})", error_json(e)))
            }
            None => report(None, format!("expected limiter error {expected}, but every limiter was built")),
        }
        return Ok(());
    }
    if let Some((id, e)) = build_error {
        report(None, format!("building limiter {id}: expected success, got {} ({e})", error_json(&e)));
        return Ok(());
    }

    let mut leases: HashMap<String, (Lease, String)> = HashMap::new();
    // Decisions saved by `save_decision`, for `settle` steps.
    let mut decisions: HashMap<String, Decision> = HashMap::new();
    for (index, step) in steps.iter().enumerate() {
        let step = step.as_object().ok_or_else(|| format!("step {index} must be an object"))?;
        let op = field(step, "op")?.as_str().ok_or_else(|| format!("step {index}: `op` must be a string"))?;
        if op == "advance" {
            let micros = field(step, "us")?
                .as_u64()
                .ok_or_else(|| format!("step {index}: `us` must be a non-negative integer"))?;
            clock.advance_micros(micros);
            continue;
        }
        if op == "check_all" {
            check_all_step(&backend, &built, step, index, style, &mut leases, report)?;
            continue;
        }
        let limiter_id =
            field(step, "limiter")?.as_str().ok_or_else(|| format!("step {index}: `limiter` must be a string"))?;
        let limiter = built.get(limiter_id).ok_or_else(|| format!("step {index}: unknown limiter {limiter_id:?}"))?;
        let key = key_of(step).map_err(|e| format!("step {index}: {e}"))?;
        let key = key.as_deref();
        let is_concurrent = limiter.kind() == ratekeeper::Kind::Concurrent;

        let outcome = match op {
            "check" => {
                let cost = match step.get("cost") {
                    None => Ok(1),
                    Some(v) => cost_from_f64("cost", number(v).map_err(|e| format!("step {index}: {e}"))?),
                };
                match cost.and_then(|cost| style.check(limiter, key, cost)) {
                    Ok(d) => Outcome::Decision(d),
                    Err(e) => Outcome::Failed(e),
                }
            }
            "peek" => match style.peek(limiter, key) {
                Ok(d) => Outcome::Decision(d),
                Err(e) => Outcome::Failed(e),
            },
            "reset" => match style.reset(limiter, key) {
                Ok(()) => Outcome::Done,
                Err(e) => Outcome::Failed(e),
            },
            "points_used" => {
                let estimate = number(field(step, "estimate")?).map_err(|e| format!("step {index}: {e}"))?;
                let actual = number(field(step, "actual")?).map_err(|e| format!("step {index}: {e}"))?;
                let result = cost_from_f64("estimate", estimate)
                    .and_then(|estimate| Ok((estimate, cost_from_f64("actual", actual)?)))
                    .and_then(|(estimate, actual)| style.points_used(limiter, key, estimate, actual));
                match result {
                    Ok(d) => Outcome::Decision(d),
                    Err(e) => Outcome::Failed(e),
                }
            }
            "block" => {
                let seconds = number(field(step, "seconds")?).map_err(|e| format!("step {index}: {e}"))?;
                match duration_from_secs("duration", seconds).and_then(|d| style.block(limiter, key, d)) {
                    Ok(_) => Outcome::Done,
                    Err(e) => Outcome::Failed(e),
                }
            }
            "unblock" => match style.unblock(limiter, key) {
                Ok(_) => Outcome::Done,
                Err(e) => Outcome::Failed(e),
            },
            "settle" => {
                let saved = field(step, "decision")?
                    .as_str()
                    .ok_or_else(|| format!("step {index}: `decision` must be a string"))?;
                let decision =
                    decisions.get(saved).ok_or_else(|| format!("step {index}: no decision saved as {saved:?}"))?;
                let actual = number(field(step, "actual")?).map_err(|e| format!("step {index}: {e}"))?;
                match cost_from_f64("actual", actual).and_then(|actual| style.settle(limiter, decision, actual)) {
                    Ok(d) => Outcome::Decision(d),
                    Err(e) => Outcome::Failed(e),
                }
            }
            "release" => {
                let lease_name =
                    field(step, "lease")?.as_str().ok_or_else(|| format!("step {index}: `lease` must be a string"))?;
                let (lease, _) = leases
                    .get(lease_name)
                    .ok_or_else(|| format!("step {index}: no lease saved as {lease_name:?} (did its check fail?)"))?;
                match style.release(limiter, key, lease) {
                    Ok(()) => Outcome::Done,
                    Err(e) => Outcome::Failed(e),
                }
            }
            other => return Err(format!("step {index}: unknown op {other:?}")),
        };

        let mut fail = |message: String| report(Some(index), format!("{op} on {limiter_id}: {message}"));
        match (step.get("error"), step.get("expect"), outcome) {
            (Some(_), Some(_), _) => return Err(format!("step {index}: has both `error` and `expect`")),
            (Some(expected), None, Outcome::Failed(e)) => {
                if !error_matches(expected, &e).map_err(|m| format!("step {index}: {m}"))? {
                    fail(format!("expected error {expected}, got error {} ({e})", error_json(&e)));
                }
            }
            (Some(expected), None, Outcome::Decision(d)) => {
                fail(format!("expected error {expected}, got decision {}", decision_json(&d)))
            }
            (Some(expected), None, Outcome::Done) => fail(format!("expected error {expected}, got success")),
            (None, _, Outcome::Failed(e)) => fail(format!("expected success, got error {} ({e})", error_json(&e))),
            (None, Some(_), Outcome::Done) => {
                return Err(format!("step {index}: `{op}` returns no decision to `expect`"))
            }
            (None, None, Outcome::Done) => {}
            (None, None, Outcome::Decision(_)) => {
                return Err(format!("step {index}: `{op}` needs an `expect` or an `error`"))
            }
            (None, Some(expect), Outcome::Decision(d)) => {
                let expected = normalise_expect(expect, op == "check").map_err(|m| format!("step {index}: {m}"))?;
                let mut actual = decision_json(&d);
                // A lease comes with exactly the admitted checks of a concurrent limiter.
                let wants_lease = op == "check" && is_concurrent && d.allowed && !d.shadow_refused;
                if d.lease.is_some() != wants_lease {
                    fail(format!("lease present: {}, expected {wants_lease}", d.lease.is_some()));
                }
                // The fencing token is optional in vectors: compare it only when given.
                if expected.get("fencing_token").is_none() {
                    if let Some(obj) = actual.as_object_mut() {
                        obj.remove("fencing_token");
                    }
                }
                if expected != actual {
                    fail(format!("expected {expected}\n         actual   {actual}"));
                }
                if let Some(save) = step.get("save_decision") {
                    let save =
                        save.as_str().ok_or_else(|| format!("step {index}: `save_decision` must be a string"))?;
                    decisions.insert(save.to_string(), d.clone());
                }
                if let Some(save) = step.get("save_lease") {
                    let save = save.as_str().ok_or_else(|| format!("step {index}: `save_lease` must be a string"))?;
                    match d.lease {
                        Some(lease) => {
                            leases.insert(save.to_string(), (lease, limiter_id.to_string()));
                        }
                        None => fail(format!("expected a lease to save as {save:?}, got none")),
                    }
                }
            }
        }
    }
    Ok(())
}

/// A `check_all` step: `parts` (each `{limiter, key, cost}`), then `expect` (`allowed`,
/// `retry_after_us` and `parts`, one decision per part) or `error`. Admitted concurrent parts
/// hold leases, saved (in order) under the names of `save_leases` when given.
fn check_all_step(
    backend: &Backend,
    built: &HashMap<&str, Limiter>,
    step: &Map<String, Value>,
    index: usize,
    style: CallStyle,
    leases: &mut HashMap<String, (Lease, String)>,
    report: &mut dyn FnMut(Option<usize>, String),
) -> Result<(), Malformed> {
    let list = field(step, "parts")?.as_array().ok_or_else(|| format!("step {index}: `parts` must be an array"))?;
    let mut keys = Vec::with_capacity(list.len());
    let mut ids = Vec::with_capacity(list.len());
    let mut costs = Vec::with_capacity(list.len());
    for part in list {
        let part = part.as_object().ok_or_else(|| format!("step {index}: each part must be an object"))?;
        let id = field(part, "limiter")?.as_str().ok_or_else(|| format!("step {index}: `limiter` must be a string"))?;
        ids.push(id);
        keys.push(key_of(part).map_err(|e| format!("step {index}: {e}"))?);
        costs.push(match part.get("cost") {
            None => Ok(1),
            Some(v) => cost_from_f64("cost", number(v).map_err(|e| format!("step {index}: {e}"))?),
        });
    }
    let mut parts = Vec::with_capacity(list.len());
    let mut bad_cost = None;
    for ((id, key), cost) in ids.iter().zip(&keys).zip(&costs) {
        let limiter = built.get(id).ok_or_else(|| format!("step {index}: unknown limiter {id:?}"))?;
        match cost {
            Ok(cost) => parts.push((limiter, key.as_deref(), *cost)),
            Err(e) => {
                bad_cost.get_or_insert_with(|| e.to_string());
                parts.push((limiter, key.as_deref(), 0));
            }
        }
    }
    if let Some(message) = bad_cost {
        return Err(format!("step {index}: a part's cost is not a count: {message}"));
    }
    let result = style.check_all(backend, &parts);
    let mut fail = |message: String| report(Some(index), format!("check_all: {message}"));
    match (step.get("error"), step.get("expect"), result) {
        (Some(_), Some(_), _) => return Err(format!("step {index}: has both `error` and `expect`")),
        (Some(expected), None, Err(e)) => {
            if !error_matches(expected, &e).map_err(|m| format!("step {index}: {m}"))? {
                fail(format!("expected error {expected}, got error {} ({e})", error_json(&e)));
            }
        }
        (Some(expected), None, Ok(c)) => fail(format!("expected error {expected}, got allowed: {}", c.allowed)),
        (None, _, Err(e)) => fail(format!("expected success, got error {} ({e})", error_json(&e))),
        (None, None, Ok(_)) => return Err(format!("step {index}: `check_all` needs an `expect` or an `error`")),
        (None, Some(expect), Ok(combined)) => {
            let exp = expect.as_object().ok_or_else(|| format!("step {index}: `expect` must be an object"))?;
            let allowed = field(exp, "allowed")?.as_bool().ok_or("`allowed` must be a boolean")?;
            let retry = exp_u64(exp, "retry_after_us")?;
            if combined.allowed != allowed || us(combined.retry_after) != retry {
                fail(format!(
                    "expected allowed {allowed}, retry_after_us {retry}; got {}, {}",
                    combined.allowed,
                    us(combined.retry_after)
                ));
            }
            let expected_parts = field(exp, "parts")?.as_array().ok_or("`parts` must be an array")?;
            if expected_parts.len() != combined.parts.len() {
                return Err(format!("step {index}: expect one decision per part"));
            }
            let mut saved = Vec::new();
            for (i, (expected, part)) in expected_parts.iter().zip(&combined.parts).enumerate() {
                let expected =
                    normalise_expect(expected, true).map_err(|m| format!("step {index}: parts[{i}]: {m}"))?;
                let mut actual = decision_json(&part.decision);
                let wants_lease = combined.allowed && part.limiter.kind() == ratekeeper::Kind::Concurrent;
                if part.decision.lease.is_some() != wants_lease {
                    fail(format!(
                        "parts[{i}]: lease present: {}, expected {wants_lease}",
                        part.decision.lease.is_some()
                    ));
                }
                if expected.get("fencing_token").is_none() {
                    if let Some(obj) = actual.as_object_mut() {
                        obj.remove("fencing_token");
                    }
                }
                if expected != actual {
                    fail(format!("parts[{i}]: expected {expected}\n         actual   {actual}"));
                }
                if let Some(lease) = part.decision.lease {
                    saved.push((lease, ids[i].to_string()));
                }
            }
            if let Some(names) = step.get("save_leases") {
                let names = names.as_array().ok_or_else(|| format!("step {index}: `save_leases` must be an array"))?;
                if names.len() != saved.len() {
                    fail(format!("expected {} leases to save, got {}", names.len(), saved.len()));
                }
                for (name, lease) in names.iter().zip(saved) {
                    let name = name.as_str().ok_or_else(|| format!("step {index}: lease names are strings"))?;
                    leases.insert(name.to_string(), lease);
                }
            }
        }
    }
    Ok(())
}

/// Builds a fresh backend for one case, driven by the case's manual clock.
pub type MakeBackend<'a> = &'a dyn Fn(Arc<ManualClock>) -> Backend;

/// Runs every vector against backends from `make_backend`, calling the API in `style`,
/// reporting every failure, and asserts the totals. `label` names the backend in the summary.
pub fn run_conformance(label: &str, style: CallStyle, make_backend: MakeBackend) {
    let dir = vectors_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    // Vectors of calls not every binding has yet live in subdirectories (`check_all/`), which
    // the runners that have them read too.
    let check_all = dir.join("check_all");
    if let Ok(entries) = std::fs::read_dir(&check_all) {
        files.extend(
            entries
                .map(|entry| entry.expect("directory entry").path())
                .filter(|p| p.extension().is_some_and(|x| x == "json")),
        );
    }
    files.sort();
    assert!(!files.is_empty(), "no vectors in {}", dir.display());

    let mut failures: Vec<Failure> = Vec::new();
    let mut failed_cases: HashSet<(String, String)> = HashSet::new();
    let mut per_kind: BTreeMap<String, usize> = KINDS.iter().map(|k| (k.to_string(), 0)).collect();
    let mut seen: HashSet<(String, String)> = HashSet::new();
    let mut total = 0usize;

    for path in &files {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                failures.push(Failure { file, case: "<file>".into(), step: None, message: format!("unreadable: {e}") });
                continue;
            }
        };
        let doc: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                failures.push(Failure {
                    file,
                    case: "<file>".into(),
                    step: None,
                    message: format!("invalid JSON: {e}"),
                });
                continue;
            }
        };
        let description_ok = doc.get("description").and_then(Value::as_str).is_some_and(|d| !d.is_empty());
        let Some(cases) = doc.get("cases").and_then(Value::as_array).filter(|_| description_ok) else {
            failures.push(Failure {
                file,
                case: "<file>".into(),
                step: None,
                message: "a vector file needs a non-empty `description` and a `cases` array".into(),
            });
            continue;
        };
        for case in cases {
            let (name, kinds, case_failures) = run_case(&file, case, style, make_backend);
            total += 1;
            if !seen.insert((file.clone(), name.clone())) {
                failures.push(Failure {
                    file: file.clone(),
                    case: name.clone(),
                    step: None,
                    message: "duplicate case name".into(),
                });
            }
            // Only the kinds of [`KINDS`] have a minimum (a leased limiter appears as a bad part).
            for kind in kinds {
                if let Some(n) = per_kind.get_mut(&kind) {
                    *n += 1;
                }
            }
            if !case_failures.is_empty() {
                failed_cases.insert((file.clone(), name.clone()));
            }
            failures.extend(case_failures);
        }
    }

    for f in &failures {
        let step = f.step.map_or_else(|| "-".to_string(), |s| s.to_string());
        eprintln!("FAIL {} / {:?} / step {}: {}", f.file, f.case, step, f.message);
        failed_cases.insert((f.file.clone(), f.case.clone()));
    }
    let kinds_line: Vec<String> = per_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!(
        "vectors on {label} ({style:?} calls): {total} cases, {} failed ({})",
        failed_cases.len(),
        kinds_line.join(", ")
    );

    let mut problems = Vec::new();
    if !failures.is_empty() {
        problems.push(format!("{} conformance vector case(s) failed; see FAIL lines above", failed_cases.len()));
    }
    if total < MIN_TOTAL {
        problems.push(format!("only {total} conformance vector cases; at least {MIN_TOTAL} are required"));
    }
    for (kind, n) in &per_kind {
        if *n < MIN_PER_KIND {
            problems.push(format!("only {n} cases exercise {kind} limiters; at least {MIN_PER_KIND} are required"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
