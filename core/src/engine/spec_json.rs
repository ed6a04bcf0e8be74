//! Limiter specs as data: the language-neutral JSON form every binding, the registry and the
//! CLI share. Durations are seconds (fractions allowed); field names are snake_case.
//!
//! ```json
//! {"kind":"token_bucket","rate":10,"capacity":20}
//! {"kind":"leased","rate":1000,"capacity":2000,"chunk":100,"lease_ttl":1}
//! {"kind":"windows","windows":[[25,5],[300,60]]}
//! {"kind":"sliding_window","limits":[[60,100,1],[1,10,0.1]]}
//! {"kind":"concurrent","limit":10,"lock_timeout":30,"wait_timeout":5}
//! {"kind":"calendar","limit":1000,"period":"month","tz":"Europe/Berlin","anchor":15}
//! {"kind":"partitions","total_rate":100,"partitions":20,"lease_ttl":15,"reserved":0,"priority":false}
//! ```
//!
//! The canonical form — what [`LimiterConfig::to_json`] writes and what every language reads
//! back — has its keys in a fixed order, every field of the kind filled in (defaults included),
//! whole numbers written without a fraction, `wait_timeout` only when it is not the default and
//! `block_for` only when it is set, `shadow` only when true (so a spec without them keeps its form
//! and its fingerprint).
//! Parsing is strict: an unknown kind or field, a wrong type or a bad value is an
//! [`Error::InvalidArgument`] naming the field by its path (`rate`, `windows[1]`), and nothing is
//! built.

use std::time::Duration;

use serde_json::{Map, Number, Value};

use super::colocate::Colocate;
use super::kinds::{self, LimiterSpec};
use super::spec::{SlidingLimit, WindowLimit};
use crate::defaults::DEFAULT_WAIT_TIMEOUT;
use crate::error::{Error, Result};
use crate::params::{duration_from_secs, timeout_from_secs};

/// A limiter spec with the per-limiter options the JSON form carries.
#[derive(Debug, Clone, PartialEq)]
pub struct LimiterConfig {
    /// What the limiter does.
    pub spec: LimiterSpec,
    /// How long `acquire` waits by default; `None` for [`DEFAULT_WAIT_TIMEOUT`].
    pub wait_timeout: Option<Duration>,
    /// How long a key stays refused after a refusal (see [`crate::Limiter::with_block_for`]);
    /// `None`: a refusal blocks nothing.
    pub block_for: Option<Duration>,
    /// Where the limiter's Redis keys take their hash tag from (see [`Colocate`]); `None` for
    /// [`Colocate::Identity`]. The JSON form writes it only when it is not the default.
    pub colocate: Option<Colocate>,
    /// Shadow mode: every decision is computed and counted as usual, but a would-be refusal is
    /// admitted (`allowed` true, `shadow_refused` true) and consumes nothing. See
    /// `docs/src/concepts/shadow.md`.
    pub shadow: bool,
}

impl From<LimiterSpec> for LimiterConfig {
    /// A spec with the default options: the default wait timeout, no block, enforcing.
    fn from(spec: LimiterSpec) -> LimiterConfig {
        LimiterConfig { spec, wait_timeout: None, block_for: None, colocate: None, shadow: false }
    }
}

impl LimiterConfig {
    /// The spec in plain words, as the CLI's `limits` and the Limits page show it ("5 per
    /// second, bursts of 10"), followed by ", in shadow mode" when it is: each kind words its
    /// own fields in its engine's file.
    pub fn words(&self) -> String {
        let words = self.spec.words();
        if self.shadow {
            format!("{words}, in shadow mode")
        } else {
            words
        }
    }

    /// Parses a JSON spec, validating every field (see the module documentation).
    pub fn from_json(json: &str) -> Result<LimiterConfig> {
        let value: Value =
            serde_json::from_str(json).map_err(|e| Error::invalid("spec", format!("is not valid JSON: {e}")))?;
        LimiterConfig::from_value(&value)
    }

