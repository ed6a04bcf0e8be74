//! What `ratekeeper serve` refuses: requests that name a host it does not serve (DNS
//! rebinding), before anything else, and Redis reads beyond a bound on how many run at once.
//!
//! DNS rebinding: a page the operator visits at `http://evil.example/` can make its name resolve
//! to 127.0.0.1 and then read this server as a same-origin page — the browser still sends
//! `Host: evil.example`. Checking the Host header closes that door: only the listen address, a
//! loopback name or address, and the names given with `--allow-host` are served.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::ops::printable;

/// How many requests read or write Redis at once; the rest are answered 503 at once (the page
/// retries on its next tick) rather than queued behind Redis reads. Only the Redis work holds a
/// slot: a client slow to send its request holds none.
pub const MAX_IN_FLIGHT: usize = 16;

/// The slots of [`MAX_IN_FLIGHT`].
#[derive(Clone)]
pub struct Slots(Arc<Semaphore>);

impl Default for Slots {
    fn default() -> Slots {
        Slots(Arc::new(Semaphore::new(MAX_IN_FLIGHT)))
    }
}

impl Slots {
    /// A slot for one request's Redis work, or the 503 to answer when none is free.
    pub fn take(&self) -> Result<OwnedSemaphorePermit, Box<Response>> {
        self.0.clone().try_acquire_owned().map_err(|_| {
            let message = format!("{MAX_IN_FLIGHT} requests are reading Redis: try again in a second");
            let mut response = refusal(StatusCode::SERVICE_UNAVAILABLE, "busy", None, message);
            response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            Box::new(response)
        })
    }
}

/// The hosts a request may name.
#[derive(Clone)]
pub struct Guard {
    /// The address the server listens on.
    listen: IpAddr,
    /// `--allow-host` names, lowercased, without a trailing dot.
    allowed: Arc<Vec<String>>,
}

impl Guard {
    pub fn new(listen: SocketAddr, allowed: &[String]) -> Guard {
        Guard { listen: listen.ip(), allowed: Arc::new(allowed.iter().map(|h| normalize(h)).collect()) }
    }

    /// Whether a request naming `host` (a Host header: a name or address, maybe with a port) is
    /// served.
    pub fn allows(&self, host: &str) -> bool {
        let name = normalize(strip_port(host));
        if name == "localhost" || self.allowed.contains(&name) {
            return true;
        }
        // An address cannot be rebound (the page's origin would be that address itself), but
        // only the ones that reach this server are expected: loopback, the listen address, and
        // any address when listening on all of them.
        let bare = name.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            Ok(ip) => ip.is_loopback() || ip == self.listen || self.listen.is_unspecified(),
            Err(_) => false,
        }
    }
}

/// Checks an `--allow-host` value: a host name or an IP address, without scheme, port or path.
pub fn validate_allowed_host(value: &str) -> Result<String, String> {
    let name = value.trim_end_matches('.');
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<IpAddr>().is_ok() {
        return Ok(value.to_owned());
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!(
            "must be a host name or an IP address as a browser sends it in Host (e.g. ops.example.com), \
             without scheme, port or path; got {:?}",
            printable(value)
        ));
    }
    Ok(value.to_owned())
}

/// `host` without its `:port` (an IPv6 address keeps its brackets).
fn strip_port(host: &str) -> &str {
    if let Some(end) = host.find(']') {
        return &host[..=end];
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

fn normalize(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// An error as the API answers it (see `serve::ApiError`).
fn refusal(status: StatusCode, kind: &str, parameter: Option<&str>, message: String) -> Response {
    let body = json!({ "error": { "kind": kind, "parameter": parameter, "message": message } });
    (status, Json(body)).into_response()
}

/// Refuses a request whose Host is not served (403), before any handler runs.
pub async fn guard(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !guard.allows(host) {
        let message = format!(
            "Host {:?} is not this server's address: requests must name the listen address or a \
             loopback name, or a name given with `--allow-host` (this refuses DNS rebinding)",
            printable(host)
        );
        return refusal(StatusCode::FORBIDDEN, "host_not_allowed", Some("Host"), message);
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_served() {
        let local = Guard::new("127.0.0.1:9090".parse().unwrap(), &["Ops.Example.com.".into()]);
        for ok in ["127.0.0.1:9090", "localhost:9090", "LOCALHOST", "[::1]:9090", "127.0.0.2", "ops.example.com:80"] {
            assert!(local.allows(ok), "{ok}");
        }
        for refused in
            ["evil.example", "evil.example:9090", "", "10.0.0.5:9090", "localhost.evil.example", "ops.example.com.evil"]
        {
            assert!(!local.allows(refused), "{refused}");
        }
        let everywhere = Guard::new("0.0.0.0:9090".parse().unwrap(), &[]);
        assert!(everywhere.allows("10.0.0.5:9090") && everywhere.allows("[fe80::1]:9090"));
        assert!(!everywhere.allows("evil.example:9090"));
    }

    #[test]
    fn allow_host_values() {
        for ok in ["ops.example.com", "ops", "10.1.2.3", "::1", "[::1]", "ops.example.com."] {
            assert!(validate_allowed_host(ok).is_ok(), "{ok}");
        }
        for bad in ["", "http://ops", "ops:9090", "ops/x", "a b", "-ops", "ops..example", "o\u{1b}[31m"] {
            assert!(validate_allowed_host(bad).is_err(), "{bad}");
        }
    }
}
