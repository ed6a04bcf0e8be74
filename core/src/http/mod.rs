//! The rules every HTTP middleware applies the same way, whatever its language or framework:
//! which client a request counts as ([`ClientKeys`]: the peer address, IPv6 grouped by /56, and
//! the proxy header only behind trusted proxies), the rate-limit header fields of the limiters
//! that decided it ([`fields`]: draft-11 and the older forms), and the draft-11 partition key
//! ([`PartitionKey`]). [`Rules`] holds one middleware's validated options of all three.
//!
//! No framework code lives here: a middleware reads its framework's request (peer address, one
//! header), asks its limiters, hands their decisions to [`Rules::fields`] and writes what comes
//! back. The shared cases every binding runs are `tests/http/cases.json`.

mod client;
pub(crate) mod fields;
mod partition;

use std::time::Duration;

pub use client::{ClientKeys, ProxyHeader};
pub use fields::{http_seconds, sf_string, HeaderForm, Report, ReportLimit};
pub use partition::{PartitionKey, MIN_SECRET_BYTES, PK_BYTES};

use crate::error::{Error, Result};

/// One middleware's validated HTTP options: the header form, the client-address rule and the
/// partition key. Built once, when the middleware is; cheap to use per request.
#[derive(Debug, Clone)]
pub struct Rules {
    form: Option<HeaderForm>,
    clients: ClientKeys,
    partition: Option<PartitionKey>,
}

impl Rules {
    /// Validates the options, naming the bad one: `headers` (a form name, `None`: no
    /// rate-limit fields), `trusted_proxies` (IP addresses or CIDR ranges), `proxy_header`
    /// (`X-Forwarded-For` or `Forwarded`, any case) and `partition_key_secret` (at least
    /// [`MIN_SECRET_BYTES`] bytes, draft-11 only). No error shows the secret.
    pub fn new<S: AsRef<str>>(
        headers: Option<&str>,
        trusted_proxies: &[S],
        proxy_header: &str,
        partition_key_secret: Option<&[u8]>,
    ) -> Result<Rules> {
        let form = headers.map(|name| HeaderForm::from_name("headers", name)).transpose()?;
        let clients = ClientKeys::new(trusted_proxies, proxy_header)?;
        let partition = match partition_key_secret {
            None => None,
            Some(_) if form != Some(HeaderForm::Draft11) => {
                return Err(Error::invalid(
                    "partition_key_secret",
                    "applies only to the draft-11 header form (pk is a draft-11 parameter)",
                ))
            }
            Some(secret) => Some(PartitionKey::new(secret)?),
        };
        Ok(Rules { form, clients, partition })
    }

    /// The header form (`None`: no rate-limit fields).
    pub fn form(&self) -> Option<HeaderForm> {
        self.form
    }

    /// The client-address rule.
    pub fn clients(&self) -> &ClientKeys {
        &self.clients
    }

    /// The key a request from `peer` is counted under when the application gives none; see
    /// [`ClientKeys::key`].
    pub fn client_key(&self, peer: Option<&str>, proxy_header_value: Option<&str>) -> String {
        self.clients.key(peer, proxy_header_value)
    }

    /// The rate-limit fields of a request counted under `key` that `reports` decided, in the
    /// middleware's form, with draft-11's `pk` when a secret was given; none without a form.
    pub fn fields(&self, reports: &[Report<'_>], key: &str) -> Vec<(&'static str, String)> {
        let Some(form) = self.form else { return Vec::new() };
        let pk = self.partition.as_ref().map(|p| p.of(key));
        fields::render(form, reports, pk.as_deref())
    }
}

/// Seconds (a binding's float) as a duration; negative or not a number is zero.
pub fn duration_of_secs(seconds: f64) -> Duration {
    if seconds.is_finite() && seconds > 0.0 {
        Duration::from_micros((seconds * 1e6).round() as u64)
    } else {
        Duration::ZERO
    }
}