    /// Reads a spec from a parsed JSON value (what bindings build from dicts and objects).
    pub fn from_value(value: &Value) -> Result<LimiterConfig> {
        let object = value.as_object().ok_or_else(|| {
            Error::invalid("spec", format!("must be a JSON object with a \"kind\", got {}", type_name(value)))
        })?;
        let mut fields = JsonFields { object, used: vec!["kind"] };
        let kind = fields.string("kind")?;
        let spec = kinds::parse_json(kind, &mut fields).unwrap_or_else(|| {
            Err(Error::invalid_field("kind", format!("must be one of {}; got {kind:?}", kinds::JSON_NAMES.join(", "))))
        })?;
        let wait_timeout = fields.optional_timeout("wait_timeout")?;
        let block_for = fields.optional_seconds("block_for")?;
        let colocate = fields.optional_string("colocate")?.map(Colocate::from_name).transpose()?;
        let shadow = fields.optional_bool("shadow")?.unwrap_or(false);
        fields.reject_unknown(kind)?;
        let config = LimiterConfig { spec, wait_timeout, block_for, colocate, shadow };
        config.validate()?;
        Ok(config)
    }

    /// Checks every value the way the limiter's constructor does, naming fields by their path.
    fn validate(&self) -> Result<()> {
        kinds::check_parts(&self.spec)?;
        self.spec.compile().map_err(|e| {
            let path = e.parameter().unwrap_or("spec").to_owned();
            Error::invalid_field(path, message_of(e))
        })?;
        Ok(())
    }

    /// The canonical JSON form (see the module documentation).
    pub fn to_json(&self) -> String {
        let mut json = JsonWriter(Vec::with_capacity(6));
        kinds::print_json(&self.spec, &mut json);
        if let Some(wait) = self.wait_timeout.filter(|w| *w != DEFAULT_WAIT_TIMEOUT) {
            json.put("wait_timeout", secs(wait));
        }
        if let Some(block_for) = self.block_for {
            json.put("block_for", secs(block_for));
        }
        if let Some(colocate) = self.colocate.filter(|c| *c != Colocate::Identity) {
            json.put("colocate", colocate.as_str().into());
        }
        if self.shadow {
            json.put("shadow", Value::Bool(true));
        }
        let fields: Vec<String> = json.0.iter().map(|(key, value)| format!("{}:{value}", Value::from(*key))).collect();
        format!("{{{}}}", fields.join(","))
    }
}

impl LimiterSpec {
    /// Parses a JSON spec (see [`LimiterConfig`]); a `wait_timeout`, `block_for` or `shadow` in
    /// it is refused here, since a bare spec has nowhere to keep it.
    pub fn from_json(json: &str) -> Result<LimiterSpec> {
        let config = LimiterConfig::from_json(json)?;
        let options = [
            ("wait_timeout", config.wait_timeout.is_some()),
            ("block_for", config.block_for.is_some()),
            ("colocate", config.colocate.is_some()),
            ("shadow", config.shadow),
        ];
        if let Some((option, _)) = options.into_iter().find(|(_, set)| *set) {
            return Err(Error::invalid_field(
                option,
                "is a limiter option: read this spec with LimiterConfig::from_json or Backend::limiter_from_json",
            ));
        }
        Ok(config.spec)
    }

    /// The canonical JSON form of this spec.
    pub fn to_json(&self) -> String {
        LimiterConfig { spec: self.clone(), wait_timeout: None, block_for: None, colocate: None, shadow: false }
            .to_json()
    }
}

