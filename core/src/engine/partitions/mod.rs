//! Leased partitions (Azure's rate limiting pattern): a service's capacity of `total_rate` units
//! per second is split into `partitions` equal partitions that uncoordinated processes lease for
//! `lease_ttl`; each process paces itself to the partitions it holds.
//!
//! - [`pacing`]: the process-local rule. A partition earns `total_rate / partitions` units per
//!   second while its lease is held; a call spends what was earned, never ahead of time.
//! - `partitions.lua` ([`SCRIPT`]): leases with fencing tokens, a heartbeat set of live members,
//!   and the fair share a member may hold; the Redis backend runs it
//!   (`backend/redis/partitions.rs`).
//! - The limiter's `PartitionSet` (`limiter/partitions/set.rs`): one limiter's leases and
//!   pacing, per key, in one process.
//!
//! A partitions limiter is not an engine: a check is decided in the process, with a Redis round
//! trip only to lease or renew (every third of `lease_ttl`, or sooner while under its share).

pub(crate) mod pacing;

use std::sync::LazyLock;
use std::time::Duration;

use redis::Cmd;

use crate::defaults::DEFAULT_PARTITIONS_LEASE_TTL;
use crate::engine::kinds::KindSpec;
use crate::engine::lua::LuaScript;
use crate::engine::spec_json::{number, secs, JsonFields, JsonWriter};
use crate::engine::words;
use crate::engine::Algorithm;
use crate::engine::{Engine, Op, Outcome};
use crate::error::{Error, Result};
use crate::params::{micros, validate_duration};

/// `partitions.lua`, run by the Redis backend's side of leased partitions
/// (`backend/redis/partitions.rs`).
pub(crate) static SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("partitions", include_str!("partitions.lua")));

/// The most partitions one limiter may have (a lease call reads them all).
pub const MAX_PARTITIONS: u64 = 1024;

/// The shortest `lease_ttl`: a holder renews every third of it, with a round trip in between.
pub const MIN_LEASE_TTL: Duration = Duration::from_millis(100);

/// A partitions limiter's parameters, validated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Partitions {
    /// Units per second of the whole service.
    pub total_rate: f64,
    /// How many equal partitions it is split into.
    pub partitions: u32,
    /// How long a lease lasts without renewal (µs).
    pub ttl_us: u64,
    /// Partitions set aside for the priority class.
    pub reserved: u32,
    /// Whether this limiter belongs to the priority class (leases only the reserved partitions).
    pub priority: bool,
}

impl Partitions {
    /// Validates `partitions(total_rate, partitions, lease_ttl, reserved, priority)`, naming
    /// the bad parameter.
    pub(crate) fn compile(
        total_rate: f64,
        partitions: u64,
        lease_ttl: Duration,
        reserved: u64,
        priority: bool,
    ) -> Result<Partitions> {
        if !total_rate.is_finite() || total_rate <= 0.0 || total_rate > 1e6 {
            return Err(Error::invalid(
                "total_rate",
                format!("must be a finite number above 0 and at most 1000000 per second, got {total_rate}"),
            ));
        }
        if partitions == 0 || partitions > MAX_PARTITIONS {
            return Err(Error::invalid(
                "partitions",
                format!("must be between 1 and {MAX_PARTITIONS}, got {partitions}"),
            ));
        }
        let ttl = validate_duration("lease_ttl", lease_ttl)?;
        if ttl < MIN_LEASE_TTL {
            return Err(Error::invalid("lease_ttl", format!("must be at least {MIN_LEASE_TTL:?}, got {ttl:?}")));
        }
        if priority && (reserved == 0 || reserved > partitions) {
            return Err(Error::invalid(
                "reserved",
                format!(
                    "a priority limiter leases only reserved partitions: reserved must be between 1 and \
                     partitions ({partitions}), got {reserved}"
                ),
            ));
        }
        if !priority && reserved >= partitions {
            return Err(Error::invalid(
                "reserved",
                format!("must leave at least one of the {partitions} partitions unreserved, got {reserved}"),
            ));
        }
        Ok(Partitions {
            total_rate,
            partitions: partitions as u32,
            ttl_us: micros(ttl),
            reserved: reserved as u32,
            priority,
        })
    }

