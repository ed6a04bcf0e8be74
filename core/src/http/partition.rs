//! The draft-11 `pk` parameter (partition key) of the `RateLimit` field. The field is visible to
//! the client, so it never carries the key itself (an IP address, a user id) but a keyed hash of
//! it: the first [`PK_BYTES`] bytes of HMAC-SHA256(secret, key), in base64. An unkeyed hash would
//! not hide it (every IPv4 address can be hashed in minutes). One secret and key give one `pk` in
//! every language, so a client sees one partition across a fleet of them.

use base64::Engine as _;
use ring::hmac;

use crate::error::{Error, Result};

/// The shortest secret accepted, in bytes (128 bits).
pub const MIN_SECRET_BYTES: usize = 16;
/// How much of the HMAC is sent, in bytes.
pub const PK_BYTES: usize = 16;

/// A partition-key secret, validated. Its `Debug` form never shows it.
#[derive(Clone)]
pub struct PartitionKey {
    key: hmac::Key,
}

impl std::fmt::Debug for PartitionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PartitionKey(..)")
    }
}

impl PartitionKey {
    /// Refuses a secret shorter than [`MIN_SECRET_BYTES`], naming `partition_key_secret` (never
    /// showing it).
    pub fn new(secret: &[u8]) -> Result<PartitionKey> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(Error::invalid(
                "partition_key_secret",
                format!("must be at least {MIN_SECRET_BYTES} bytes, got {}", secret.len()),
            ));
        }
        Ok(PartitionKey { key: hmac::Key::new(hmac::HMAC_SHA256, secret) })
    }

    /// The `pk` of `key`: base64 of the first [`PK_BYTES`] bytes of HMAC-SHA256(secret, key).
    pub fn of(&self, key: &str) -> String {
        let tag = hmac::sign(&self.key, key.as_bytes());
        base64::engine::general_purpose::STANDARD.encode(&tag.as_ref()[..PK_BYTES])
    }
}
