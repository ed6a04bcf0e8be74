//! The one error taxonomy shared by every limiter, backend and language binding.

use std::borrow::Cow;
use std::time::Duration;

/// Result type of every fallible ratekeeper call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in ratekeeper.
///
/// Bindings map each variant in one place: Python raises a subclass of `RatekeeperError`,
/// Node throws an `Error` with a stable `code`, C returns a status. New variants may be added,
/// so match with a wildcard arm.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The limit is reached and waiting (if any) did not help. `retry_after` is the exact time
    /// until the same call could succeed, as judged at the moment it was refused.
    #[error("over limit: retry after {:.6}s", retry_after.as_secs_f64())]
    OverLimit {
        /// Time until the refused call could succeed.
        retry_after: Duration,
    },
    /// A load shedder dropped the call to protect the service (HTTP 503, not 429).
    #[error("shed: {reason}")]
    Shed {
        /// Which shedder refused and why.
        reason: String,
    },
    /// A concurrency lease was released or extended after it had been reclaimed or expired.
    #[error("lease lost: {message}")]
    LeaseLost {
        /// What happened to the lease.
        message: String,
    },
    /// A parameter is out of range or malformed; nothing was written.
    #[error("invalid argument `{parameter}`: {message}")]
    InvalidArgument {
        /// The parameter's name as the caller spelled it (`cost`, `name`, `interval`, ...), or
        /// the path of a field in a JSON spec (`windows[1]`, `lock_timeout`).
        parameter: Cow<'static, str>,
        /// What is wrong with it.
        message: String,
    },
    /// The backend could not answer (Redis down, memory backend full, ...).
    #[error("backend unavailable: {message}")]
    BackendUnavailable {
        /// The underlying cause.
        message: String,
    },
    /// A backend call did not finish within its deadline.
    #[error("timed out: {message}")]
    Timeout {
        /// What timed out.
        message: String,
    },
    /// Redis answered, refusing the call for a reason an operator must fix: an ACL without the
    /// permission (`NOPERM`), a wrong password (`WRONGPASS`), memory full under `noeviction`
    /// (`OOM`), a script error (`WRONGTYPE`, `ERR`). Never covered by the failure policy: failing
    /// open on it would admit every call, silently, until someone looks. Counted in
    /// [`crate::BackendStats::rejected`].
    #[error("backend rejected the call ({code}): {message}")]
    BackendRejected {
        /// The Redis error code (`NOPERM`, `WRONGPASS`, `OOM`, `WRONGTYPE`, `ERR`, ...).
        code: String,
        /// Redis's message.
        message: String,
    },
}

/// The kind of an [`Error`], without its payload; stable names for bindings and vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// See [`Error::OverLimit`].
    OverLimit,
    /// See [`Error::Shed`].
    Shed,
    /// See [`Error::LeaseLost`].
    LeaseLost,
    /// See [`Error::InvalidArgument`].
    InvalidArgument,
    /// See [`Error::BackendUnavailable`].
    BackendUnavailable,
    /// See [`Error::Timeout`].
    Timeout,
    /// See [`Error::BackendRejected`].
    BackendRejected,
}

impl ErrorKind {
    /// The snake_case name used by the conformance vectors and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::OverLimit => "over_limit",
            ErrorKind::Shed => "shed",
            ErrorKind::LeaseLost => "lease_lost",
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::BackendUnavailable => "backend_unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::BackendRejected => "backend_rejected",
        }
    }
}

impl Error {
    /// Builds an [`Error::InvalidArgument`] naming `parameter`.
    pub fn invalid(parameter: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidArgument { parameter: Cow::Borrowed(parameter), message: message.into() }
    }

    /// Builds an [`Error::InvalidArgument`] naming a field of a spec document by its path.
    pub fn invalid_field(path: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidArgument { parameter: Cow::Owned(path.into()), message: message.into() }
    }

    /// The [`Error::Timeout`] of a Redis call that got no answer within `deadline`: one message
    /// whatever the call was waiting for (a connection, its reply) and whichever path it took,
    /// naming where it waited (`servers`: `host:port`, never the URL, which may hold a password).
    pub(crate) fn redis_timeout(deadline: Duration, servers: &str) -> Self {
        Error::Timeout {
            message: format!(
                "Redis at {servers} did not answer within {deadline:?}; is it reachable from here and not \
                 overloaded? A slow link needs a longer deadline"
            ),
        }
    }

    /// The [`Error::LeaseLost`] of a lease that is no longer held.
    pub(crate) fn lease_lost() -> Self {
        Error::LeaseLost {
            message:
                "the lease is no longer held: it outlived lock_timeout and was reclaimed, or the limiter was reset"
                    .into(),
        }
    }

    /// The payload-free kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::OverLimit { .. } => ErrorKind::OverLimit,
            Error::Shed { .. } => ErrorKind::Shed,
            Error::LeaseLost { .. } => ErrorKind::LeaseLost,
            Error::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            Error::BackendUnavailable { .. } => ErrorKind::BackendUnavailable,
            Error::Timeout { .. } => ErrorKind::Timeout,
            Error::BackendRejected { .. } => ErrorKind::BackendRejected,
        }
    }

    /// True for [`Error::OverLimit`].
    pub fn is_over_limit(&self) -> bool {
        matches!(self, Error::OverLimit { .. })
    }

    /// The time until a refused call could succeed, for [`Error::OverLimit`].
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::OverLimit { retry_after } => Some(*retry_after),
            _ => None,
        }
    }

    /// The offending parameter, for [`Error::InvalidArgument`].
    pub fn parameter(&self) -> Option<&str> {
        match self {
            Error::InvalidArgument { parameter, .. } => Some(parameter),
            _ => None,
        }
    }
}
