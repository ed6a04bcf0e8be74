//! Where a limiter's Redis keys take their hash tag from, which decides their Cluster slot: a
//! `check_all` combination is one script, and one script's keys must share one slot.

use crate::error::{Error, Result};

/// Where a limiter's keys take their hash tag from (the `colocate` option of a spec).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Colocate {
    /// The limiter's kind, name and the whole key: identities spread over every slot (the
    /// default, and the layout of every key written before this option existed).
    #[default]
    Identity,
    /// The key's tenant alone, the part of the key before its first `:` (the whole key when it
    /// has none): every co-located limiter's keys of one tenant share one slot, so they can be
    /// checked together on a Cluster. Changing a limiter to it moves its keys (its state
    /// starts afresh).
    Tenant,
}

impl Colocate {
    /// The name in the JSON form.
    pub fn as_str(self) -> &'static str {
        match self {
            Colocate::Identity => "identity",
            Colocate::Tenant => "tenant",
        }
    }

    /// The option named `name`, naming `colocate` when there is none.
    pub fn from_name(name: &str) -> Result<Colocate> {
        match name {
            "identity" => Ok(Colocate::Identity),
            "tenant" => Ok(Colocate::Tenant),
            other => Err(Error::invalid("colocate", format!("must be \"identity\" or \"tenant\", got {other:?}"))),
        }
    }

    /// The tenant of `key`: the part before its first `:`, or the whole key.
    pub fn tenant_of(key: &str) -> &str {
        key.split_once(':').map_or(key, |(tenant, _)| tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tenant_is_the_part_before_the_first_colon() {
        assert_eq!(Colocate::tenant_of("acme:user-1"), "acme");
        assert_eq!(Colocate::tenant_of("acme:a:b"), "acme");
        assert_eq!(Colocate::tenant_of("acme"), "acme");
        assert_eq!(Colocate::tenant_of(":x"), "");
        assert_eq!(Colocate::from_name("tenant").unwrap(), Colocate::Tenant);
        assert_eq!(Colocate::from_name("slot").unwrap_err().parameter(), Some("colocate"));
    }
}
