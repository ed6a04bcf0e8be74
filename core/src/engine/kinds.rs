//! Every engine and every limiter kind, declared once. The tables below are read by the code
//! that needs one arm per engine or per kind, so that nothing else lists them:
//! - [`for_each_engine!`] generates [`super::Algorithm`] and its dispatch (`engine/mod.rs`), the
//!   memory backend's per-key state and its dispatch (`backend/memory.rs`) and the list of
//!   scripts (`engine/lua.rs`);
//! - [`declare_kinds!`] generates [`LimiterSpec`] and [`Kind`] with their names and dispatch,
//!   and the JSON form's dispatch (`engine/spec_json.rs`).
//!
//! A new kind is an engine file (an [`super::Engine`], and a [`KindSpec`] for the kind's fields)
//! with its `.lua` beside it, one line in each table, and vectors in `tests/vectors/`; bindings
//! build it from its spec (`Backend::limiter`, or the JSON form) without a line of their own.

/// Calls `$callback!` with the table of engines (after `$first`, if given), one line each:
/// `Variant: engine type, inline | boxed;` where the last word says whether the memory backend
/// keeps the engine's [`super::Engine::State`] in the slot itself (small, fixed-size states) or
/// behind a pointer (states that grow), so that a slot stays one cache line.
macro_rules! for_each_engine {
    ($callback:ident $($first:tt)*) => {
        $callback! {
            $($first)*
            Gcra: $crate::engine::gcra::Gcra, inline;
            Leased: $crate::engine::leased::Leased, inline;
            Sliding: $crate::engine::sliding::Sliding, boxed;
            Log: $crate::engine::log::Log, boxed;
            Concurrent: $crate::engine::concurrent::Concurrent, boxed;
            Calendar: $crate::engine::calendar::Calendar, inline;
            Partitions: $crate::engine::partitions::Partitions, inline;
            Unlimited: $crate::engine::unlimited::Unlimited, inline;
        }
    };
}
pub(crate) use for_each_engine;

use std::time::Duration;

use super::calendar_period::CalendarPeriod;
use super::spec::{SlidingLimit, WindowLimit};
use super::spec_json::{JsonFields, JsonWriter};
use super::Algorithm;
use crate::error::Result;

/// What a limiter kind defines beyond its fields, implemented in its engine's file by the type
/// its line in [`declare_kinds!`] names. `Fields` is the tuple of the kind's fields in declared
/// order; the generated code hands it over and builds the [`LimiterSpec`] variant back from it.
pub(crate) trait KindSpec {
    /// The kind's fields, as a tuple in the order the table declares them.
    type Fields;