/// The canonical JSON form being written: keys in the order they are put (serde_json's map
/// would sort them).
pub(crate) struct JsonWriter(Vec<(&'static str, Value)>);

impl JsonWriter {
    /// Appends `key`.
    pub(crate) fn put(&mut self, key: &'static str, value: Value) {
        self.0.push((key, value));
    }
}

/// The fields of one spec object, remembering which were read so that the rest are refused.
/// Each reader names the field in its error.
pub(crate) struct JsonFields<'a> {
    object: &'a Map<String, Value>,
    used: Vec<&'static str>,
}

impl<'a> JsonFields<'a> {
    fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.used.push(key);
        self.object.get(key).filter(|v| !v.is_null())
    }

    fn required(&mut self, key: &'static str) -> Result<&'a Value> {
        self.get(key).ok_or_else(|| match self.misspelling_of(key) {
            // `"capacty"` for `capacity`: the field the user wrote is the one to name.
            Some(written) => Error::invalid_field(
                written.to_owned(),
                format!("is not a field of this spec; did you mean {key:?}? ({key:?} is required)"),
            ),
            None => Error::invalid_field(key, "is required"),
        })
    }

    /// A field of the object that is not a known one and is close to `key` (a typo of it).
    fn misspelling_of(&self, key: &str) -> Option<&'a str> {
        self.object
            .keys()
            .filter(|k| !self.used.contains(&k.as_str()) && !is_known_field(k))
            .find(|k| close(k, key))
            .map(String::as_str)
    }

    pub(crate) fn string(&mut self, key: &'static str) -> Result<&'a str> {
        let value = self.required(key)?;
        value.as_str().ok_or_else(|| Error::invalid_field(key, format!("must be a string, got {}", type_name(value))))
    }

    pub(crate) fn optional_string(&mut self, key: &'static str) -> Result<Option<&'a str>> {
        match self.get(key) {
            None => Ok(None),
            Some(value) => value
                .as_str()
                .map(Some)
                .ok_or_else(|| Error::invalid_field(key, format!("must be a string, got {}", type_name(value)))),
        }
    }

    pub(crate) fn number(&mut self, key: &'static str) -> Result<f64> {
        as_number(self.required(key)?, key)
    }

    pub(crate) fn count(&mut self, key: &'static str) -> Result<u64> {
        as_count(self.required(key)?, key)
    }

    pub(crate) fn optional_count(&mut self, key: &'static str) -> Result<Option<u64>> {
        self.get(key).map(|v| as_count(v, key)).transpose()
    }

    pub(crate) fn seconds(&mut self, key: &'static str) -> Result<Duration> {
        as_seconds(self.required(key)?, key)
    }

    /// A whole number in 0..=2^53, or nothing.
    pub(crate) fn optional_whole(&mut self, key: &'static str) -> Result<Option<u64>> {
        self.get(key)
            .map(|v| {
                crate::params::cost_from_f64("count", as_number(v, key)?)
                    .map_err(|e| Error::invalid_field(key, message_of(e)))
            })
            .transpose()
    }

    pub(crate) fn optional_bool(&mut self, key: &'static str) -> Result<Option<bool>> {
        self.get(key)
            .map(|v| {
                v.as_bool()
                    .ok_or_else(|| Error::invalid_field(key, format!("must be true or false, got {}", type_name(v))))
            })
            .transpose()
    }

    pub(crate) fn optional_seconds(&mut self, key: &'static str) -> Result<Option<Duration>> {
        self.get(key).map(|v| as_seconds(v, key)).transpose()
    }

    /// A timeout in seconds, where 0 (never wait) is allowed.
    fn optional_timeout(&mut self, key: &'static str) -> Result<Option<Duration>> {
        match self.get(key) {
            None => Ok(None),
            Some(value) => timeout_from_secs("timeout", as_number(value, key)?)
                .map(Some)
                .map_err(|e| Error::invalid_field(key, message_of(e))),
        }
    }

    pub(crate) fn optional_anchor(&mut self) -> Result<Option<u8>> {
        match self.get("anchor") {
            None => Ok(None),
            Some(value) => {
                let day = value.as_u64().ok_or_else(|| {
                    Error::invalid_field("anchor", format!("must be a day of the month, 1 to 31, got {value}"))
                })?;
                u8::try_from(day).map(Some).map_err(|_| {
                    Error::invalid_field("anchor", format!("must be a day of the month, 1 to 31, got {day}"))
                })
            }
        }
    }

    /// `windows`: `[[limit, interval], ...]`.
    pub(crate) fn windows(&mut self) -> Result<Vec<WindowLimit>> {
        let items = as_list(self.required("windows")?, "windows")?;
        let mut windows = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let path = format!("windows[{i}]");
            match item.as_array().map(Vec::as_slice) {
                Some([limit, interval]) => windows.push(WindowLimit {
                    limit: as_count(limit, &format!("{path}[0]"))?,
                    interval: as_seconds(interval, &format!("{path}[1]"))?,
                }),
                _ => return Err(Error::invalid_field(path, format!("must be [limit, interval_seconds], got {item}"))),
            }
        }
        Ok(windows)
    }

    /// `limits`: `[[duration, limit, precision?], ...]`.
    pub(crate) fn sliding_limits(&mut self) -> Result<Vec<SlidingLimit>> {
        let items = as_list(self.required("limits")?, "limits")?;
        let mut limits = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let path = format!("limits[{i}]");
            let (duration, limit, precision) = match item.as_array().map(Vec::as_slice) {
                Some([duration, limit]) => (duration, limit, None),
                Some([duration, limit, precision]) => (duration, limit, Some(precision).filter(|p| !p.is_null())),
                _ => {
                    return Err(Error::invalid_field(
                        path,
                        format!(
                        "must be [duration_seconds, limit] or [duration_seconds, limit, precision_seconds], got {item}"
                    ),
                    ))
                }
            };
            limits.push(SlidingLimit {
                duration: as_seconds(duration, &format!("{path}[0]"))?,
                limit: as_count(limit, &format!("{path}[1]"))?,
                precision: precision.map(|p| as_seconds(p, &format!("{path}[2]"))).transpose()?,
            });
        }
        Ok(limits)
    }

    fn reject_unknown(&self, kind: &str) -> Result<()> {
        match self.object.keys().find(|k| !self.used.contains(&k.as_str())) {
            Some(unknown) => {
                let fields = &self.used[1..];
                let hint = fields
                    .iter()
                    .filter(|f| close(unknown, f))
                    .min_by_key(|f| strsim::damerau_levenshtein(unknown, f))
                    .map(|f| format!("; did you mean {f:?}?"))
                    .unwrap_or_default();
                Err(Error::invalid_field(
                    unknown.clone(),
                    format!("is not a field of a {kind} spec{hint} (fields: {})", fields.join(", ")),
                ))
            }
            None => Ok(()),
        }
    }
}

