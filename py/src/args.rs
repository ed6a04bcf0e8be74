//! Argument conversion. Every number goes through `ratekeeper::params`, so the validation and
//! its messages are the core's, and every bad argument (wrong type included) raises
//! `InvalidArgument` naming the parameter as Python spells it.
//!
//! Each kind of argument is a type implementing `FromPyObject` (with its type hint for the
//! generated stubs), parameterised by a marker type that carries the parameter's name.

use std::marker::PhantomData;
use std::time::Duration;

use pyo3::inspect::PyStaticExpr;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString};
use pyo3::{type_hint_identifier, type_hint_union, Borrowed};
use ratekeeper::params::{
    cost_from_f64, count_from_f64, duration_from_secs, interval_from_name, status_from_f64, timeout_from_secs,
    validate_cost, validate_count,
};
use ratekeeper::Error;

use crate::errors::to_py_err;

/// A parameter name, as a type.
pub(crate) trait Param {
    const NAME: &'static str;
}

macro_rules! params {
    ($($ty:ident = $name:literal),* $(,)?) => {
        $(
            #[doc = concat!("The `", $name, "` parameter.")]
            pub(crate) struct $ty;
            impl Param for $ty {
                const NAME: &'static str = $name;
            }
        )*
    };
}

params! {
    PCost = "cost", PEstimate = "estimate", PActual = "actual", PLimit = "limit", PCapacity = "capacity",
    PSize = "size", PChunk = "chunk", PLockTimeout = "lock_timeout", PWaitTimeout = "wait_timeout",
    PDrain = "drain", PRefill = "refill", PRate = "rate", PDuration = "duration", PPrecision = "precision",
    PDeadline = "deadline", PConnectTimeout = "connect_timeout", PMaxKeys = "max_keys",
    PDivisor = "fallback_divisor", PSeconds = "seconds", PMicros = "micros", PStartUs = "start_us",
    PUtilization = "utilization", PPriority = "priority", PEndOfGood = "end_of_good",
    PStartOfBad = "start_of_bad", PBeforeShedding = "seconds_before_shedding", PToShedAll = "seconds_to_shed_all",
    PLevels = "levels", PName = "name", PKey = "key", PUrl = "url", PPrefix = "prefix",
    PFailurePolicy = "failure_policy", PId = "id", PFencingToken = "fencing_token", PGrantedAtUs = "granted_at_us",
    PAllowFallback = "allow_fallback", PPeriod = "period", PTz = "tz", PAnchor = "anchor",
    PAttempt = "attempt", PBase = "base", PJitter = "jitter", PMaxReschedules = "max_reschedules",
    PRetryAfter = "retry_after", PSeed = "seed", PDelay = "delay",
    PTotalRate = "total_rate", PPartitions = "partitions", PLeaseTtl = "lease_ttl", PReserved = "reserved",
    PMaxPause = "max_pause", PTlsCaFile = "tls_ca_file", PTlsCertFile = "tls_cert_file",
    PTlsKeyFile = "tls_key_file", PBlockFor = "block_for", PShadow = "shadow", PDenyCache = "deny_cache",
    PDenyCacheMaxEntries = "deny_cache_max_entries",
    PReplicaAcks = "replica_acks", PService = "service", PUsername = "username", PPassword = "password", PDb = "db",
    PTls = "tls", PSentinelUsername = "sentinel_username", PSentinelPassword = "sentinel_password",
    PSentinelTls = "sentinel_tls", PSentinels = "sentinels", PSeeds = "seeds", POnConflict = "on_conflict",
}

pub(crate) fn invalid(py: Python<'_>, parameter: &'static str, message: String) -> PyErr {
    to_py_err(py, Error::invalid(parameter, message))
}

fn type_name(obj: Borrowed<'_, '_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// A Python number: an exact integer (any size, sign kept) or a float.
enum Number {
    Int(i128),
    /// An integer beyond i128: only its sign and rough size matter (it is out of every range).
    Huge(f64),
    Float(f64),
}

fn number(obj: Borrowed<'_, '_, PyAny>, parameter: &'static str) -> PyResult<Number> {
    let py = obj.py();
    if obj.is_instance_of::<PyBool>() {
        return Err(invalid(py, parameter, "must be a number, got a bool".into()));
    }
    if obj.is_instance_of::<PyInt>() {
        return Ok(match obj.extract::<i128>() {
            Ok(v) => Number::Int(v),
            Err(_) => Number::Huge(obj.extract::<f64>().unwrap_or(f64::INFINITY)),
        });
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Number::Float(f.value()));
    }
    // Other numeric types: anything with __index__ (numpy integers), then __float__ (Decimal,
    // Fraction, numpy floats). Strings have neither.
    if let Ok(v) = obj.extract::<i128>() {
        return Ok(Number::Int(v));
    }
    match obj.extract::<f64>() {
        Ok(v) => Ok(Number::Float(v)),
        Err(_) => Err(invalid(py, parameter, format!("must be a number, got {}", type_name(obj)))),
    }
}

