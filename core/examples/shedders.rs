//! The README's load-shedding example (Stripe's fleet usage and worker utilization shedders).
//! `cargo run -p ratekeeper --example shedders`.
use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{Backend, ErrorKind, FleetShedder, SystemClock, UtilizationConfig, UtilizationShedder};

struct Request {
    critical: bool,
}

fn main() -> Result<(), ratekeeper::Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let backend = Backend::redis(&url)?;

    // Fleet usage: non-critical requests share 200 slots across the fleet; critical ones bypass.
    let fleet = FleetShedder::new(&backend, "fleet", 200, Duration::from_secs(60))?;
    let request = Request { critical: false };
    let ticket = fleet.enter_blocking(request.critical)?; // Error::Shed once the 200 are taken
    handle(&request);
    fleet.leave_blocking(ticket)?;

    // Worker utilization: in-process, driven by a signal you sample (0 = idle, 1 = every worker busy).
    let shedder = UtilizationShedder::new(UtilizationConfig::default(), Arc::new(SystemClock))?;
    let (busy_workers, workers) = (3, 8);
    shedder.observe(busy_workers as f64 / workers as f64)?;
    let priority = 3; // 0 = critical (never shed) … 3 = least important (shed first)
    match shedder.check(priority) {
        Ok(()) => println!("priority {priority}: admitted"),
        Err(e) if e.kind() == ErrorKind::Shed => println!("priority {priority}: shed (HTTP 503)"),
        Err(e) => return Err(e),
    }
    Ok(())
}

fn handle(_request: &Request) {}