/// Whether `written` is close enough to `field` to be a typo of it: at most two edits (one for
/// short names), ignoring case.
fn close(written: &str, field: &str) -> bool {
    let distance = strsim::damerau_levenshtein(&written.to_ascii_lowercase(), field);
    distance <= if field.len() <= 4 { 1 } else { 2 }
}

/// The options of the JSON form: the fields any spec may carry besides its kind and the kind's
/// own, in the order they are read and written (a limiter's, not a bare spec's).
const OPTIONS: [&str; 4] = ["wait_timeout", "block_for", "colocate", "shadow"];

/// The fields any spec may carry besides its kind's own: never taken for a typo of another.
fn is_known_field(name: &str) -> bool {
    name == "kind" || OPTIONS.contains(&name)
}

/// Renames the parameter of an error to the JSON path `path` (`windows[1]`).
pub(crate) fn at_path(path: String) -> impl FnOnce(Error) -> Error {
    move |e| Error::invalid_field(path, message_of(e))
}

fn as_list<'a>(value: &'a Value, path: &str) -> Result<&'a Vec<Value>> {
    match value.as_array() {
        Some(items) if !items.is_empty() => Ok(items),
        Some(_) => Err(Error::invalid_field(path, "must not be empty")),
        None => Err(Error::invalid_field(path, format!("must be a list, got {}", type_name(value)))),
    }
}

fn as_number(value: &Value, path: &str) -> Result<f64> {
    value.as_f64().ok_or_else(|| Error::invalid_field(path, format!("must be a number, got {}", type_name(value))))
}

/// A whole number in 1..=2^53 (the values compile() accepts; its message is kept).
fn as_count(value: &Value, path: &str) -> Result<u64> {
    crate::params::count_from_f64("count", as_number(value, path)?)
        .map_err(|e| Error::invalid_field(path, message_of(e)))
}

