//! Redis key layout: `<prefix>:{<tag>}:<kind>:<name>:<role>:<key>`.
//!
//! - The hash tag comes first, before any user-supplied text, so a `{` or `}` inside a key can
//!   never move it; every key of one check shares it, so one script's keys live in one Cluster
//!   slot. It is a hash of (kind, name, key), so identities spread over all slots; a limiter
//!   that co-locates (see [`Colocate::Tenant`]) takes it from the key's tenant alone, so every
//!   co-located limiter's keys of one tenant share a slot (what `check_all` needs on a Cluster).
//! - The layout is injective: prefix, kind and name contain no `:` (names are `[A-Za-z0-9_-]`,
//!   prefixes are validated), and the role is a fixed token before the key, so the key is simply
//!   the rest of the string.

use crate::engine::{Colocate, Kind};
use crate::error::{Error, Result};

/// Checks a key prefix: 1..64 characters from `[A-Za-z0-9_.-]` (no `:`, `{` or `}`).
pub(crate) fn validate_prefix(prefix: &str) -> Result<()> {
    let ok = !prefix.is_empty()
        && prefix.len() <= 64
        && prefix.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid("prefix", format!("must be 1 to 64 characters from [A-Za-z0-9_.-], got {prefix:?}")))
    }
}

/// FNV-1a, 64 bits: stable across versions, platforms and languages (unlike std's hashers).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.iter().chain(std::iter::once(&0xff)) {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

/// Builds the keys of one (kind, name, key) identity.
#[derive(Debug)]
pub(crate) struct KeyBuilder<'k> {
    /// `<prefix>:{<tag>}:<kind>:<name>:`
    head: String,
    key: &'k str,
}

impl<'k> KeyBuilder<'k> {
    /// The keys of `key` for limiter `name` of `kind`, under `prefix`.
    pub(crate) fn new(prefix: &str, kind: Kind, name: &str, key: &'k str) -> Self {
        KeyBuilder::for_limiter(prefix, kind, name, key, Colocate::Identity)
    }

    /// The keys of `key` for limiter `name` of `kind`, under `prefix`, with the hash tag
    /// `colocate` says.
    pub(crate) fn for_limiter(prefix: &str, kind: Kind, name: &str, key: &'k str, colocate: Colocate) -> Self {
        let tag = match colocate {
            Colocate::Identity => fnv1a(&[kind.as_str().as_bytes(), name.as_bytes(), key.as_bytes()]),
            // A marker part keeps a tenant's tag apart from any identity's.
            Colocate::Tenant => fnv1a(&[b"colocate:tenant", Colocate::tenant_of(key).as_bytes()]),
        };
        KeyBuilder { head: format!("{prefix}:{{{tag:016x}}}:{}:{name}:", kind.as_str()), key }
    }

    /// The hash tag (between the braces), which decides the Cluster slot.
    pub(crate) fn hash_tag(&self) -> String {
        let open = self.head.find('{').map_or(0, |i| i + 1);
        let close = self.head[open..].find('}').map_or(self.head.len(), |i| open + i);
        self.head[open..close].to_owned()
    }

    /// The key for `role` (a short fixed token such as `s`, `h`, `z`).
    pub(crate) fn key(&self, role: &str) -> String {
        format!("{}{role}:{}", self.head, self.key)
    }

    /// The key for `role` as a command argument: written straight into the command's buffer,
    /// without a `String` of its own (a check sends three to seven keys on every call).
    pub(crate) fn arg<'a>(&'a self, role: &'a str) -> KeyArg<'a> {
        KeyArg { head: &self.head, role, key: self.key }
    }
}

/// One key of a [`KeyBuilder`] as a command argument: the same bytes as [`KeyBuilder::key`].
pub(crate) struct KeyArg<'a> {
    head: &'a str,
    role: &'a str,
    key: &'a str,
}

impl redis::ToRedisArgs for KeyArg<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + redis::RedisWrite,
    {
        use std::io::Write;
        let mut arg = out.writer_for_next_arg();
        for part in [self.head, self.role, ":", self.key] {
            // Writing to a command's buffer cannot fail (it is a Vec).
            let _ = arg.write_all(part.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_comes_first_and_keys_are_injective() {
        let a = KeyBuilder::new("rk", Kind::Bucket, "a", "b:c").key("h");
        let b = KeyBuilder::new("rk", Kind::Bucket, "a", "b").key("h");
        let c = KeyBuilder::new("rk", Kind::Window, "a", "b:c").key("h");
        assert!(a.starts_with("rk:{"), "{a}");
        assert_eq!(&a[21..], ":bucket:a:h:b:c");
        assert_ne!(a, b);
        assert_ne!(a, c);
        let braces = KeyBuilder::new("rk", Kind::Bucket, "a", "}{x}").key("h");
        let builder = KeyBuilder::new("rk", Kind::Bucket, "a", "b:c");
        assert_eq!(redis::ToRedisArgs::to_redis_args(&builder.arg("h")), vec![a.clone().into_bytes()]);
        assert!(braces.ends_with("h:}{x}"), "{braces}");
        assert_eq!(braces.find('}'), Some(20), "the first `}}` closes our tag");
    }

    /// Co-located limiters share a tag per tenant, whatever their kind and name; the default
    /// tag is unchanged (existing data keeps its keys).
    #[test]
    fn colocated_keys_share_their_tenants_tag() {
        let a = KeyBuilder::for_limiter("rk", Kind::TokenBucket, "a", "acme:u1", Colocate::Tenant);
        let b = KeyBuilder::for_limiter("rk", Kind::Calendar, "b", "acme:u2", Colocate::Tenant);
        let c = KeyBuilder::for_limiter("rk", Kind::Calendar, "b", "other:u2", Colocate::Tenant);
        assert_eq!(a.hash_tag(), b.hash_tag());
        assert_ne!(a.hash_tag(), c.hash_tag());
        let plain = KeyBuilder::new("rk", Kind::Bucket, "a", "b:c");
        assert_eq!(plain.hash_tag(), format!("{:016x}", fnv1a(&[b"bucket", b"a", b"b:c"])));
        assert_ne!(a.key("s"), b.key("s"));
    }

    #[test]
    fn prefixes_are_validated() {
        assert!(validate_prefix("tenant-1.prod").is_ok());
        for bad in ["", "a:b", "a{b", "x}", &"p".repeat(65)] {
            assert_eq!(validate_prefix(bad).unwrap_err().parameter(), Some("prefix"), "{bad:?}");
        }
    }
}