fn number_as_f64(n: &Number) -> f64 {
    match *n {
        Number::Int(v) => v as f64,
        Number::Huge(v) | Number::Float(v) => v,
    }
}

/// A whole number of at least `min` (0 for costs, 1 for counts), up to 2^53, validated by the core.
fn whole(obj: Borrowed<'_, '_, PyAny>, parameter: &'static str, min: u64) -> PyResult<u64> {
    let py = obj.py();
    let n = number(obj, parameter)?;
    let result = match n {
        // Exact integers: never through a float, so 2^53 + 1 is refused rather than rounded.
        Number::Int(v) if v >= 0 && v <= u64::MAX as i128 => {
            if min == 0 {
                validate_cost(parameter, v as u64)
            } else {
                validate_count(parameter, v as u64)
            }
        }
        ref other => {
            let f = number_as_f64(other);
            if min == 0 {
                cost_from_f64(parameter, f)
            } else {
                count_from_f64(parameter, f)
            }
        }
    };
    result.map_err(|e| to_py_err(py, e))
}

fn seconds(obj: Borrowed<'_, '_, PyAny>, parameter: &'static str) -> PyResult<f64> {
    Ok(number_as_f64(&number(obj, parameter)?))
}

// ------------------------------------------------------------------------------------ types

const INT: PyStaticExpr = type_hint_identifier!("builtins", "int");
const FLOAT: PyStaticExpr = type_hint_identifier!("builtins", "float");
const STR: PyStaticExpr = type_hint_identifier!("builtins", "str");
const BOOL: PyStaticExpr = type_hint_identifier!("builtins", "bool");

/// A cost (`cost`, `estimate`, `actual`): a whole number in 0..=2^53.
pub(crate) struct Cost<P>(pub u64, PhantomData<P>);

impl<P> Cost<P> {
    pub(crate) const ONE: Self = Cost(1, PhantomData);
    pub(crate) const ZERO: Self = Cost(0, PhantomData);
}

impl<'a, 'py, P: Param> FromPyObject<'a, 'py> for Cost<P> {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = INT;

    #[inline]
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        // Fast path: a small non-negative int.
        if obj.is_exact_instance_of::<PyInt>() {
            if let Ok(v) = obj.extract::<u64>() {
                if let Ok(v) = validate_cost(P::NAME, v) {
                    return Ok(Cost(v, PhantomData));
                }
            }
        }
        Ok(Cost(whole(obj, P::NAME, 0)?, PhantomData))
    }
}

/// A limit, capacity or size: a whole number in 1..=2^53.
pub(crate) struct Count<P>(pub u64, PhantomData<P>);

impl<'a, 'py, P: Param> FromPyObject<'a, 'py> for Count<P> {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = INT;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Count(whole(obj, P::NAME, 1)?, PhantomData))
    }
}

/// A positive duration in seconds (int or float), exact to the microsecond.
pub(crate) struct Seconds<P>(pub Duration, PhantomData<P>);

impl<P> Seconds<P> {
    pub(crate) const fn new(d: Duration) -> Self {
        Seconds(d, PhantomData)
    }
}

impl<'a, 'py, P: Param> FromPyObject<'a, 'py> for Seconds<P> {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = FLOAT;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let s = seconds(obj, P::NAME)?;
        duration_from_secs(P::NAME, s).map(Seconds::new).map_err(|e| to_py_err(obj.py(), e))
    }
}

/// A non-negative timeout in seconds; zero means "do not wait".
pub(crate) struct Timeout<P>(pub Duration, PhantomData<P>);

impl<'a, 'py, P: Param> FromPyObject<'a, 'py> for Timeout<P> {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = FLOAT;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let s = seconds(obj, P::NAME)?;
        timeout_from_secs(P::NAME, s).map(|d| Timeout(d, PhantomData)).map_err(|e| to_py_err(obj.py(), e))
    }
}

/// A bucket or window interval: seconds, or `"second"`, `"minute"`, `"hour"`, `"day"`.
pub(crate) struct Interval(pub Duration);

impl<'a, 'py> FromPyObject<'a, 'py> for Interval {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = type_hint_union!(FLOAT, STR);

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        if let Ok(s) = obj.cast::<PyString>() {
            let name = s.to_str()?;
            return interval_from_name("interval", name).map(Interval).map_err(|e| to_py_err(py, e));
        }
        let s = seconds(obj, "interval")?;
        duration_from_secs("interval", s).map(Interval).map_err(|e| to_py_err(py, e))
    }
}

