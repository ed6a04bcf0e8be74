//! Seals on settle tickets that leave the process: an HMAC-SHA256 (ring's) of every field of a
//! ticket, keyed by a secret of the backend, so that a ticket carried as plain data (JSON in a
//! job, a queue message) is settled only as it was issued. Without it, a crafted ticket could
//! name another tenant's key, a cost it was never charged, or a fresh id, and refund that
//! tenant to full or push it into debt.
//!
//! The secret is one per Redis key prefix, kept in Redis beside the registry (created once,
//! read and cached by every process of the fleet: any of them settles what another sealed),
//! and one per memory backend, random (a memory backend's tickets never leave its process).

use ring::hmac;

use crate::decision::SettleTicket;

/// The secret's length in bytes: as long as the hash's output, as RFC 2104 recommends.
pub(crate) const SECRET_BYTES: usize = 32;

/// A backend's key for sealing tickets.
pub(crate) struct SealKey(hmac::Key);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret is never printed.
        f.write_str("SealKey(..)")
    }
}

impl SealKey {
    /// The key of `secret`.
    pub(crate) fn new(secret: &[u8]) -> SealKey {
        SealKey(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }

    /// A key of a fresh random secret, and the secret.
    pub(crate) fn random() -> (SealKey, [u8; SECRET_BYTES]) {
        let secret = random_secret();
        (SealKey::new(&secret), secret)
    }

    /// The seal of `ticket`: 64 lowercase hex digits.
    pub(crate) fn seal(&self, ticket: &SettleTicket) -> String {
        hmac::sign(&self.0, &message(ticket)).as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `seal` is `ticket`'s (compared in constant time).
    pub(crate) fn verifies(&self, ticket: &SettleTicket, seal: &str) -> bool {
        match from_hex(seal) {
            Some(tag) => hmac::verify(&self.0, &message(ticket), &tag).is_ok(),
            None => false,
        }
    }
}

/// A fresh random secret from the operating system's generator.
pub(crate) fn random_secret() -> [u8; SECRET_BYTES] {
    use ring::rand::SecureRandom;
    let mut secret = [0u8; SECRET_BYTES];
    // The system generator fails only where no entropy source exists at all; the process's
    // hasher seed and the clock are the last resort there, so that sealing still works.
    if ring::rand::SystemRandom::new().fill(&mut secret).is_err() {
        use std::hash::BuildHasher;
        for (i, chunk) in secret.chunks_mut(8).enumerate() {
            let word = foldhash::fast::RandomState::default().hash_one((i, std::time::SystemTime::now()));
            chunk.copy_from_slice(&word.to_le_bytes()[..chunk.len()]);
        }
    }
    secret
}

/// What a seal covers: a version, then every field of the ticket at a fixed width, the key last
/// (its length is implied by the message's).
fn message(ticket: &SettleTicket) -> Vec<u8> {
    let mut m = Vec::with_capacity(1 + 4 * 8 + ticket.key.len());
    m.push(1);
    for field in [ticket.limiter, ticket.id, ticket.cost, ticket.charged_at_micros] {
        m.extend_from_slice(&field.to_be_bytes());
    }
    m.extend_from_slice(ticket.key.as_bytes());
    m
}

/// The bytes of `hex` (two lowercase or uppercase digits each), if it is hex.
fn from_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seal verifies its own ticket, and no ticket with any one field changed, nor under
    /// another secret.
    #[test]
    fn a_seal_covers_every_field() {
        let (key, _) = SealKey::random();
        let ticket = SettleTicket::from_parts("tenant-7", 100, 1_700_000_000_000_000, 42, 9);
        let seal = key.seal(&ticket);
        assert_eq!(seal.len(), 64);
        assert!(key.verifies(&ticket, &seal));
        assert!(key.verifies(&ticket, &seal.to_uppercase()));
        for other in [
            SettleTicket::from_parts("tenant-8", 100, 1_700_000_000_000_000, 42, 9),
            SettleTicket::from_parts("tenant-7", 101, 1_700_000_000_000_000, 42, 9),
            SettleTicket::from_parts("tenant-7", 100, 1_700_000_000_000_001, 42, 9),
            SettleTicket::from_parts("tenant-7", 100, 1_700_000_000_000_000, 43, 9),
            SettleTicket::from_parts("tenant-7", 100, 1_700_000_000_000_000, 42, 8),
        ] {
            assert!(!key.verifies(&other, &seal), "{other:?}");
        }
        assert!(!SealKey::random().0.verifies(&ticket, &seal), "another secret");
        assert!(!key.verifies(&ticket, "zz"), "not hex");
        assert!(!key.verifies(&ticket, &seal[..62]), "cut short");
    }
}