    /// Units per second one partition is worth.
    pub(crate) fn partition_rate(&self) -> f64 {
        self.total_rate / f64::from(self.partitions)
    }

    /// The partitions this limiter's class leases: `[first, end)`.
    pub(crate) fn pool(&self) -> (u32, u32) {
        if self.priority {
            (0, self.reserved)
        } else {
            (self.reserved, self.partitions)
        }
    }

    /// The largest cost one call may ask for: one second of the class's whole capacity (at
    /// least 1). A process holding part of it waits its share of time for such a call.
    pub(crate) fn max_cost(&self) -> u64 {
        let (first, end) = self.pool();
        ((self.partition_rate() * f64::from(end - first)).floor() as u64).max(1)
    }
}

/// Never run by a backend: [`PartitionSet`] decides partitions limiters' calls. The engine
/// exists so that a partitions limiter is an [`crate::engine::Algorithm`] like any other
/// (compiled from its spec, validated, listed).
impl Engine for Partitions {
    /// Listed for tools; run by the Redis backend's partitions module, not per call.
    const SCRIPTS: &'static [&'static LazyLock<LuaScript>] = &[&SCRIPT];

    type State = ();

    fn apply(&self, _state: &mut (), _now: u64, op: Op, _changed: &mut bool) -> Result<Outcome> {
        Err(crate::engine::contract::not_applicable(op, self))
    }

    fn expires_at(&self, _state: &()) -> u64 {
        0
    }

    fn script(&self) -> Option<&'static LuaScript> {
        None
    }

    fn keys(&self, _op: Op) -> &'static [&'static str] {
        &[]
    }

    fn state_keys(&self) -> &'static [&'static str] {
        &[]
    }

    fn encode(&self, op: Op, _now: Option<u64>, _cmd: &mut Cmd) -> Result<()> {
        Err(crate::engine::contract::not_applicable(op, self))
    }

    fn decode(&self, op: Op, _reply: &[i64]) -> Result<Outcome> {
        Err(crate::engine::contract::not_applicable(op, self))
    }

    fn capacity(&self) -> u64 {
        self.max_cost()
    }
}

/// The `partitions` kind.
pub(crate) struct PartitionsKind;

impl KindSpec for PartitionsKind {
    /// `total_rate`, `partitions`, `lease_ttl`, `reserved`, `priority`.
    type Fields = (f64, u64, Duration, u64, bool);

    const SAMPLES: &'static [&'static str] =
        &[r#"{"kind":"partitions","total_rate":100,"partitions":20,"lease_ttl":15,"reserved":0,"priority":false}"#];
    const NOT_IN_CHECK_ALL: Option<&'static str> =
        Some("is a partitions limiter, which paces in process and cannot take part in check_all");

    fn parse(_name: &str, json: &mut JsonFields<'_>) -> Result<Self::Fields> {
        Ok((
            json.number("total_rate")?,
            json.count("partitions")?,
            json.optional_seconds("lease_ttl")?.unwrap_or(DEFAULT_PARTITIONS_LEASE_TTL),
            json.optional_whole("reserved")?.unwrap_or(0),
            json.optional_bool("priority")?.unwrap_or(false),
        ))
    }

    fn words((total_rate, partitions, lease_ttl, _, _): &Self::Fields) -> String {
        format!(
            "{} over {} partitions, leased for {}",
            words::rate(*total_rate),
            words::count(*partitions),
            words::duration(*lease_ttl)
        )
    }

    fn print(&(total_rate, partitions, lease_ttl, reserved, priority): &Self::Fields, json: &mut JsonWriter) {
        json.put("total_rate", number(total_rate));
        json.put("partitions", partitions.into());
        json.put("lease_ttl", secs(lease_ttl));
        json.put("reserved", reserved.into());
        json.put("priority", priority.into());
    }

    /// Unchanged: partitions never fall back, a process holds what it leased until its deadline.
    fn scaled(fields: &Self::Fields, _divisor: u64) -> Self::Fields {
        *fields
    }

    fn compile(&(total_rate, partitions, lease_ttl, reserved, priority): &Self::Fields) -> Result<Algorithm> {
        Ok(Algorithm::Partitions(Partitions::compile(total_rate, partitions, lease_ttl, reserved, priority)?))
    }
}
