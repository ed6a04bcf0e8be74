//! `rk_limiter_settle`: settling an admitted call with its actual cost, exactly once.

use std::os::raw::c_char;

use ratekeeper::{Decision, SettleTicket};

use crate::args::{arg_opt_str, arg_ref, Out};
use crate::calls::rk_decision;
use crate::error::rk_status;
use crate::limiter::rk_limiter;
use crate::panic::ffi_status;

/// The limiter and the core decision (with its settle ticket for `key`) a settle call names.
fn settle_args<'a>(
    limiter: *const rk_limiter,
    key: *const c_char,
    decision: *const rk_decision,
) -> Result<(&'a ratekeeper::Limiter, Decision), crate::error::Failure> {
    let limiter = &arg_ref("limiter", limiter)?.inner;
    let key = arg_opt_str("key", key)?;
    Ok((limiter, core_decision(arg_ref("decision", decision)?, key)))
}

/// The core decision `decision` stands for, with its settle ticket for `key`.
pub(crate) fn core_decision(decision: &rk_decision, key: Option<&str>) -> Decision {
    let mut d = Decision::from_parts(
        decision.allowed,
        decision.limit,
        decision.remaining,
        std::time::Duration::from_micros(decision.retry_after_us),
        std::time::Duration::from_micros(decision.reset_after_us),
    );
    let t = &decision.settle;
    if t.settleable {
        d.settle = Some(SettleTicket::from_parts(key.unwrap_or(""), t.cost, t.charged_at_us, t.id, t.limiter));
    }
    d
}

/// \brief Settles an admitted call, checked with an estimated cost, to its `actual` cost: the
/// difference is charged or refunded exactly once, however often the same decision is settled
/// (a retry after #RK_TIMEOUT is safe).
///
/// A charge applies even past the limit (later calls wait the debt out); a refund never gives
/// back more than the call took, nor to a window that has rolled over.
///
/// \param limiter The limiter that made the decision.
/// \param key The key the call was checked with, or NULL for the limiter's single shared key.
/// \param decision The decision `rk_limiter_check` or `rk_limiter_acquire` returned.
/// \param actual What the call really cost (0..=2^53).
/// \param decision_out Receives the state after the settle, as a peek reports it.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8, #RK_INVALID_ARGUMENT (naming
///         `decision` for a decision that cannot be settled: refused, of a concurrent or
///         unlimited limiter, another limiter's, older than the settle window (an hour), or
///         charged more than the limiter's capacity; naming `actual` above 2^53),
///         #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_limiter_settle(
    limiter: *const rk_limiter,
    key: *const c_char,
    decision: *const rk_decision,
    actual: u64,
    decision_out: *mut rk_decision,
) -> rk_status {
    ffi_status! {
        let out = Out::new("decision_out", decision_out)?;
        let (limiter, decision) = settle_args(limiter, key, decision)?;
        out.write(rk_decision::from(&limiter.settle_blocking(&decision, actual)?));
        Ok(())
    }
}

/// \brief The seal of a settle ticket (see #rk_limiter_seal_ticket): 64 lowercase hex digits
/// and a terminating NUL.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rk_settle_seal {
    /// The seal, NUL-terminated.
    pub hex: [c_char; 65],
}

/// \brief The seal of `decision`'s settle ticket, for a ticket stored outside the process (a
/// job's arguments, a queue message): store it with the ticket's fields and pass it to
/// #rk_limiter_settle_sealed, in any process on the same backend (on Redis: the same Redis and
/// key prefix, whose shared secret the first seal reads or creates there).
///
/// \param limiter The limiter that made the decision.
/// \param key The key the call was checked with, or NULL for the limiter's single shared key.
/// \param decision The decision `rk_limiter_check` or `rk_limiter_acquire` returned.
/// \param seal_out Receives the seal.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8, #RK_INVALID_ARGUMENT (naming
///         `decision` for a decision without a ticket or of another limiter),
///         #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_limiter_seal_ticket(
    limiter: *const rk_limiter,
    key: *const c_char,
    decision: *const rk_decision,
    seal_out: *mut rk_settle_seal,
) -> rk_status {
    ffi_status! {
        let out = Out::new("seal_out", seal_out)?;
        let (limiter, decision) = settle_args(limiter, key, decision)?;
        let Some(ticket) = &decision.settle else {
            return Err(ratekeeper::Error::invalid("decision", "carries no settle ticket (`settle.settleable` is false)").into());
        };
        let sealed = limiter.seal_blocking(ticket)?;
        let mut hex = [0 as c_char; 65];
        for (slot, byte) in hex.iter_mut().zip(sealed.bytes()) {
            *slot = byte as c_char;
        }
        out.write(rk_settle_seal { hex });
        Ok(())
    }
}

/// \brief #rk_limiter_settle for a decision rebuilt from data stored outside the process, with
/// the seal #rk_limiter_seal_ticket gave for it: settled only if the seal matches the ticket
/// and `key` (a field changed, a ticket made up, or a seal of another Redis or prefix is
/// #RK_INVALID_ARGUMENT naming `decision`, and nothing is written).
///
/// \param limiter The limiter that made the decision.
/// \param key The key the call was checked with, or NULL for the limiter's single shared key.
/// \param decision The rebuilt decision.
/// \param actual What the call really cost (0..=2^53).
/// \param seal The ticket's seal (64 hex digits, NUL-terminated).
/// \param decision_out Receives the state after the settle, as a peek reports it.
/// \return As #rk_limiter_settle.
#[no_mangle]
pub extern "C" fn rk_limiter_settle_sealed(
    limiter: *const rk_limiter,
    key: *const c_char,
    decision: *const rk_decision,
    actual: u64,
    seal: *const c_char,
    decision_out: *mut rk_decision,
) -> rk_status {
    ffi_status! {
        let out = Out::new("decision_out", decision_out)?;
        let (limiter, decision) = settle_args(limiter, key, decision)?;
        let seal = crate::args::arg_str("seal", seal)?;
        out.write(rk_decision::from(&limiter.settle_sealed_blocking(&decision, actual, seal)?));
        Ok(())
    }
}
