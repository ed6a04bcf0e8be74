//! `ratekeeper run NAME -- COMMAND`: a command under a fleet-wide limit (a mutex by default).
//!
//! Acquire, spawn the command, keep the lease alive while it runs, pass SIGINT and SIGTERM on,
//! release when it ends, and exit with its code.

use std::process::ExitStatus;
use std::time::Duration;

use ratekeeper::{Backend, Error, Lease, Limiter, LimiterSpec};
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::RunArgs;
use crate::ops::{duration_arg, Failure};

/// The spec `run` uses without `--spec`: one holder at a time in the whole fleet, and a lease a
/// crashed holder leaves behind is reclaimable after a minute.
pub const DEFAULT_SPEC: &str = r#"{"kind":"concurrent","limit":1,"lock_timeout":60}"#;

/// EX_TEMPFAIL (sysexits.h): the limit was reached; try again later.
pub const EXIT_OVER_LIMIT: u8 = 75;

/// The shells' code for a command that cannot be found or executed.
const EXIT_CANNOT_EXECUTE: u8 = 127;

/// Runs the command under the limit and returns the exit code to leave with.
pub async fn run(backend: &Backend, args: &RunArgs) -> Result<u8, Failure> {
    let wait = duration_arg("wait", args.wait)?;
    let limiter = backend.limiter_from_json(&args.name, args.spec.as_deref().unwrap_or(DEFAULT_SPEC))?;
    let key = args.key.as_deref();
    let decision = match limiter.acquire(key, 1, Some(wait)).await {
        Ok(decision) => decision,
        Err(Error::OverLimit { retry_after }) => {
            eprintln!(
                "ratekeeper: {:?} is over its limit (retry after {:.3} s); the command was not run",
                args.name,
                retry_after.as_secs_f64()
            );
            return Ok(EXIT_OVER_LIMIT);
        }
        Err(e) => return Err(e.into()),
    };
    let lease = decision.lease;
    // Register the limiter now, so `limits` and the page list it while the command runs (the
    // background task would within a second; a failure here changes nothing for the command).
    let _ = backend.flush().await;
    let outcome = supervise(&limiter, key, lease.as_ref(), &args.command).await;
    if let Some(lease) = &lease {
        if let Err(e) = limiter.release(key, lease).await {
            // The command has run; say that its slot may have been shared, but keep its code.
            eprintln!("ratekeeper: releasing the lease of {:?}: {e}", args.name);
        }
    }
    // The counts of this short-lived process would otherwise wait for the next second's flush.
    let _ = backend.flush().await;
    outcome
}

/// Spawns the command and waits for it, extending the lease and forwarding signals meanwhile.
async fn supervise(
    limiter: &Limiter,
    key: Option<&str>,
    lease: Option<&Lease>,
    command: &[String],
) -> Result<u8, Failure> {
    let io = |e: std::io::Error| Failure::Io(format!("listening for signals: {e}"));
    let mut terminate = signal(SignalKind::terminate()).map_err(io)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(io)?;
    let mut child = match tokio::process::Command::new(&command[0]).args(&command[1..]).spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("ratekeeper: cannot run {:?}: {e}", command[0]);
            return Ok(EXIT_CANNOT_EXECUTE);
        }
    };
    // Renew at half the lock_timeout, so a long command keeps its slot with one renewal's worth
    // of margin against a slow Redis.
    let lock_timeout = match limiter.spec() {
        LimiterSpec::Concurrent { lock_timeout, .. } => Some(*lock_timeout),
        _ => None,
    };
    let mut renew = match (lease, lock_timeout) {
        (Some(_), Some(timeout)) => {
            let every = (timeout / 2).max(Duration::from_millis(10));
            Some(tokio::time::interval_at(tokio::time::Instant::now() + every, every))
        }
        _ => None,
    };
    let status: ExitStatus = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(|e| Failure::Io(format!("waiting for the command: {e}")))?,
            _ = terminate.recv() => forward(&child, libc::SIGTERM),
            _ = interrupt.recv() => forward(&child, libc::SIGINT),
            _ = async { match renew.as_mut() { Some(tick) => tick.tick().await, None => std::future::pending().await } } => {
                if let Err(e) = limiter.extend(key, lease.expect("renewing a lease")).await {
                    eprintln!("ratekeeper: extending the lease: {e}");
                    // A lost lease cannot be won back; a failed renewal is retried next tick.
                    if matches!(e, Error::LeaseLost { .. }) {
                        renew = None;
                    }
                }
            }
        }
    };
    Ok(exit_code(status))
}

/// Passes a signal on to the command; it decides how to end, and `run` waits for it.
fn forward(child: &tokio::process::Child, signal: libc::c_int) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) has no memory effects; the pid is our own child, not yet reaped.
        unsafe {
            libc::kill(pid as libc::pid_t, signal);
        }
    }
}

/// The command's exit code, or 128 + the signal that ended it (the shells' convention).
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => (128 + signal) as u8,
        (None, None) => 1,
    }
}
