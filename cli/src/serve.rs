//! `ratekeeper serve`: the Limits page, a JSON API and Prometheus `/metrics`.

use ratekeeper::Backend;

use crate::cli::ServeArgs;
use crate::ops::Failure;

/// Serves until the process is stopped.
pub fn serve(_backend: Backend, _args: &ServeArgs) -> Result<(), Failure> {
    Err(Failure::Io("serve: not yet".into()))
}