fn as_seconds(value: &Value, path: &str) -> Result<Duration> {
    let seconds = as_number(value, path)?;
    duration_from_secs("duration", seconds).map_err(|e| Error::invalid_field(path, message_of(e)))
}

/// A duration in seconds: a whole number when it is one (`60`, not `60.0`).
pub(crate) fn secs(duration: Duration) -> Value {
    if duration.subsec_nanos() == 0 {
        Value::from(duration.as_secs())
    } else {
        number(duration.as_secs_f64())
    }
}

/// A number: a whole one without a fraction (`10`, not `10.0`).
pub(crate) fn number(value: f64) -> Value {
    if value.fract() == 0.0 && value.abs() < 9_007_199_254_740_992.0 {
        Value::from(value as i64)
    } else {
        Number::from_f64(value).map_or(Value::Null, Value::Number)
    }
}

/// The message of an error, without its parameter (to name another).
pub(crate) fn message_of(error: Error) -> String {
    match error {
        Error::InvalidArgument { message, .. } => message,
        other => other.to_string(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec in shadow mode says so after its limit, which it does not enforce.
    #[test]
    fn words_say_shadow_mode_after_the_limit() {
        let config = LimiterConfig::from_json(r#"{"kind":"window","limit":9,"interval":60,"shadow":true}"#).unwrap();
        assert_eq!(config.words(), "9 per minute, in shadow mode");
    }

    fn parameter(json: &str) -> String {
        match LimiterConfig::from_json(json) {
            Err(Error::InvalidArgument { parameter, .. }) => parameter.into_owned(),
            other => panic!("expected InvalidArgument for {json}, got {other:?}"),
        }
    }

    fn message(json: &str) -> String {
        LimiterConfig::from_json(json).unwrap_err().to_string()
    }

    /// An unknown field's message lists the kind's fields (from the kind table), then the
    /// options any spec may carry ([`OPTIONS`]), as it did when each was written out.
    #[test]
    fn an_unknown_field_is_told_the_kinds_fields_then_the_options() {
        let message = |json| match LimiterConfig::from_json(json) {
            Err(Error::InvalidArgument { message, .. }) => message,
            other => panic!("expected InvalidArgument for {json}, got {other:?}"),
        };
        assert_eq!(
            message(r#"{"kind":"token_bucket","rate":1,"capacity":2,"burst":3}"#),
            "is not a field of a token_bucket spec (fields: kind, rate, capacity, wait_timeout, block_for, colocate, shadow)"
        );
        assert_eq!(
            message(r#"{"kind":"partitions","total_rate":1,"partitions":2,"extra":1}"#),
            "is not a field of a partitions spec (fields: kind, total_rate, partitions, lease_ttl, reserved, priority, \
             wait_timeout, block_for, colocate, shadow)"
        );
    }

    #[test]
    fn a_misspelt_field_is_named_with_the_closest_one() {
        // Issue 46: "capacty" reported `capacity is required`.
        let json = r#"{"kind":"token_bucket","rate":10,"capacty":20}"#;
        assert_eq!(parameter(json), "capacty");
        assert!(message(json).contains(r#"did you mean "capacity"?"#), "{}", message(json));
        // A typo of an optional field is caught when the unknown fields are refused.
        let json = r#"{"kind":"calendar","limit":10,"period":"month","ancor":15}"#;
        assert_eq!(parameter(json), "ancor");
        assert!(message(json).contains(r#"did you mean "anchor"?"#), "{}", message(json));
        // Nothing close: the missing field is named, as before.
        assert_eq!(parameter(r#"{"kind":"token_bucket","rate":10,"burst":20}"#), "capacity");
    }

    #[test]
    fn design_examples_round_trip_to_canonical_json() {
        for (given, canonical) in [
            (
                r#"{"kind":"token_bucket","rate":10,"capacity":20}"#,
                r#"{"kind":"token_bucket","rate":10,"capacity":20}"#,
            ),
            (
                r#"{"capacity":20,"rate":2.5,"kind":"token_bucket"}"#,
                r#"{"kind":"token_bucket","rate":2.5,"capacity":20}"#,
            ),
            (r#"{"kind":"window","limit":100,"interval":60}"#, r#"{"kind":"window","limit":100,"interval":60}"#),
            (r#"{"kind":"windows","windows":[[25,5],[300,60]]}"#, r#"{"kind":"windows","windows":[[25,5],[300,60]]}"#),
            (r#"{"kind":"windows","windows":[[25,5.0]]}"#, r#"{"kind":"window","limit":25,"interval":5}"#),
            (
                r#"{"kind":"sliding_window","limits":[[60,100,1],[1,10,0.1]]}"#,
                r#"{"kind":"sliding_window","limits":[[60,100,1],[1,10,0.1]]}"#,
            ),
            (
                r#"{"kind":"sliding_window","limits":[[60,100,null]]}"#,
                r#"{"kind":"sliding_window","limits":[[60,100]]}"#,
            ),
            (
                r#"{"kind":"concurrent","limit":10,"lock_timeout":30,"wait_timeout":5}"#,
                r#"{"kind":"concurrent","limit":10,"lock_timeout":30}"#,
            ),
            (r#"{"kind":"concurrent","limit":1}"#, r#"{"kind":"concurrent","limit":1,"lock_timeout":30}"#),
            (
                r#"{"kind":"concurrent","limit":1,"wait_timeout":0}"#,
                r#"{"kind":"concurrent","limit":1,"lock_timeout":30,"wait_timeout":0}"#,
            ),
            (r#"{"kind":"bucket","limit":5,"interval":1}"#, r#"{"kind":"bucket","limit":5,"interval":1}"#),
            (r#"{"kind":"leaky","size":4,"drain":0.5}"#, r#"{"kind":"leaky","size":4,"drain":0.5}"#),
            (r#"{"kind":"points","capacity":1000,"refill":60}"#, r#"{"kind":"points","capacity":1000,"refill":60}"#),
            (
                r#"{"kind":"calendar","limit":1000,"period":"month","tz":"Europe/Berlin","anchor":15}"#,
                r#"{"kind":"calendar","limit":1000,"period":"month","tz":"Europe/Berlin","anchor":15}"#,
            ),
            (
                r#"{"kind":"calendar","limit":5,"period":"day"}"#,
                r#"{"kind":"calendar","limit":5,"period":"day","tz":"UTC"}"#,
            ),
            (r#"{"kind":"unlimited"}"#, r#"{"kind":"unlimited"}"#),
            (
                r#"{"block_for":2.5,"kind":"bucket","limit":5,"interval":1}"#,
                r#"{"kind":"bucket","limit":5,"interval":1,"block_for":2.5}"#,
            ),
            (
                r#"{"kind":"concurrent","limit":1,"block_for":60,"wait_timeout":0}"#,
                r#"{"kind":"concurrent","limit":1,"lock_timeout":30,"wait_timeout":0,"block_for":60}"#,
            ),
            (
                r#"{"shadow":true,"kind":"leaky","size":4,"drain":0.5}"#,
                r#"{"kind":"leaky","size":4,"drain":0.5,"shadow":true}"#,
            ),
            (r#"{"kind":"leaky","size":4,"drain":0.5,"shadow":false}"#, r#"{"kind":"leaky","size":4,"drain":0.5}"#),
            (
                r#"{"kind":"concurrent","limit":1,"wait_timeout":0,"shadow":true}"#,
                r#"{"kind":"concurrent","limit":1,"lock_timeout":30,"wait_timeout":0,"shadow":true}"#,
            ),
        ] {
            let config = LimiterConfig::from_json(given).unwrap();
            assert_eq!(config.to_json(), canonical, "from {given}");
            assert_eq!(
                LimiterConfig::from_json(canonical).unwrap(),
                LimiterConfig::from_json(&config.to_json()).unwrap()
            );
        }
    }

    #[test]
    fn bad_fields_are_named_by_their_path() {
        for (json, path) in [
            ("[1]", "spec"),
            ("{", "spec"),
            (r#"{"rate":1}"#, "kind"),
            (r#"{"kind":"fountain"}"#, "kind"),
            (r#"{"kind":"token_bucket","rate":0,"capacity":2}"#, "rate"),
            (r#"{"kind":"token_bucket","rate":"fast","capacity":2}"#, "rate"),
            (r#"{"kind":"token_bucket","capacity":2}"#, "rate"),
            (r#"{"kind":"token_bucket","rate":1,"capacity":2.5}"#, "capacity"),
            (r#"{"kind":"token_bucket","rate":1,"capacity":2,"burst":3}"#, "burst"),
            (r#"{"kind":"windows","windows":[[25,5],[0,60]]}"#, "windows[1][0]"),
            (r#"{"kind":"windows","windows":[[25,5],[10,"60"]]}"#, "windows[1][1]"),
            (r#"{"kind":"windows","windows":[[25,5],[10,-1]]}"#, "windows[1][1]"),
            (r#"{"kind":"windows","windows":[[25,5],[10]]}"#, "windows[1]"),
            (r#"{"kind":"windows","windows":[]}"#, "windows"),
            (r#"{"kind":"sliding_window","limits":[[60,100,1],[10,10,0.00001]]}"#, "limits[1]"),
            (r#"{"kind":"sliding_window","limits":[[60,100,"x"]]}"#, "limits[0][2]"),
            (r#"{"kind":"concurrent","limit":1,"lock_timeout":0}"#, "lock_timeout"),
            (r#"{"kind":"concurrent","limit":1,"wait_timeout":-1}"#, "wait_timeout"),
            (r#"{"kind":"bucket","limit":5,"interval":1,"block_for":0}"#, "block_for"),
            (r#"{"kind":"bucket","limit":5,"interval":1,"block_for":-1}"#, "block_for"),
            (r#"{"kind":"bucket","limit":5,"interval":1,"block_for":"1m"}"#, "block_for"),
            (r#"{"kind":"bucket","limit":5,"interval":1,"block_for":1e12}"#, "block_for"),
            (r#"{"kind":"bucket","limit":5,"interval":"second"}"#, "interval"),
            (r#"{"kind":"calendar","limit":5,"period":"fortnight"}"#, "period"),
            (r#"{"kind":"calendar","limit":5,"period":"day","tz":"Mars/Olympus"}"#, "tz"),
            (r#"{"kind":"calendar","limit":5,"period":"month","anchor":32}"#, "anchor"),
            (r#"{"kind":"calendar","limit":5,"period":"month","anchor":-1}"#, "anchor"),
            (r#"{"kind":"unlimited","limit":5}"#, "limit"),
            (r#"{"kind":"leaky","size":4,"drain":1,"shadow":"yes"}"#, "shadow"),
            (r#"{"kind":"leaky","size":4,"drain":1,"shadow":1}"#, "shadow"),
        ] {
            assert_eq!(parameter(json), path, "{json}");
        }
    }

    /// `colocate` travels in the JSON form (written only when not the default) and is refused
    /// naming itself when it is not one of its values, or in a bare spec.
    #[test]
    fn the_colocate_option_travels_in_json() {
        let json = r#"{"kind":"bucket","limit":5,"interval":1,"colocate":"tenant"}"#;
        let config = LimiterConfig::from_json(json).unwrap();
        assert_eq!(config.colocate, Some(Colocate::Tenant));
        assert_eq!(config.to_json(), json);
        let identity = LimiterConfig::from_json(r#"{"kind":"bucket","limit":5,"interval":1,"colocate":"identity"}"#);
        assert_eq!(identity.unwrap().to_json(), r#"{"kind":"bucket","limit":5,"interval":1}"#);
        for bad in [r#""slot""#, "1", "[]"] {
            let json = format!(r#"{{"kind":"bucket","limit":5,"interval":1,"colocate":{bad}}}"#);
            assert_eq!(LimiterConfig::from_json(&json).unwrap_err().parameter(), Some("colocate"), "{bad}");
        }
        assert_eq!(LimiterSpec::from_json(json).unwrap_err().parameter(), Some("colocate"));
    }

    #[test]
    fn a_bare_spec_refuses_the_shadow_option() {
        let e = LimiterSpec::from_json(r#"{"kind":"leaky","size":4,"drain":2,"shadow":true}"#).unwrap_err();
        assert_eq!(e.parameter(), Some("shadow"));
    }

    #[test]
    fn a_bare_spec_refuses_the_wait_timeout_option() {
        let e = LimiterSpec::from_json(r#"{"kind":"concurrent","limit":1,"wait_timeout":1}"#).unwrap_err();
        assert_eq!(e.parameter(), Some("wait_timeout"));
        let e = LimiterSpec::from_json(r#"{"kind":"concurrent","limit":1,"block_for":1}"#).unwrap_err();
        assert_eq!(e.parameter(), Some("block_for"));
        let spec = LimiterSpec::from_json(r#"{"kind":"leaky","size":4,"drain":2}"#).unwrap();
        assert_eq!(spec, LimiterSpec::Leaky { size: 4, drain: Duration::from_secs(2) });
        assert_eq!(spec.to_json(), r#"{"kind":"leaky","size":4,"drain":2}"#);
    }

    /// Random documents built from the spec's own vocabulary (kinds, field names, numbers at
    /// the edges, lists, nesting): parsing never panics, and whatever parses reads back to a
    /// canonical form that parses to the same config (the canonical form is a fixed point).
    mod fuzz {
        use proptest::prelude::*;
        use serde_json::{json, Value};

        use super::LimiterConfig;

        fn scalar() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(json!(0)),
                Just(json!(1)),
                Just(json!(-1)),
                Just(json!(1.5)),
                Just(json!(1e-7)),
                Just(json!(9007199254740993u64)),
                Just(json!(u64::MAX)),
                Just(json!(1e308)),
                Just(json!(null)),
                Just(json!(true)),
                Just(json!("")),
                Just(json!("day")),
                Just(json!("month")),
                Just(json!("UTC")),
                Just(json!("Europe/Berlin")),
                (1u64..100).prop_map(|n| json!(n)),
                (0.001f64..100.0).prop_map(|f| json!(f)),
            ]
        }

        fn value() -> impl Strategy<Value = Value> {
            scalar().prop_recursive(3, 24, 4, |inner| {
                prop_oneof![proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array), inner]
            })
        }

        fn document() -> impl Strategy<Value = Value> {
            let kinds = prop_oneof![
                Just("concurrent"),
                Just("bucket"),
                Just("window"),
                Just("windows"),
                Just("sliding_window"),
                Just("token_bucket"),
                Just("leaky"),
                Just("points"),
                Just("calendar"),
                Just("unlimited"),
                Just("nope"),
            ];
            let field = prop_oneof![
                Just("limit"),
                Just("interval"),
                Just("windows"),
                Just("limits"),
                Just("rate"),
                Just("capacity"),
                Just("size"),
                Just("drain"),
                Just("refill"),
                Just("lock_timeout"),
                Just("wait_timeout"),
                Just("block_for"),
                Just("period"),
                Just("tz"),
                Just("anchor"),
                Just("extra"),
            ];
            (kinds, proptest::collection::vec((field, value()), 0..6)).prop_map(|(kind, fields)| {
                let mut object = serde_json::Map::new();
                object.insert("kind".into(), json!(kind));
                for (name, value) in fields {
                    object.insert(name.into(), value);
                }
                Value::Object(object)
            })
        }

        proptest! {
            // PROPTEST_CASES=1000000 for a long run (see the README).
            #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(3_000), ..ProptestConfig::default() })]

            #[test]
            fn parsing_never_panics_and_canonical_forms_are_fixed_points(doc in document()) {
                if let Ok(config) = LimiterConfig::from_value(&doc) {
                    let canonical = config.to_json();
                    let again = LimiterConfig::from_json(&canonical).expect("a canonical spec parses");
                    prop_assert_eq!(again.to_json(), canonical);
                }
            }
        }
    }
}
