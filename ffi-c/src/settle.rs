//! `rk_limiter_settle`: settling an admitted call with its actual cost, exactly once.

use std::os::raw::c_char;

use ratekeeper::{Decision, SettleTicket};

use crate::args::{arg_opt_str, arg_ref, Out};
use crate::calls::rk_decision;
use crate::error::rk_status;
use crate::limiter::rk_limiter;
use crate::panic::ffi_status;

/// The core decision `decision` stands for, with its settle ticket for `key`.
fn core_decision(decision: &rk_decision, key: Option<&str>) -> Decision {
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
///         unlimited limiter, or another limiter's; naming `actual` above 2^53),
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
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let key = arg_opt_str("key", key)?;
        let decision = core_decision(arg_ref("decision", decision)?, key);
        out.write(rk_decision::from(&limiter.settle_blocking(&decision, actual)?));
        Ok(())
    }
}
