//! Reading JavaScript arguments. Arguments arrive as raw values so that a value of the wrong
//! type is an `ERR_INVALID_ARGUMENT` naming the parameter, like an out-of-range one; ranges and
//! units are checked by the core's converters (`ratekeeper::params`), so the rules and messages
//! are the same in every language. Parameter names are the core's (snake_case); the error
//! conversion shows them under their JavaScript names (`crate::error::js_parameter`).

use std::borrow::Cow;
use std::ptr;
use std::time::Duration;

use napi::bindgen_prelude::{
    validate_type_tag, Array, External, FromNapiRef, FromNapiValue, JsObjectValue, Object, TypeTag, Uint8ArraySlice,
    Utf16String,
};
use napi::{sys, JsValue, Unknown, ValueType};
use ratekeeper::params::{cost_from_f64, count_from_f64, duration_from_millis, status_from_f64};
use ratekeeper::Error;

use crate::runtime::CoreResult;

/// A JavaScript value with its environment.
#[derive(Clone, Copy)]
pub struct Js {
    pub env: sys::napi_env,
    pub value: sys::napi_value,
}

impl Js {
    pub fn of(value: &Unknown<'_>) -> Js {
        let v = value.value();
        Js { env: v.env, value: v.value }
    }

    /// `None` for a missing argument (napi passes `undefined` and `null` as `None`).
    pub fn opt(value: &Option<Unknown<'_>>) -> Option<Js> {
        value.as_ref().map(Js::of)
    }

