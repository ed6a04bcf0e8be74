//! The limiter that always allows: no state, no script, no backend.

use redis::Cmd;

use super::contract::{not_applicable, Engine, Op, Outcome};
use super::kinds::KindSpec;
use super::spec_json::{JsonFields, JsonWriter};
use super::Algorithm;
use crate::decision::Decision;
use crate::error::Result;

/// The `unlimited` engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unlimited;

impl Engine for Unlimited {
    type State = ();

    fn apply(&self, _state: &mut (), _now: u64, _op: Op, _changed: &mut bool) -> Result<Outcome> {
        Ok(Outcome::of(Decision::unlimited()))
    }

    fn expires_at(&self, _state: &()) -> u64 {
        0
    }

    fn keys(&self, _op: Op) -> &'static [&'static str] {
        &[]
    }

    fn state_keys(&self) -> &'static [&'static str] {
        &[]
    }

    fn encode(&self, op: Op, _now: Option<u64>, _cmd: &mut Cmd) -> Result<()> {
        Err(not_applicable(op, self))
    }

    fn decode(&self, _op: Op, _reply: &[i64]) -> Result<Outcome> {
        Ok(Outcome::of(Decision::unlimited()))
    }

    fn capacity(&self) -> u64 {
        crate::params::MAX_COUNT
    }

    fn validate_cost(&self, _cost: u64) -> Result<()> {
        Ok(())
    }
}

/// The `unlimited` kind: no fields.
pub(crate) struct UnlimitedKind;

impl KindSpec for UnlimitedKind {
    type Fields = ();

    const SAMPLES: &'static [&'static str] = &[r#"{"kind":"unlimited"}"#];

    fn parse(_name: &str, _json: &mut JsonFields<'_>) -> Result<()> {
        Ok(())
    }

    fn words(_: &()) -> String {
        "unlimited".to_owned()
    }

    fn print(_fields: &(), _json: &mut JsonWriter) {}

    fn scaled(_fields: &(), _divisor: u64) {}

    fn compile(_fields: &()) -> Result<Algorithm> {
        Ok(Algorithm::Unlimited(Unlimited))
    }
}
