//! Options objects. Each is a `#[napi(object)]` struct: napi-derive writes its TypeScript
//! declaration (native.d.ts) and its conversion (`FromNapiValue`) from the same struct, so the
//! typings and the parsing cannot disagree.
//!
//! What napi's conversion does not do is done here once, for every options struct, by [`read`]:
//! - it ignores unknown properties, and a misspelt option (`waitTimeoutt`) that silently falls
//!   back to its default is a bug its caller never sees: [`read`] refuses any key that is not a
//!   field, naming it (nested options objects included, by their path: `tls.caa`);
//! - it takes `null` for a value of the field's type: here `null`, like `undefined`, is absent;
//! - it turns a lone surrogate into U+FFFD, so two different strings would mean the same: here
//!   such a string is refused;
//! - its errors name Rust types and are not `ERR_INVALID_ARGUMENT`: here they become the core's
//!   invalid-argument error naming the option (`tls.ca`), `must be a number, got a string`.
//!
//! The field types that napi does not know (PEM material, a `ManualClock`, the failure policy)
//! implement `FromNapiValue` below with the same rules and messages.

use std::sync::Arc;

use napi::bindgen_prelude::{FromNapiValue, JsObjectValue, KeyCollectionMode, KeyConversion, KeyFilter, Object};
use napi::{sys, Env, JsValue, Status, Unknown, ValueType};
use ratekeeper::{Error, FailurePolicy};

use crate::args::{camel, Js};
use crate::clock::ManualClock;
use crate::runtime::CoreResult;

/// One key an options object may hold: a field's Rust name (its JavaScript name is this
/// camelCased, as napi-derive writes it) and, for a field holding options of its own, their keys.
pub struct Key {
    pub name: &'static str,
    pub nested: Option<&'static [Key]>,
    /// Whether the field holds only an options object (`tls`), or also values of another type
    /// that its own conversion reads (`failurePolicy: 'fail_open'`).
    pub object_only: bool,
}

/// A `#[napi(object)]` options struct and the keys it may hold (declared with [`options!`]).
pub trait Options: FromNapiValue {
    const KEYS: &'static [Key];
}

/// Declares the keys of a `#[napi(object)]` options struct: `options!(MemoryOptions { max_keys,
/// shards, clock })`, a field holding nested options with their type (`tls: TlsOptions`), or
/// with the other type it may hold (`failure_policy: FallbackPolicy | String`). The
/// list is checked against the struct by an exhaustive pattern: a field left out or one that
/// does not exist does not build, so the keys cannot drift from the declaration.
///
/// The struct itself is written outside the macro: passed through `macro_rules!`, its `///`
/// docs would reach napi-derive as raw strings (`r"…"`), which it writes verbatim into
/// native.d.ts.
macro_rules! options {
    ($name:ident { $($field:ident $(: $nested:ty $(| $other:ty)?)?),* $(,)? }) => {
        impl $crate::options::Options for $name {
            const KEYS: &'static [$crate::options::Key] = &[$($crate::options::Key {
                name: stringify!($field),
                nested: $crate::options::nested_keys!($($nested)?),
                object_only: $crate::options::object_only!($($($other)?)?),
            }),*];
        }
        const _: fn($name) = |value| {
            let $name { $($field: _),* } = value;
        };
    };
}
pub(crate) use options;

/// The keys of a nested options field, if it has a type.
macro_rules! nested_keys {
    () => {
        None
    };
    ($nested:ty) => {
        Some(<$nested as $crate::options::Options>::KEYS)
    };
}
pub(crate) use nested_keys;

/// Whether a field declared without another type it may hold holds an object only.
macro_rules! object_only {
    () => {
        true
    };
    ($other:ty) => {
        false
    };
}
pub(crate) use object_only;

/// An optional options object (`undefined` or `null`: none).
pub fn optional<T: Options>(value: &Option<Unknown<'_>>) -> CoreResult<Option<T>> {
    Js::opt(value).map(|v| read(v, "options")).transpose()
}

/// Reads an options object: an object whose own keys are all fields of `T`, converted by napi.
/// `name` is the parameter's Rust name: `options`, or an argument holding options (`windows`),
/// whose fields are then named by their path (`windows.limit`).
pub fn read<T: Options>(value: Js, name: &'static str) -> CoreResult<T> {
    let prefix = if name == "options" { String::new() } else { camel(name).into_owned() };
    let object = value.object(name)?;
    let plain = if check(object, T::KEYS, &prefix)? { without_nulls(object, T::KEYS)? } else { object };
    T::from_unknown(plain.unknown()).map_err(|e| field_error(e, plain, &prefix))
}