    /// The value as napi's `Unknown`, for napi's own (safe) conversions.
    pub fn unknown(self) -> Unknown<'static> {
        // SAFETY: a `Js` is made only from a live value of the current call (an argument, or a
        // property or element read during it) and is not kept beyond the call.
        unsafe { Unknown::from_raw_unchecked(self.env, self.value) }
    }

    /// The value's type.
    pub fn value_type(self) -> ValueType {
        self.unknown().get_type().unwrap_or(ValueType::Unknown)
    }

    pub fn is_nullish(self) -> bool {
        matches!(self.value_type(), ValueType::Undefined | ValueType::Null)
    }

    /// A short description of the value's type, for messages.
    pub fn describe(self) -> &'static str {
        match self.value_type() {
            ValueType::Undefined => "undefined",
            ValueType::Null => "null",
            ValueType::Boolean => "a boolean",
            ValueType::Number => "a number",
            ValueType::String => "a string",
            ValueType::Symbol => "a symbol",
            ValueType::Object if self.is_array() => "an array",
            ValueType::Object => "an object",
            ValueType::Function => "a function",
            ValueType::BigInt => "a bigint",
            _ => "an external value",
        }
    }

    fn is_array(self) -> bool {
        self.unknown().is_array().unwrap_or(false)
    }

    fn wrong(self, parameter: &'static str, expected: &str) -> Error {
        Error::invalid(parameter, format!("must be {expected}, got {}", self.describe()))
    }

    /// The value as a number (BigInts are accepted and converted).
    pub fn number(self, parameter: &'static str) -> CoreResult<f64> {
        match self.value_type() {
            ValueType::Number => self.strict_number(parameter),
            ValueType::BigInt => {
                // napi's `BigInt` reads every word (and has none for 0n): one word is enough.
                let (mut v, mut lossless) = (0i64, false);
                // SAFETY: a `Js` is a live value of the current call, on its thread (see
                // `unknown`), here a BigInt; the out-pointers are locals of the written types.
                unsafe { sys::napi_get_value_bigint_int64(self.env, self.value, &mut v, &mut lossless) };
                Ok(if lossless { v as f64 } else { f64::INFINITY })
            }
            _ => Err(self.wrong(parameter, "a number")),
        }
    }

    /// The value as a number, BigInts refused (what napi's own conversion accepts).
    pub fn strict_number(self, parameter: &'static str) -> CoreResult<f64> {
        f64::from_unknown(self.unknown()).map_err(|_| self.wrong(parameter, "a number"))
    }

    pub fn boolean(self, parameter: &'static str) -> CoreResult<bool> {
        bool::from_unknown(self.unknown()).map_err(|_| self.wrong(parameter, "a boolean"))
    }

    /// The value as a string. A string that is not well-formed UTF-16 (a lone surrogate, which
    /// napi would turn into U+FFFD, so that two different keys would share state) is refused
    /// naming `parameter`.
    pub fn string(self, parameter: &'static str) -> CoreResult<String> {
        if self.value_type() != ValueType::String {
            return Err(self.wrong(parameter, "a string"));
        }
        let text = String::from_unknown(self.unknown()).map_err(|_| self.wrong(parameter, "a string"))?;
        self.well_formed(parameter, &text)?;
        Ok(text)
    }

    /// Fails, naming `parameter`, when this string holds a lone surrogate. `utf8` is the string
    /// as napi converted it: only one holding U+FFFD can come from a lone surrogate, so the
    /// UTF-16 is read (and allocated) only then.
    pub fn well_formed(self, parameter: &'static str, utf8: &str) -> CoreResult<()> {
        if !utf8.contains('\u{FFFD}') {
            return Ok(());
        }
        match self.utf16_lone_surrogate() {
            Some(lone) => Err(Error::invalid(
                parameter,
                format!("must be a well-formed Unicode string; found a lone surrogate U+{lone:04X}"),
            )),
            None => Ok(()),
        }
    }

    /// The first lone surrogate of this string, if it holds one.
    pub fn lone_surrogate(self) -> Option<u16> {
        let utf8 = String::from_unknown(self.unknown()).ok()?;
        if utf8.contains('\u{FFFD}') {
            self.utf16_lone_surrogate()
        } else {
            None
        }
    }

    fn utf16_lone_surrogate(self) -> Option<u16> {
        let units = Utf16String::from_unknown(self.unknown()).ok()?;
        char::decode_utf16(units.iter().copied()).find_map(|c| c.err()).map(|e| e.unpaired_surrogate())
    }

    /// Bytes from a string or a Buffer / Uint8Array (PEM material).
    pub fn bytes(self, parameter: &'static str) -> CoreResult<Vec<u8>> {
        if self.value_type() == ValueType::String {
            return Ok(self.string(parameter)?.into_bytes());
        }
        match Uint8ArraySlice::from_unknown(self.unknown()) {
            Ok(bytes) => Ok(bytes.to_vec()),
            Err(_) => Err(self.wrong(parameter, "a string or a Buffer")),
        }
    }

    /// The value as an object (arrays included), or an error naming `parameter`.
    pub fn object(self, parameter: &'static str) -> CoreResult<Js> {
        match self.value_type() {
            ValueType::Object => Ok(self),
            _ => Err(self.wrong(parameter, "an object")),
        }
    }

    /// The value as a function, or an error naming `parameter`.
    pub fn function(self, parameter: &'static str) -> CoreResult<Js> {
        match self.value_type() {
            ValueType::Function => Ok(self),
            _ => Err(self.wrong(parameter, "a function")),
        }
    }

    /// The elements of an array.
    pub fn array(self, parameter: &'static str) -> CoreResult<Vec<Js>> {
        if !self.is_array() {
            return Err(self.wrong(parameter, "an array"));
        }
        let array = Array::from_unknown(self.unknown()).map_err(|_| self.wrong(parameter, "an array"))?;
        (0..array.len())
            .map(|i| match array.get::<Unknown<'_>>(i) {
                Ok(Some(value)) => Ok(Js::of(&value)),
                _ => Err(self.wrong(parameter, "an array")),
            })
            .collect()
    }

    /// A property, `None` when it is `undefined` or `null`.
    pub fn get(self, name: &std::ffi::CStr) -> Option<Js> {
        self.property(name.to_str().ok()?)
    }

    /// The property named by the camelCase form of the Rust name `field`, `None` when it is
    /// `undefined` or `null` (or `self` is not an object).
    pub fn property(self, field: &str) -> Option<Js> {
        let object = Object::from_raw(self.env, self.value);
        let value: Unknown<'_> = object.get_named_property_unchecked(&camel(field)).ok()?;
        let v = Js::of(&value);
        (!v.is_nullish()).then_some(v)
    }

    /// The value as an instance of the `#[napi]` class `T`, checked by the class's type tag.
    /// Borrowed only for the current call (to clone what it holds): napi-rs's generated
    /// `FromNapiRef` would refuse, as it only lends instances during argument conversion.
    pub fn instance<T: TypeTag + 'static>(self, parameter: &'static str, class: &str) -> CoreResult<&'static T> {
        let wrong = || Error::invalid(parameter, format!("must be a {class}, got {}", self.describe()));
        if self.value_type() != ValueType::Object {
            return Err(wrong());
        }
        // SAFETY: the tag check guarantees the wrapped pointer is a `T` boxed by napi-rs, alive
        // as long as the object, which the caller's arguments keep alive during this call.
        unsafe {
            validate_type_tag(self.env, self.value, &T::type_tag(), class).map_err(|_| wrong())?;
            let mut data = ptr::null_mut();
            let status = sys::napi_unwrap(self.env, self.value, &mut data);
            if status != sys::Status::napi_ok || data.is_null() {
                return Err(wrong());
            }
            Ok(&*(data as *const T))
        }
    }

    /// The value as a napi `External<T>` made by this addon.
    pub fn external<T: 'static>(self, parameter: &'static str) -> CoreResult<&'static External<T>> {
        // SAFETY: `from_napi_ref` checks that the value is an `External<T>` of this addon.
        unsafe { External::<T>::from_napi_ref(self.env, self.value) }
            .map_err(|_| Error::invalid(parameter, format!("is not a valid value, got {}", self.describe())))
    }
}

