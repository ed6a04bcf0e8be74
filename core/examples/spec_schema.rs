//! Prints the JSON Schema of limiter specs, derived from the core's own parser, for the
//! documentation site (`scripts/test-docs` runs it):
//! `cargo run -p ratekeeper --example spec_schema`.
//!
//! Each kind starts from one valid spec with every field set (its samples in the table of kinds,
//! [`Kind::samples`]). What the schema says
//! about a field is what [`LimiterConfig::from_json`] does with it: the field is *required* when
//! the parser refuses the spec without it (the refusal is quoted), its *default* is what the
//! canonical form ([`LimiterConfig::to_json`]) fills in without it, it is an *integer* when the
//! parser refuses 1.5 for it, and a string's allowed values are the candidates the parser accepts.
//! Only the samples are written by hand (beside each kind's fields), and a sample the parser
//! refuses fails the run.
use ratekeeper::{Kind, LimiterConfig, DEFAULT_WAIT_TIMEOUT};
use serde_json::{json, Map, Value};

/// The options every kind accepts, added to each kind's samples.
const OPTIONS: &str = r#","wait_timeout":5,"colocate":"tenant"}"#;

/// One valid spec per kind name, every field set: each kind's samples from the table of kinds
/// ([`Kind::samples`]), with the options every kind accepts.
fn samples() -> Vec<String> {
    let specs = Kind::all().iter().flat_map(|kind| kind.samples());
    specs.map(|spec| format!("{}{OPTIONS}", spec.strip_suffix('}').expect("a sample is a JSON object"))).collect()
}

/// Strings tried for every string field; the schema lists those the parser accepts as an enum
/// (when it refuses some of them: a field that takes any string, like `tz`, stays open). The
/// candidates are every word some field takes (`period`'s, `colocate`'s) and a few no field does.
const STRING_CANDIDATES: &[&str] =
    &["second", "minute", "hour", "day", "week", "month", "year", "decade", "identity", "tenant", "key"];

fn parse(spec: &Map<String, Value>) -> Result<LimiterConfig, ratekeeper::Error> {
    LimiterConfig::from_json(&Value::Object(spec.clone()).to_string())
}

fn with(sample: &Map<String, Value>, field: &str, value: Value) -> Map<String, Value> {
    let mut spec = sample.clone();
    spec.insert(field.to_owned(), value);
    spec
}

/// The sample with only its kind, its required fields and `field` (so that one optional field,
/// such as a calendar's `anchor`, does not narrow which values another accepts).
fn minimal_with(sample: &Map<String, Value>, field: &str) -> Map<String, Value> {
    sample
        .iter()
        .filter(|(f, _)| {
            let mut without = sample.clone();
            without.remove(*f);
            *f == "kind" || *f == field || parse(&without).is_err()
        })
        .map(|(f, v)| (f.clone(), v.clone()))
        .collect()
}

fn field_schema(sample: &Map<String, Value>, field: &str) -> (Value, Option<String>) {
    let value = &sample[field];
    let mut schema = Map::new();
    match value {
        Value::Number(_) => {
            let integer = parse(&with(sample, field, json!(1.5))).is_err();
            schema.insert("type".into(), json!(if integer { "integer" } else { "number" }));
        }
        Value::String(_) => {
            schema.insert("type".into(), json!("string"));
            let accepted: Vec<&str> = STRING_CANDIDATES
                .iter()
                .copied()
                .filter(|c| parse(&with(&minimal_with(sample, field), field, json!(c))).is_ok())
                .collect();
            if !accepted.is_empty() && accepted.len() < STRING_CANDIDATES.len() {
                schema.insert("enum".into(), json!(accepted));
            }
        }
        Value::Bool(_) => {
            schema.insert("type".into(), json!("boolean"));
        }
        Value::Array(items) => {
            let arity: Vec<usize> = items.iter().filter_map(|i| i.as_array().map(Vec::len)).collect();
            let (min, max) = (arity.iter().min().copied().unwrap_or(0), arity.iter().max().copied().unwrap_or(0));
            schema.insert("type".into(), json!("array"));
            schema.insert("minItems".into(), json!(1));
            schema.insert(
                "items".into(),
                json!({"type": "array", "items": {"type": "number"}, "minItems": min, "maxItems": max}),
            );
        }
        other => panic!("a sample field of an unexpected type: {field} = {other}"),
    }
    schema.insert("examples".into(), json!([value]));
    let mut without = sample.clone();
    without.remove(field);
    let missing = match parse(&without) {
        Err(e) => Some(e.to_string()),
        Ok(config) => {
            let canonical: Value = serde_json::from_str(&config.to_json()).expect("the canonical form is JSON");
            let default = match canonical.get(field) {
                Some(default) => default.clone(),
                None if field == "wait_timeout" => json!(DEFAULT_WAIT_TIMEOUT.as_secs_f64()),
                None => Value::Null, // left out of the canonical form: computed by the limiter
            };
            schema.insert("default".into(), default);
            None
        }
    };
    (Value::Object(schema), missing)
}

fn main() {
    let mut kinds = Vec::new();
    for sample in samples() {
        let sample: Map<String, Value> = serde_json::from_str(&sample).expect("a sample is a JSON object");
        let config = parse(&sample).unwrap_or_else(|e| panic!("the parser refuses the sample {sample:?}: {e}"));
        let kind = sample["kind"].as_str().expect("a sample names its kind").to_owned();
        let mut properties = Map::new();
        properties.insert("kind".into(), json!({"const": kind}));
        let mut required = vec![json!("kind")];
        let mut when_missing = Map::new();
        for field in sample.keys().filter(|f| *f != "kind") {
            let (schema, missing) = field_schema(&sample, field);
            properties.insert(field.clone(), schema);
            if let Some(message) = missing {
                required.push(json!(field));
                when_missing.insert(field.clone(), json!(message));
            }
        }
        let minimal: Map<String, Value> = sample
            .iter()
            .filter(|(f, _)| *f == "kind" || when_missing.contains_key(*f))
            .map(|(f, v)| (f.clone(), v.clone()))
            .collect();
        let canonical_of_minimal = parse(&minimal).expect("the required fields alone parse").to_json();
        kinds.push(json!({
            "title": kind,
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
            "examples": [serde_json::from_str::<Value>(&config.to_json()).expect("canonical JSON")],
            // Strings, byte for byte: serde_json's maps sort keys, the canonical form orders them.
            "x-canonical": config.to_json(),
            "x-canonical-of-required": canonical_of_minimal,
            "x-error-when-missing": when_missing,
        }));
    }
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "ratekeeper limiter spec",
        "description": "A limiter as data: every language builds a limiter from it and reads it back. Durations are seconds. Generated by core/examples/spec_schema.rs from the core's parser; values are also range-checked by the limiter's constructor (a refusal names the field).",
        "oneOf": kinds,
    });
    println!("{}", serde_json::to_string_pretty(&schema).expect("the schema serializes"));
}