/// The `limit` of `bucket` / `window`: a whole number, or a rate string (`"5/minute"`,
/// `"100 per hour"`) that gives the interval too.
pub(crate) enum LimitOrRate {
    Count(u64),
    Rate(String),
}

impl<'a, 'py> FromPyObject<'a, 'py> for LimitOrRate {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = type_hint_union!(INT, STR);

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(text) = obj.cast::<PyString>() {
            return Ok(LimitOrRate::Rate(text.to_str()?.to_owned()));
        }
        Ok(LimitOrRate::Count(whole(obj, "limit", 1)?))
    }
}

impl LimitOrRate {
    /// The count and interval: a rate string carries its own interval, a count needs one.
    pub(crate) fn with_interval(self, py: Python<'_>, interval: Option<Interval>) -> PyResult<(u64, Duration)> {
        let result = match (self, interval) {
            (LimitOrRate::Count(limit), Some(Interval(interval))) => Ok((limit, interval)),
            (LimitOrRate::Count(_), None) => Err(Error::invalid(
                "interval",
                "is required after a count (or give a rate string such as \"5/minute\")",
            )),
            (LimitOrRate::Rate(text), None) => ratekeeper::parse_rate("rate", &text).map(|r| (r.limit, r.interval)),
            (LimitOrRate::Rate(text), Some(_)) => Err(Error::invalid(
                "limit",
                format!("must be a whole number, got the str {text:?} (a rate string such as \"5/minute\" takes no interval)"),
            )),
        };
        result.map_err(|e| to_py_err(py, e))
    }
}

/// A plain float (rates, utilization, thresholds), validated by the core where it is used.
pub(crate) struct Float<P>(pub f64, PhantomData<P>);

impl<'a, 'py, P: Param> FromPyObject<'a, 'py> for Float<P> {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = FLOAT;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Float(seconds(obj, P::NAME)?, PhantomData))
    }
}

/// A non-negative integer (microseconds, lease parts, priorities), exact.
pub(crate) struct UInt<P>(pub u128, PhantomData<P>);

impl<'a, 'py, P: Param> FromPyObject<'a, 'py> for UInt<P> {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = INT;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
            return Err(invalid(py, P::NAME, format!("must be an int, got {}", type_name(obj))));
        }
        match obj.extract::<u128>() {
            Ok(v) => Ok(UInt(v, PhantomData)),
            Err(_) => Err(invalid(py, P::NAME, "must be a non-negative integer that fits in 128 bits".into())),
        }
    }
}

/// A flag: a `bool` (not any truthy value: a misplaced argument is refused, not read as true).
pub(crate) struct Flag<P>(pub bool, PhantomData<P>);

impl<'a, 'py, P: Param> FromPyObject<'a, 'py> for Flag<P> {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = BOOL;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        match obj.cast::<PyBool>() {
            Ok(b) => Ok(Flag(b.is_true(), PhantomData)),
            Err(_) => Err(invalid(obj.py(), P::NAME, format!("must be a bool, got {}", type_name(obj)))),
        }
    }
}

impl<P> Flag<P> {
    pub(crate) const fn new(value: bool) -> Self {
        Flag(value, PhantomData)
    }
}

/// A string argument, borrowed from the Python `str` (keys, names, URLs). A `str` that is not
/// a sequence of Unicode scalar values (it holds a lone surrogate, e.g. `"\ud800"`, which UTF-8
/// cannot encode) is an `InvalidArgument` naming the parameter, not a `UnicodeEncodeError`.
pub(crate) struct Text<'a, P>(pub &'a str, PhantomData<P>);

impl<'a, 'py, P: Param> FromPyObject<'a, 'py> for Text<'a, P> {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = STR;

    #[inline]
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if obj.is_instance_of::<PyString>() {
            match <&'a str as FromPyObject<'a, 'py>>::extract(obj) {
                Ok(text) => Ok(Text(text, PhantomData)),
                Err(_) => Err(invalid(
                    obj.py(),
                    P::NAME,
                    "must be a well-formed Unicode string; found a lone surrogate (U+D800..U+DFFF)".into(),
                )),
            }
        } else {
            Err(invalid(obj.py(), P::NAME, format!("must be a str, got {}", type_name(obj))))
        }
    }
}

/// The optional `key` of every call: `None` is the limiter's single shared key.
pub(crate) type Key<'a> = Option<Text<'a, PKey>>;

#[inline]
pub(crate) fn key<'a>(k: &Key<'a>) -> Option<&'a str> {
    k.as_ref().map(|t| t.0)
}