/// Runs `f` with an optional key read without allocating (the hot path of in-process checks):
/// a string, or `undefined`/`null` for the limiter's single shared key.
#[inline]
pub fn with_key<T>(value: &Option<Unknown<'_>>, f: impl FnOnce(Option<&str>) -> CoreResult<T>) -> CoreResult<T> {
    match Js::opt(value) {
        None => f(None),
        Some(v) => with_key_arg(v, f),
    }
}

/// [`with_key`] for an argument passed as is (`undefined` when left out). The string is read
/// first, into a buffer on the stack; the value's type is asked for only when it is not a
/// string, so a string key costs one N-API call.
#[inline]
pub fn with_key_arg<T>(v: Js, f: impl FnOnce(Option<&str>) -> CoreResult<T>) -> CoreResult<T> {
    const CAPACITY: usize = 2048;
    let mut buffer = [std::mem::MaybeUninit::<u8>::uninit(); CAPACITY];
    let mut written = 0usize;
    // SAFETY: `v` is a live value of the current call; N-API writes at most CAPACITY bytes
    // (the text and a NUL) into `buffer`, which has CAPACITY, and the count to `written`.
    let status =
        unsafe { sys::napi_get_value_string_utf8(v.env, v.value, buffer.as_mut_ptr().cast(), CAPACITY, &mut written) };
    if status != sys::Status::napi_ok {
        // Not a string: absent, or of the wrong type.
        return if v.is_nullish() { f(None) } else { Err(v.wrong("key", "a string")) };
    }
    if written >= CAPACITY - 4 {
        // Maybe cut short: keys this long are refused by the core, with the whole key's length.
        let key = v.string("key")?;
        return f(Some(&key));
    }
    // SAFETY: napi wrote `written` bytes (and a terminating zero after them).
    let bytes = unsafe { std::slice::from_raw_parts(buffer.as_ptr().cast::<u8>(), written) };
    match std::str::from_utf8(bytes) {
        Ok(key) => {
            v.well_formed("key", key)?;
            f(Some(key))
        }
        Err(_) => {
            let key = v.string("key")?;
            f(Some(&key))
        }
    }
}

/// An optional key: a string, or `undefined`/`null` for the limiter's single shared key.
#[inline]
pub fn key(value: &Option<Unknown<'_>>) -> CoreResult<Option<String>> {
    match Js::opt(value) {
        None => Ok(None),
        Some(v) => v.string("key").map(Some),
    }
}

/// An optional cost (default `default`): a whole number in 0..=2^53.
#[inline]
pub fn cost(value: Option<Js>, parameter: &'static str, default: u64) -> CoreResult<u64> {
    match value {
        None => Ok(default),
        Some(v) => cost_from_f64(parameter, v.number(parameter)?),
    }
}

/// [`cost`] for an argument passed as is (`undefined` when left out): the number is read first;
/// the value's type is asked for only when it is not a number.
#[inline]
pub fn cost_arg(v: Js, parameter: &'static str, default: u64) -> CoreResult<u64> {
    let mut number = 0f64;
    // SAFETY: `v` is a live value of the current call; `number` is a local f64.
    if unsafe { sys::napi_get_value_double(v.env, v.value, &mut number) } == sys::Status::napi_ok {
        return cost_from_f64(parameter, number);
    }
    if v.is_nullish() {
        return Ok(default);
    }
    cost(Some(v), parameter, default)
}

