//! The key a settle ticket names, held without a heap allocation when it is short.
//!
//! Every admitted check of a counting limiter carries a ticket, so the ticket's copy of the key
//! is made on the hot path: a key of up to [`INLINE`] bytes (most keys: user and tenant ids,
//! addresses) is copied into the ticket itself; a longer one is shared behind an `Arc`, so that
//! cloning a decision never copies it again.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use crate::padded::{InlineBytes, KeyBytes};

/// The longest key held inside the ticket: the ticket's key then takes as much room as a shared
/// one (the bytes, their length and the variant's tag fill the width of a wide pointer plus a
/// word).
const INLINE: usize = InlineBytes::MAX;

/// The key of a [`SettleTicket`](crate::SettleTicket): a string, read through `Deref<Target =
/// str>` (`&ticket.key`, `ticket.key.to_string()`, `ticket.key.is_empty()`, …).
#[derive(Clone)]
pub struct SettleKey(Repr);

#[derive(Clone)]
enum Repr {
    Inline(InlineBytes),
    Shared(Arc<str>),
}

impl SettleKey {
    /// The key as a string slice.
    #[inline]
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // The bytes were copied whole from a `str`, so they are UTF-8: the fallback is never
            // taken, and keeps this free of `unsafe`.
            Repr::Inline(bytes) => std::str::from_utf8(bytes.as_bytes()).unwrap_or_default(),
            Repr::Shared(key) => key,
        }
    }
}

impl From<&str> for SettleKey {
    #[inline(always)]
    fn from(key: &str) -> Self {
        SettleKey::inline(key).unwrap_or_else(|| SettleKey::shared(key))
    }
}

impl SettleKey {
    /// `key` held in the ticket itself, when it is short enough.
    #[inline(always)]
    pub(crate) fn inline(key: &str) -> Option<SettleKey> {
        match KeyBytes::new(key.as_bytes()) {
            KeyBytes::Short(bytes) => Some(SettleKey::of_short(bytes)),
            KeyBytes::Long(_) => None,
        }
    }

    /// A key of at most [`INLINE`] bytes, already held in words by the caller (bytes of a
    /// `str`).
    #[inline(always)]
    pub(crate) fn of_short(bytes: InlineBytes) -> SettleKey {
        SettleKey(Repr::Inline(bytes))
    }

    /// A long key, behind an `Arc`: out of line, so that the inline case stays small enough to
    /// be built in place in the decision.
    #[cold]
    #[inline(never)]
    fn shared(key: &str) -> SettleKey {
        SettleKey(Repr::Shared(key.into()))
    }
}

impl From<String> for SettleKey {
    fn from(key: String) -> Self {
        key.as_str().into()
    }
}

impl From<Arc<str>> for SettleKey {
    fn from(key: Arc<str>) -> Self {
        if key.len() <= INLINE {
            key[..].into()
        } else {
            SettleKey(Repr::Shared(key))
        }
    }
}

impl Deref for SettleKey {
    type Target = str;

    #[inline]
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for SettleKey {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for SettleKey {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for SettleKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for SettleKey {}

impl PartialEq<str> for SettleKey {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SettleKey {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Hash for SettleKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `str` hashes, so that `Borrow<str>` lookups find it.
        self.as_str().hash(state)
    }
}

impl fmt::Debug for SettleKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SettleKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys of every length around the inline limit, and multi-byte characters at its edge,
    /// read back as they went in, compare and hash as strings do.
    #[test]
    fn keys_read_back_whole() {
        use std::collections::hash_map::DefaultHasher;
        let hash = |v: &dyn Fn(&mut DefaultHasher)| {
            let mut h = DefaultHasher::new();
            v(&mut h);
            h.finish()
        };
        let mut keys: Vec<String> = (0..=INLINE + 3).map(|n| "k".repeat(n)).collect();
        keys.push(format!("{}é", "a".repeat(INLINE - 2)));
        keys.push(format!("{}é", "a".repeat(INLINE - 1)));
        keys.push("ключ-пользователя-42".into());
        for key in &keys {
            for held in [SettleKey::from(key.as_str()), SettleKey::from(Arc::<str>::from(key.as_str()))] {
                assert_eq!(held.as_str(), key, "length {}", key.len());
                assert_eq!(held, *key.as_str());
                assert_eq!(held.clone(), held);
                assert_eq!(format!("{held:?}"), format!("{key:?}"));
                assert_eq!(hash(&|h| held.hash(h)), hash(&|h| key.as_str().hash(h)));
            }
        }
        assert_ne!(SettleKey::from("a"), SettleKey::from("b"));
        assert_eq!(size_of::<SettleKey>(), size_of::<Arc<str>>() + size_of::<usize>());
    }
}