/// `failure_policy`: `"fail_closed"`, `"fail_open"` or `"fallback"`.
pub(crate) struct PolicyName<'a>(pub &'a str);

const LITERAL: PyStaticExpr = type_hint_identifier!("typing", "Literal");

impl<'a, 'py> FromPyObject<'a, 'py> for PolicyName<'a> {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = pyo3::type_hint_subscript!(
        LITERAL,
        PyStaticExpr::Constant { value: pyo3::inspect::PyStaticConstant::Str("fail_closed") },
        PyStaticExpr::Constant { value: pyo3::inspect::PyStaticConstant::Str("fail_open") },
        PyStaticExpr::Constant { value: pyo3::inspect::PyStaticConstant::Str("fallback") }
    );

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(PolicyName(Text::<'a, PFailurePolicy>::extract(obj)?.0))
    }
}

/// A limiter spec: its JSON text, or a mapping (a `dict`) serialized to JSON here.
pub(crate) struct SpecArg(pub String);

impl<'a, 'py> FromPyObject<'a, 'py> for SpecArg {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = type_hint_union!(
        STR,
        pyo3::type_hint_subscript!(
            type_hint_identifier!("collections.abc", "Mapping"),
            STR,
            type_hint_identifier!("typing", "Any")
        )
    );

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        if let Ok(text) = obj.cast::<PyString>() {
            return Ok(SpecArg(text.to_str()?.to_owned()));
        }
        let dumps = py.import("json")?.getattr("dumps")?;
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("allow_nan", false)?;
        match dumps.call((obj,), Some(&kwargs)).and_then(|s| s.extract::<String>()) {
            Ok(json) if obj.is_instance_of::<pyo3::types::PyDict>() || obj.hasattr("keys")? => Ok(SpecArg(json)),
            Ok(_) => {
                Err(invalid(py, "spec", format!("must be a dict or a JSON string, got {}", obj.get_type().name()?)))
            }
            Err(e) => Err(invalid(py, "spec", format!("cannot be written as JSON: {e}"))),
        }
    }
}

/// An HTTP status code: a whole number in 100..=999.
pub(crate) struct Status(pub u16);

impl<'a, 'py> FromPyObject<'a, 'py> for Status {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = INT;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let n = number_as_f64(&number(obj, "status")?);
        status_from_f64("status", n).map(Status).map_err(|e| to_py_err(obj.py(), e))
    }
}

/// Response headers: a mapping (a `dict`, `requests`' and `httpx`' headers: anything with
/// `items()`) or an iterable of `(name, value)` pairs. Names and values are `str` (or `bytes`,
/// read as Latin-1 as HTTP/1.1 sends them); anything else is an `InvalidArgument` naming
/// `headers`. Values are not judged here: the core ignores malformed ones.
pub(crate) struct Headers(pub Vec<(String, String)>);

impl<'a, 'py> FromPyObject<'a, 'py> for Headers {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = type_hint_union!(
        pyo3::type_hint_subscript!(type_hint_identifier!("collections.abc", "Mapping"), STR, STR),
        pyo3::type_hint_subscript!(
            type_hint_identifier!("collections.abc", "Iterable"),
            pyo3::type_hint_subscript!(type_hint_identifier!("builtins", "tuple"), STR, STR)
        )
    );

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        let bad = |what: String| invalid(py, "headers", what);
        if obj.is_instance_of::<PyString>() {
            return Err(bad("must be a mapping or an iterable of (name, value) pairs, got a str".into()));
        }
        let pairs = if obj.hasattr(pyo3::intern!(py, "items"))? {
            obj.call_method0(pyo3::intern!(py, "items"))?
        } else {
            obj.to_owned().into_any()
        };
        let iter = pairs.try_iter().map_err(|_| {
            bad(format!("must be a mapping or an iterable of (name, value) pairs, got {}", type_name(obj)))
        })?;
        let text = |item: &Bound<'py, PyAny>| -> PyResult<String> {
            if let Ok(s) = item.cast::<PyString>() {
                return Ok(s.to_string_lossy().into_owned());
            }
            if let Ok(b) = item.cast::<pyo3::types::PyBytes>() {
                return Ok(b.as_bytes().iter().map(|&c| char::from(c)).collect());
            }
            Err(bad(format!("names and values must be str or bytes, got {}", type_name(item.as_borrowed()))))
        };
        let mut headers = Vec::new();
        for pair in iter {
            let pair = pair?;
            let (name, value) = match pair.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>() {
                Ok(p) => p,
                Err(_) => {
                    return Err(bad(format!(
                        "each item must be a (name, value) pair, got {}",
                        type_name(pair.as_borrowed())
                    )))
                }
            };
            headers.push((text(&name)?, text(&value)?));
        }
        Ok(Headers(headers))
    }
}