    /// Valid specs of the kind in the JSON form, every field set: one per name the JSON form
    /// accepts for it (the documentation's schema starts from them; see [`Kind::samples`]).
    const SAMPLES: &'static [&'static str];

    /// Why a limiter of the kind cannot take part in `check_all` (said after its name), or
    /// `None` when it can.
    const NOT_IN_CHECK_ALL: Option<&'static str> = None;

    /// Reads the fields from a JSON spec object; `name` is the kind name it gave (one of the
    /// kind's names in the table). Fields are read in the order the canonical form writes them.
    fn parse(name: &str, json: &mut JsonFields<'_>) -> Result<Self::Fields>;

    /// Writes the fields of the canonical JSON form after its `"kind"`.
    fn print(fields: &Self::Fields, json: &mut JsonWriter);

    /// The fields in plain words, as the CLI's `limits` and the Limits page show them ("5 per
    /// second, bursts of 10"), with the pieces of `engine/words.rs`.
    fn words(fields: &Self::Fields) -> String;

    /// The `"kind"` the canonical JSON form writes: the kind's name unless the kind has another
    /// name for some of its specs.
    fn json_name(_fields: &Self::Fields, name: &'static str) -> &'static str {
        name
    }

    /// The same limiter with `1/divisor` of its limits, capacities and rates (see
    /// [`LimiterSpec::scaled`]); [`share`] divides a count.
    fn scaled(fields: &Self::Fields, divisor: u64) -> Self::Fields;

    /// Validates every parameter (naming the bad one) and compiles to the kind's engine.
    fn compile(fields: &Self::Fields) -> Result<Algorithm>;

    /// The span a single-limit kind's quota covers, as the HTTP fields announce it (draft-11's
    /// `w`): `None` where the kind has no one window (a calendar's days vary; a count of
    /// holders has none). Multi-limit kinds report each limit's window in their decisions.
    fn window(_fields: &Self::Fields) -> Option<Duration> {
        None
    }

    /// For a kind of several limits: checks each on its own, naming a bad one by its JSON path
    /// (`windows[1]`), before the whole is compiled.
    fn check_parts(_fields: &Self::Fields) -> Result<()> {
        Ok(())
    }
}

/// `count / divisor`, at least 1: one process's share of a count.
pub(crate) fn share(count: u64, divisor: u64) -> u64 {
    (count / divisor.max(1)).max(1)
}

/// Generates, from the table of kinds below: [`LimiterSpec`] (one variant per kind, with its
/// fields), [`Kind`] and its names, [`LimiterSpec::kind`], [`LimiterSpec::scaled`],
/// `LimiterSpec::compile`, and the JSON form's dispatch (`parse_json`, `print_json`,
/// `check_parts`, `JSON_NAMES`).
macro_rules! declare_kinds {
    ($(
        $(#[$meta:meta])*
        $variant:ident = $name:literal $(| $alias:literal)* => $spec:ty $({
            $($(#[$field_meta:meta])* $field:ident: $type:ty,)*
        })?;
    )*) => {
        /// What a limiter does, with its parameters. Build limiters with the constructors on
        /// [`crate::Backend`]; this enum is for callers that build limiters from configuration.
        #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
        pub enum LimiterSpec {
            $($(#[$meta])* $variant $({ $($(#[$field_meta])* $field: $type,)* })?,)*
        }

        /// The kind of a limiter: part of its storage key, so limiters of different kinds that
        /// share a name never read each other's state.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Kind {
            $(#[doc = concat!("[`LimiterSpec::", stringify!($variant), "`].")] $variant,)*
        }

        impl Kind {
            /// Every kind, in declaration order.
            pub(crate) const ALL: &'static [Kind] = &[$(Kind::$variant,)*];

            /// The snake_case name used in storage keys, vectors and bindings.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Kind::$variant => $name,)*
                }
            }

            /// Every kind, in the order of the table of kinds.
            pub fn all() -> &'static [Kind] {
                Kind::ALL
            }

            /// Valid specs of this kind in the JSON form with every field set, one per name the
            /// JSON form accepts for it (`window` and `windows`): what the documentation's schema
            /// of specs starts from.
            pub fn samples(self) -> &'static [&'static str] {
                match self {
                    $(Kind::$variant => <$spec as KindSpec>::SAMPLES,)*
                }
            }

            /// Why a limiter of this kind cannot take part in `check_all`, said after its name;
            /// `None` when it can.
            pub(crate) fn not_in_check_all(self) -> Option<&'static str> {
                match self {
                    $(Kind::$variant => <$spec as KindSpec>::NOT_IN_CHECK_ALL,)*
                }
            }

            /// The kind named by [`Kind::as_str`].
            pub fn from_name(name: &str) -> Option<Kind> {
                match name {
                    $($name => Some(Kind::$variant),)*
                    _ => None,
                }
            }
        }

        impl LimiterSpec {
            /// The kind of limiter this spec builds.
            pub fn kind(&self) -> Kind {
                match self {
                    $(LimiterSpec::$variant { .. } => Kind::$variant,)*
                }
            }

            /// The same limiter with `1/divisor` of its limits, capacities and rates (each at
            /// least 1): what one of `divisor` processes may use on its own while the shared
            /// backend is down.
            pub fn scaled(&self, divisor: u32) -> LimiterSpec {
                let divisor = u64::from(divisor.max(1));
                match self {
                    $(LimiterSpec::$variant $({ $($field,)* })? => {
                        let fields = ($($(Clone::clone($field),)*)?);
                        let ($($($field,)*)?) = <$spec as KindSpec>::scaled(&fields, divisor);
                        LimiterSpec::$variant $({ $($field,)* })?
                    })*
                }
            }

            /// The span the limiter's quota covers, where its kind has one window (see
            /// `KindSpec::window`): what the HTTP middleware announces as draft-11's `w`.
            pub fn window(&self) -> Option<Duration> {
                match self {
                    $(LimiterSpec::$variant $({ $($field,)* })? => {
                        <$spec as KindSpec>::window(&($($(Clone::clone($field),)*)?))
                    })*
                }
            }

            /// Validates every parameter (naming the bad one) and compiles to the engine's
            /// integer microseconds (each kind compiles its own parameters).
            pub(crate) fn compile(&self) -> Result<Algorithm> {
                match self {
                    $(LimiterSpec::$variant $({ $($field,)* })? => {
                        <$spec as KindSpec>::compile(&($($(Clone::clone($field),)*)?))
                    })*
                }
            }
        }

        impl LimiterSpec {
            /// The spec in plain words: "1,000 per hour", "5 per second, bursts of 10", "2 at
            /// once, reclaimed after 30 s" (see [`LimiterConfig::words`](crate::LimiterConfig::words)).
            pub fn words(&self) -> String {
                match self {
                    $(LimiterSpec::$variant $({ $($field,)* })? => {
                        <$spec as KindSpec>::words(&($($(Clone::clone($field),)*)?))
                    })*
                }
            }
        }

        /// Every kind name the JSON form accepts, in declaration order.
        pub(crate) const JSON_NAMES: &[&str] = &[$($name, $($alias,)*)*];

        /// The spec that a JSON object of kind `name` describes; `None` for an unknown kind.
        pub(crate) fn parse_json(name: &str, json: &mut JsonFields<'_>) -> Option<Result<LimiterSpec>> {
            match name {
                $($name $(| $alias)* => Some(
                    <$spec as KindSpec>::parse(name, json)
                        .map(|($($($field,)*)?)| LimiterSpec::$variant $({ $($field,)* })?),
                ),)*
                _ => None,
            }
        }

        /// Writes `spec`'s `"kind"` and fields in the canonical JSON form.
        pub(crate) fn print_json(spec: &LimiterSpec, json: &mut JsonWriter) {
            match spec {
                $(LimiterSpec::$variant $({ $($field,)* })? => {
                    let fields = ($($(Clone::clone($field),)*)?);
                    json.put("kind", <$spec as KindSpec>::json_name(&fields, $name).into());
                    <$spec as KindSpec>::print(&fields, json);
                })*
            }
        }

        /// See [`KindSpec::check_parts`].
        pub(crate) fn check_parts(spec: &LimiterSpec) -> Result<()> {
            match spec {
                $(LimiterSpec::$variant $({ $($field,)* })? => {
                    <$spec as KindSpec>::check_parts(&($($(Clone::clone($field),)*)?))
                })*
            }
        }
    };
}

// The table of kinds: a kind is what users name (`"token_bucket"`); several kinds may run on
// one engine (token bucket, leaky bucket and points on GCRA). Each line: the `LimiterSpec`
// variant (with its documentation and fields) = its name (| other names its JSON form
// accepts) => the type, in its engine's file, that implements `KindSpec` for it.
declare_kinds! {
    /// At most `limit` holders at once; leases older than `lock_timeout` may be reclaimed.
    Concurrent = "concurrent" => crate::engine::concurrent::ConcurrentKind {
        /// Slots.
        limit: u64,
        /// How long a lease may be held before another caller may reclaim it.
        lock_timeout: Duration,
    };
    /// Fixed windows aligned to multiples of `interval` since the epoch.
    Bucket = "bucket" => crate::engine::sliding::BucketKind {
        /// Units per window.
        limit: u64,
        /// Window length.
        interval: Duration,
    };
    /// Exact sliding window(s): never more than `limit` in any span of `interval`, for each.
    Window = "window" | "windows" => crate::engine::log::WindowKind {
        /// One or more windows, checked and recorded together.
        windows: Vec<WindowLimit>,
    };
    /// Several limits over sub-buckets, checked atomically; only admitted calls count.
    SlidingWindow = "sliding_window" => crate::engine::sliding::SlidingWindowKind {
        /// One or more limits.
        limits: Vec<SlidingLimit>,
    };
    /// Refills `rate` tokens per second up to `capacity`.
    TokenBucket = "token_bucket" => crate::engine::gcra::TokenBucketKind {
        /// Tokens per second (at most 1,000,000).
        rate: f64,
        /// Burst size.
        capacity: u64,
    };
    /// A token bucket (`rate` per second up to `capacity`) whose tokens each process takes from
    /// the backend in leases of up to `chunk` and spends in-process; a lease's unspent tokens go
    /// back when the limiter is closed, or lapse after `lease_ttl`. Over any span the fleet admits
    /// at most `capacity + rate × (span + lease_ttl)`; leasing ahead may under-use it. On the
    /// memory backend it is the in-process token bucket.
    Leased = "leased" => crate::engine::leased::LeasedKind {
        /// Tokens per second (at most 1,000,000).
        rate: f64,
        /// Burst size.
        capacity: u64,
        /// The most tokens one lease takes (`None`: capacity / 16, at least 1).
        chunk: Option<u64>,
        /// How long a process may spend a lease's tokens before they lapse.
        lease_ttl: Duration,
    };
    /// A burst of `size`, then one call per `drain / size`; full again after `drain` idle.
    Leaky = "leaky" => crate::engine::gcra::LeakyKind {
        /// Burst size.
        size: u64,
        /// Time for a full bucket to drain.
        drain: Duration,
    };
    /// A leaky bucket of points refilled in `refill`; calls give an estimate, corrected later.
    Points = "points" => crate::engine::gcra::PointsKind {
        /// Points in a full bucket.
        capacity: u64,
        /// Time for an empty bucket to refill completely.
        refill: Duration,
    };
    /// At most `limit` per calendar period in time zone `tz` (see [`CalendarPeriod`]).
    Calendar = "calendar" => crate::engine::calendar::CalendarKind {
        /// Units per period.
        limit: u64,
        /// Day, ISO week (from Monday), month or year.
        period: CalendarPeriod,
        /// An IANA time zone name, e.g. `"Europe/Berlin"` or `"UTC"`.
        tz: String,
        /// Monthly periods only: the day of the month they start on (1-31, clamped to the
        /// month's last day; default 1).
        anchor: Option<u8>,
    };
    /// Leased partitions (Azure's rate limiting pattern): `total_rate` per second split into
    /// `partitions` equal partitions that processes lease for `lease_ttl` and pace themselves to.
    Partitions = "partitions" => crate::engine::partitions::PartitionsKind {
        /// Units per second of the whole service (at most 1,000,000).
        total_rate: f64,
        /// Equal partitions the rate is split into (1 to [`crate::MAX_PARTITIONS`]).
        partitions: u64,
        /// How long a lease lasts unless renewed: a dead process's partitions return after it.
        lease_ttl: Duration,
        /// Partitions set aside for the priority class (0: none).
        reserved: u64,
        /// Whether this limiter belongs to the priority class: it leases only the reserved
        /// partitions, and the others only the rest.
        priority: bool,
    };
    /// Always allows; touches no backend.
    Unlimited = "unlimited" => crate::engine::unlimited::UnlimitedKind;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::LimiterConfig;
    use crate::error::Error;

    fn message(json: &str) -> String {
        match LimiterConfig::from_json(json) {
            Err(Error::InvalidArgument { message, .. }) => message,
            other => panic!("expected InvalidArgument for {json}, got {other:?}"),
        }
    }

    /// Each kind has one name, found again by it; the JSON form accepts every kind's name.
    #[test]
    fn every_kind_is_found_by_its_one_name() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_name(kind.as_str()), Some(*kind));
            assert!(JSON_NAMES.contains(&kind.as_str()), "{kind:?}");
        }
        let mut names = JSON_NAMES.to_vec();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), JSON_NAMES.len(), "a name is declared twice");
        // `windows` is a name of the JSON form only.
        assert_eq!(Kind::from_name("windows"), None);
    }

    /// Every kind's samples parse to that kind, every name the JSON form accepts has one, and a
    /// kind is refused by `check_all` exactly when its engine has no part in the combined script
    /// (`unlimited` needs none: it always allows).
    #[test]
    fn the_per_kind_facts_agree_with_the_parser_and_the_engines() {
        let mut named = Vec::new();
        for kind in Kind::all() {
            for sample in kind.samples() {
                let config = LimiterConfig::from_json(sample).unwrap_or_else(|e| panic!("{sample}: {e}"));
                assert_eq!(config.spec.kind(), *kind, "{sample}");
                let value: serde_json::Value = serde_json::from_str(sample).unwrap();
                named.push(value["kind"].as_str().unwrap().to_owned());
                let engine = config.spec.compile().unwrap();
                let combined = engine.combined();
                let alone = kind.not_in_check_all().is_some();
                assert_eq!(alone, combined.is_none() && *kind != Kind::Unlimited, "{kind:?}");
            }
        }
        let mut names = JSON_NAMES.to_vec();
        names.sort();
        named.sort();
        assert_eq!(named, names, "one sample per name of the JSON form");
    }

    /// The messages built from the table read as they did when each kind was written out.
    #[test]
    fn messages_built_from_the_table_are_unchanged() {
        assert_eq!(
            message(r#"{"kind":"fountain"}"#),
            "must be one of concurrent, bucket, window, windows, sliding_window, token_bucket, leased, leaky, \
             points, calendar, partitions, unlimited; got \"fountain\""
        );
    }
}