/// Checks the own keys of `object` (and of the nested options objects it holds) against `keys`,
/// and its strings for lone surrogates; true when a key holds `null`, which napi would not read
/// as absent.
fn check(object: Js, keys: &[Key], prefix: &str) -> CoreResult<bool> {
    let mut nulls = false;
    for (name, value) in own_properties(object, prefix)? {
        let path = join(prefix, &name);
        let Some(key) = keys.iter().find(|k| camel(k.name) == name.as_str()) else {
            let known: Vec<_> = keys.iter().map(|k| camel(k.name)).collect();
            return Err(Error::invalid_field(path, format!("is not an option; the options are {}", known.join(", "))));
        };
        let kind = value.value_type();
        if key.object_only
            && key.nested.is_some()
            && !matches!(kind, ValueType::Object | ValueType::Null | ValueType::Undefined)
        {
            return Err(Error::invalid_field(path, format!("must be an object, got {}", value.describe())));
        }
        match kind {
            ValueType::Null => nulls = true,
            ValueType::String => {
                if let Some(lone) = value.lone_surrogate() {
                    return Err(Error::invalid_field(
                        path,
                        format!("must be a well-formed Unicode string; found a lone surrogate U+{lone:04X}"),
                    ));
                }
            }
            ValueType::Object => {
                if let Some(nested) = key.nested {
                    nulls |= check(value, nested, &path)?;
                }
            }
            _ => {}
        }
    }
    Ok(nulls)
}

/// A copy of `object` without its `null` properties (nested options objects copied the same).
fn without_nulls(object: Js, keys: &[Key]) -> CoreResult<Js> {
    let env = Env::from_raw(object.env);
    let copied = |_| Error::invalid("options", "could not be copied");
    let mut copy = Object::new(&env).map_err(copied)?;
    for (name, value) in own_properties(object, "")? {
        let nested = keys.iter().find(|k| camel(k.name) == name.as_str()).and_then(|k| k.nested);
        let value = match value.value_type() {
            ValueType::Null => continue,
            ValueType::Object if nested.is_some() => without_nulls(value, nested.unwrap_or_default())?,
            _ => value,
        };
        copy.set_named_property(&name, value.value).map_err(copied)?;
    }
    let raw = copy.value();
    Ok(Js { env: raw.env, value: raw.value })
}