/// An argument passed as is, as napi's `Option` reads it: `None` for `undefined` and `null`.
pub fn present(value: Unknown<'_>) -> Option<Unknown<'_>> {
    (!Js::of(&value).is_nullish()).then_some(value)
}

/// A limit, capacity or size: a whole number in 1..=2^53.
pub fn count(value: Option<Js>, parameter: &'static str) -> CoreResult<u64> {
    count_from_f64(parameter, required(value, parameter)?.number(parameter)?)
}

/// A duration given where no name shows its unit (a positional argument, a tuple's element): a
/// string with its unit (`'60s'`, `'500ms'`, `'1m'`, `'minute'`), parsed by the core. A bare
/// number is refused: `window('b', 5, 60)` meant 60 ms here and 60 s in Python, Ruby, C and
/// specs. Numbers are milliseconds only in options whose names end in `Ms`.
pub fn duration_text(value: Option<Js>, parameter: &'static str) -> CoreResult<Duration> {
    let v = required(value, parameter)?;
    match v.value_type() {
        ValueType::String => ratekeeper::parse_duration(parameter, &v.string(parameter)?),
        ValueType::Number | ValueType::BigInt => Err(bare_number(parameter, v.number(parameter)?)),
        _ => Err(v.wrong(parameter, "a string with a unit, e.g. '60s', '500ms' or '1m'")),
    }
}

/// [`duration_text`], or nothing when the value is absent.
pub fn opt_duration_text(value: Option<Js>, parameter: &'static str) -> CoreResult<Option<Duration>> {
    value.map(|v| duration_text(Some(v), parameter)).transpose()
}

/// A timeout given positionally: [`duration_text`], or zero ("do not wait") written as `0`,
/// which means the same in every unit.
pub fn timeout_text(value: Option<Js>, parameter: &'static str) -> CoreResult<Duration> {
    let v = required(value, parameter)?;
    if matches!(v.value_type(), ValueType::Number) && v.number(parameter)? == 0.0 {
        return Ok(Duration::ZERO);
    }
    if v.value_type() == ValueType::String {
        let text = v.string(parameter)?;
        let digits = text.trim().trim_end_matches(|c: char| c.is_ascii_alphabetic()).trim();
        if !digits.is_empty() && digits.parse::<f64>() == Ok(0.0) {
            return Ok(Duration::ZERO);
        }
        return ratekeeper::parse_duration(parameter, &text);
    }
    duration_text(Some(v), parameter)
}

fn bare_number(parameter: &'static str, value: f64) -> Error {
    Error::invalid(
        parameter,
        format!(
            "must be a string with its unit ('60s', '500ms', '1m' or 'minute'), got the bare number {value}: \
             a number here once meant milliseconds, while the same call means seconds in Python, Ruby, \
             C and specs (write '{value}ms' for the old meaning)"
        ),
    )
}

/// An optional duration in milliseconds.
pub fn opt_millis(value: Option<Js>, parameter: &'static str) -> CoreResult<Option<Duration>> {
    value.map(|v| duration_from_millis(parameter, v.number(parameter)?)).transpose()
}

/// A required argument.
pub fn required(value: Option<Js>, parameter: &'static str) -> CoreResult<Js> {
    value.ok_or_else(|| Error::invalid(parameter, "is required"))
}

/// The JavaScript (camelCase) spelling of a Rust (snake_case) name, as napi-derive spells
/// fields: `wait_timeout_ms` is `waitTimeoutMs`.
pub fn camel(snake: &str) -> Cow<'_, str> {
    if !snake.contains('_') {
        return Cow::Borrowed(snake);
    }
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// An HTTP status code (a whole number from 100 to 999).
pub fn status(value: Option<Js>) -> CoreResult<u16> {
    status_from_f64("status", required(value, "status")?.number("status")?)
}

/// Response headers as `[name, value]` pairs (index.js turns objects, `Headers`, `Map`s and
/// `Response`s into these); a pair that is not two strings is an error naming `headers`.
pub fn header_pairs(value: Option<Js>) -> CoreResult<Vec<(String, String)>> {
    let pairs = required(value, "headers")?.array("headers")?;
    pairs
        .into_iter()
        .map(|pair| match pair.array("headers")?.as_slice() {
            [name, value] => Ok((name.string("headers")?, value.string("headers")?)),
            _ => Err(pair.wrong("headers", "a [name, value] pair")),
        })
        .collect()
}
