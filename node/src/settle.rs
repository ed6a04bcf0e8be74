//! Settle tickets across the boundary: what a decision carries for `limiter.settle(decision,
//! actual)` (`decision.settle`: `{ id, limiter, cost, chargedAtUs, key }`), and reading a
//! decision given back by JavaScript.

use napi_derive::napi;

use crate::args::Js;
use crate::runtime::CoreResult;

/// What `limiter.settle` needs to settle an admitted call with its actual cost, exactly once:
/// present on admitted calls of counting limiters, absent otherwise. It may be stored as JSON
/// (e.g. with a job) and the decision given back later: serialized, it carries a `seal`, without
/// which (or with a field changed) a ticket from outside the process is refused.
#[napi(object, object_from_js = false)]
pub struct SettleTicket {
    /// The settle id made at check time: a settle of one id applies once.
    pub id: f64,
    /// Identifies the limiter that made the decision.
    pub limiter: f64,
    /// The cost the call was charged with.
    pub cost: f64,
    /// When it was charged, in microseconds since the epoch, by the deciding clock.
    pub charged_at_us: f64,
    /// The key the call was charged to (absent: the limiter's shared key).
    pub key: Option<String>,
    /// Present in the ticket's JSON form only (`JSON.stringify` adds it): what proves a ticket
    /// that comes back from outside the process unchanged. A ticket without it, or with any
    /// field changed, is settled only in the process that issued it.
    pub seal: Option<String>,
}

impl SettleTicket {
    /// The JavaScript form of a core ticket.
    pub fn new(t: &ratekeeper::SettleTicket) -> SettleTicket {
        SettleTicket {
            id: t.id as f64,
            limiter: t.limiter as f64,
            cost: t.cost as f64,
            charged_at_us: t.charged_at_micros as f64,
            key: (!t.key.is_empty()).then(|| t.key.to_string()),
            seal: None,
        }
    }
}

/// Reads a decision given back to `settle`: whether it was allowed, its ticket and the ticket's
/// `seal` if it has one (a value that is not a decision is `InvalidArgument` naming
/// `decision`).
pub fn decision_from_js(value: Option<Js>) -> CoreResult<(ratekeeper::Decision, Option<String>)> {
    let obj = crate::args::required(value, "decision")?.object("decision")?;
    let allowed = obj.get(c"allowed").ok_or_else(|| bad("no `allowed`"))?.boolean("decision")?;
    let zero = std::time::Duration::ZERO;
    let mut decision = ratekeeper::Decision::from_parts(allowed, 0, 0, zero, zero);
    let mut seal = None;
    if let Some(ticket) = obj.get(c"settle") {
        let (read, sealed) = ticket_from_js(ticket)?;
        decision.settle = Some(read);
        seal = sealed;
    }
    Ok((decision, seal))
}

/// Reads a settle ticket (`{ id, limiter, cost, chargedAtUs, key?, seal? }`) and its seal.
pub fn ticket_from_js(ticket: Js) -> CoreResult<(ratekeeper::SettleTicket, Option<String>)> {
    let ticket = ticket.object("decision")?;
    let whole = |name: &std::ffi::CStr| -> CoreResult<u64> {
        let n = ticket.get(name).map(|v| v.number("decision")).transpose()?.unwrap_or(-1.0);
        if !(n.is_finite() && n >= 0.0 && n.fract() == 0.0) {
            return Err(bad("its `settle` needs whole numbers `id`, `limiter`, `cost` and `chargedAtUs`"));
        }
        Ok(n as u64)
    };
    let (id, limiter, cost, at) = (whole(c"id")?, whole(c"limiter")?, whole(c"cost")?, whole(c"chargedAtUs")?);
    let key = ticket.get(c"key").map(|k| k.string("key")).transpose()?.unwrap_or_default();
    let seal = ticket.get(c"seal").map(|s| s.string("decision")).transpose()?;
    Ok((ratekeeper::SettleTicket::from_parts(&key, cost, at, id, limiter), seal))
}

/// The error of a value that is not a decision.
fn bad(why: &str) -> ratekeeper::Error {
    ratekeeper::Error::invalid("decision", format!("must be a decision from check or acquire: {why}"))
}