/// The own enumerable string-keyed properties of `object` (what an object literal holds).
fn own_properties(object: Js, prefix: &str) -> CoreResult<Vec<(String, Js)>> {
    let refused = || Error::invalid_field(if prefix.is_empty() { "options" } else { prefix }, "must be a plain object");
    let object = Object::from_raw(object.env, object.value);
    let names = object
        .get_all_property_names(KeyCollectionMode::OwnOnly, KeyFilter::Enumerable, KeyConversion::NumbersToStrings)
        .map_err(|_| refused())?;
    let mut properties = Vec::new();
    for i in 0..names.get_array_length().map_err(|_| refused())? {
        let name: Unknown<'_> = names.get_element(i).map_err(|_| refused())?;
        if name.get_type().map_err(|_| refused())? != napi::ValueType::String {
            continue; // a symbol: not an option name
        }
        let name = String::from_unknown(name).map_err(|_| refused())?;
        let value: Unknown<'_> = object.get_named_property(&name).map_err(|_| refused())?;
        properties.push((name, Js::of(&value)));
    }
    Ok(properties)
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// The error of a field type defined here: its message, and the path of the value it refused
/// below the field (`fallback` inside `failurePolicy`), marked so that [`field_error`] tells it
/// from napi's own.
pub fn marked(error: Error, below: &str) -> napi::Error {
    let message = match error {
        Error::InvalidArgument { message, .. } => message,
        other => other.to_string(),
    };
    napi::Error::new(Status::InvalidArg, format!("{MARK}{below}{MARK}{message}{MARK}"))
}

const MARK: char = '\u{1}';

/// The core's invalid-argument error for a failed conversion of `object`'s fields. napi
/// appends ` on Struct.field` to an error for each struct it passes through (innermost first),
/// which gives the field's path; the message is the field type's own (see [`marked`]), or says
/// what napi expected and what the value is.
fn field_error(error: napi::Error, object: Js, prefix: &str) -> Error {
    let mut reason = error.reason.as_str();
    let mut path = Vec::new();
    while let Some((rest, field)) = reason.rsplit_once(" on ").and_then(|(rest, at)| Some((rest, decorated(at)?))) {
        path.push(field);
        reason = rest;
    }
    let message = if let Some(marked) = reason.strip_prefix(MARK).and_then(|r| r.strip_suffix(MARK)) {
        let (below, message) = marked.split_once(MARK).unwrap_or(("", marked));
        path.extend(below.split('.').filter(|p| !p.is_empty()));
        message.to_string()
    } else if let Some(field) = reason.strip_prefix("Missing field `").and_then(|r| r.strip_suffix('`')) {
        path.push(field);
        "is required".to_string()
    } else {
        let got = path.iter().try_fold(object, |o, field| o.property(field)).map(Js::describe).unwrap_or("undefined");
        let expected = match error.status {
            Status::NumberExpected => "a number",
            Status::StringExpected => "a string",
            Status::BooleanExpected => "a boolean",
            Status::ObjectExpected => "an object",
            Status::FunctionExpected => "a function",
            Status::ArrayExpected => "an array",
            // napi's `String` conversion quotes a refused object with `JSON.stringify`, which
            // throws for a cyclic one, and then fails with that error instead of its status;
            // a string is the only type read by napi here that is not an object.
            _ if matches!(got, "an object" | "an array") => "a string",
            _ => "a valid value",
        };
        format!("must be {expected}, got {got}")
    };
    let path = path.iter().fold(prefix.to_string(), |p, field| join(&p, field));
    Error::invalid_field(if path.is_empty() { "options".to_string() } else { path }, message)
}

/// The field of napi's ` on Struct.field` decoration.
fn decorated(at: &str) -> Option<&str> {
    let (structure, field) = at.split_once('.')?;
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    (ident(structure) && ident(field)).then_some(field)
}

/// PEM material: a string, a Buffer or a Uint8Array.
pub struct Pem(pub Vec<u8>);

impl FromNapiValue for Pem {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi::Result<Self> {
        Js { env, value }.bytes("pem").map(Pem).map_err(|e| marked(e, ""))
    }
}

/// A `ManualClock` made by this addon (checked by its type tag).
pub struct ClockOption(pub Arc<ratekeeper::ManualClock>);

impl FromNapiValue for ClockOption {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi::Result<Self> {
        let clock = Js { env, value }.instance::<ManualClock>("clock", "ManualClock").map_err(|e| marked(e, ""))?;
        Ok(ClockOption(clock.inner.clone()))
    }
}

/// A property that index.js handles (an `AbortSignal`): declared for the typings and accepted
/// as it is, so that it is not refused as unknown.
pub struct Handled;

impl FromNapiValue for Handled {
    unsafe fn from_napi_value(_: sys::napi_env, _: sys::napi_value) -> napi::Result<Self> {
        Ok(Handled)
    }
}

/// The `failurePolicy` option: `'fail_closed'`, `'fail_open'` or `{ fallback: n }`.
pub struct Policy(pub FailurePolicy);

/// The `{ fallback: n }` form of `failurePolicy`.
#[napi_derive::napi(object, object_to_js = false)]
pub struct FallbackPolicy {
    /// The in-process limiter takes over with 1/`fallback` of the limit.
    pub fallback: f64,
}
options!(FallbackPolicy { fallback });

impl FromNapiValue for Policy {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi::Result<Self> {
        let js = Js { env, value };
        match js.value_type() {
            ValueType::String => {
                let text = js.string("failure_policy").map_err(|e| marked(e, ""))?;
                match text.as_str() {
                    "fail_closed" => Ok(Policy(FailurePolicy::FailClosed)),
                    "fail_open" => Ok(Policy(FailurePolicy::FailOpen)),
                    other => Err(marked(
                        Error::invalid(
                            "failure_policy",
                            format!("must be 'fail_closed', 'fail_open' or {{ fallback: n }}, got {other:?}"),
                        ),
                        "",
                    )),
                }
            }
            ValueType::Object => {
                let FallbackPolicy { fallback } = FallbackPolicy::from_unknown(js.unknown())?;
                // The core checks the divisor (at least 1); this only makes it a whole u32.
                if fallback.is_finite() && fallback.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(&fallback) {
                    Ok(Policy(FailurePolicy::Fallback { divisor: fallback as u32 }))
                } else {
                    Err(marked(
                        Error::invalid("fallback", format!("must be a whole number of at least 1, got {fallback}")),
                        "fallback",
                    ))
                }
            }
            _ => Err(marked(Error::invalid("failure_policy", format!("must be an object, got {}", js.describe())), "")),
        }
    }
}
