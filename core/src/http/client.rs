//! The client a request comes from, as a rate-limiting key: the peer's address, or, only when
//! the peer is a trusted proxy, the address those proxies forwarded in the one header the
//! operator names. IPv6 addresses are grouped by /56, the block one subscriber usually holds, so
//! that one client cannot spread over 2^72 addresses of its own.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use crate::error::{Error, Result};

/// The one header a trusted proxy writes the client's address into. Only that header is read:
/// a proxy that appends to `X-Forwarded-For` passes a client's own `Forwarded` through
/// untouched (and the reverse), so reading the other would let the client choose its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (nginx, AWS ALB, Cloudflare).
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
}

impl ProxyHeader {
    /// Reads `X-Forwarded-For` or `Forwarded`, in any case, around white space.
    pub fn from_name(name: &str) -> Result<ProxyHeader> {
        let trimmed = name.trim();
        if trimmed.eq_ignore_ascii_case("x-forwarded-for") {
            Ok(ProxyHeader::XForwardedFor)
        } else if trimmed.eq_ignore_ascii_case("forwarded") {
            Ok(ProxyHeader::Forwarded)
        } else {
            Err(Error::invalid(
                "proxy_header",
                format!("must be \"X-Forwarded-For\" or \"Forwarded\" (the header your proxy sets), got {name:?}"),
            ))
        }
    }

    /// The field name in lower case, as a binding looks it up.
    pub fn name(self) -> &'static str {
        match self {
            ProxyHeader::XForwardedFor => "x-forwarded-for",
            ProxyHeader::Forwarded => "forwarded",
        }
    }

    /// The addresses a header value lists, first hop first, as written (unparsed).
    fn hops(self, value: &str) -> Vec<&str> {
        match self {
            ProxyHeader::XForwardedFor => value.split(',').map(str::trim).filter(|hop| !hop.is_empty()).collect(),
            // RFC 7239: elements separated by `,`, pairs by `;`; only `for=` names a client.
            ProxyHeader::Forwarded => value
                .split(',')
                .flat_map(|element| element.split(';'))
                .filter_map(|pair| pair.split_once('='))
                .filter(|(name, _)| name.trim().eq_ignore_ascii_case("for"))
                .map(|(_, value)| value.trim())
                .collect(),
        }
    }
}

/// The client-address rule of one middleware: its trusted proxies and the header they set.
#[derive(Debug, Clone, Default)]
pub struct ClientKeys {
    trusted: Vec<IpNet>,
    header: ProxyHeader,
}

impl ClientKeys {
    /// Reads `trusted_proxies` (IP addresses or CIDR ranges, `10.0.0.0/8`, `fd00::/8`; host
    /// bits allowed) and `proxy_header`, naming the bad one.
    pub fn new<S: AsRef<str>>(trusted_proxies: &[S], proxy_header: &str) -> Result<ClientKeys> {
        let trusted = trusted_proxies.iter().map(|entry| network(entry.as_ref())).collect::<Result<_>>()?;
        Ok(ClientKeys { trusted, header: ProxyHeader::from_name(proxy_header)? })
    }

    /// The header the trusted proxies set.
    pub fn header(&self) -> ProxyHeader {
        self.header
    }

    /// The key of a request from `peer` (as the server gives it: `v4`, `v4:port`, `[v6]:port`,
    /// `v6`): its address, IPv6 as its /56 (`2001:db8:0:ab00::/56`), an IPv4-mapped IPv6
    /// address as the IPv4 address. When the peer is a trusted proxy, `proxy_header_value` (every
    /// line of [`Self::header`] joined by commas, in order; `None`: absent) is read, and the
    /// client is the right-most address of its chain that is not a trusted proxy: the left-most
    /// entries are the client's own writing. An obfuscated or unknown hop ends the walk (the
    /// last address known stands). A peer that is not an address is its own key (`unknown`
    /// without one).
    pub fn key(&self, peer: Option<&str>, proxy_header_value: Option<&str>) -> String {
        let peer = peer.filter(|p| !p.is_empty());
        let Some(mut address) = peer.and_then(address) else {
            return peer.unwrap_or("unknown").to_owned();
        };
        if self.trusts(address) {
            for hop in self.header.hops(proxy_header_value.unwrap_or("")).into_iter().rev() {
                let Some(hop) = self::address(hop) else { break };
                address = hop;
                if !self.trusts(hop) {
                    break;
                }
            }
        }
        match address {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => IpNet::new(IpAddr::V6(v6), 56).map(|net| net.trunc().to_string()).unwrap_or_default(),
        }
    }

    fn trusts(&self, address: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(&address))
    }
}

/// One `trusted_proxies` entry: a CIDR range or a single address.
fn network(entry: &str) -> Result<IpNet> {
    let text = entry.trim();
    let parsed =
        if text.contains('/') { text.parse::<IpNet>().ok() } else { text.parse::<IpAddr>().ok().map(IpNet::from) };
    parsed
        .ok_or_else(|| Error::invalid("trusted_proxies", format!("must be IP addresses or CIDR ranges, got {entry:?}")))
}

/// An address as a peer or a proxy header gives it (`v4`, `v4:port`, `[v6]`, `[v6]:port`,
/// `v6`, quoted, with a zone), or `None` (`unknown`, an obfuscated `_name`, garbage).
fn address(text: &str) -> Option<IpAddr> {
    let text = text.trim().trim_matches('"');
    let parsed = text
        .parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| text.strip_prefix('[')?.split(']').next()?.parse().ok())
        .or_else(|| text.split_once('%')?.0.parse().ok());
    match parsed? {
        IpAddr::V6(v6) => Some(v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)),
        v4 => Some(v4),
    }
}
