'use strict';
// The client address an HTTP request comes from, as a rate-limiting key: the peer's address,
// or, only when the peer is one of `trustedProxies`, the address those proxies forwarded in the
// one header the operator names (`proxyHeader`: `X-Forwarded-For`, else `Forwarded`). The same
// rule, and the same key text, as Python's middleware (ratekeeper._http.client_key), so one
// client shares one limit across languages. IPv6 addresses are grouped by /56, the block one
// subscriber usually holds, so one client cannot spread over 2^72 addresses of its own.

const net = require('node:net');
const { invalidArgument } = require('./errors.js');

/** An IPv4-mapped IPv6 address (`::ffff:1.2.3.4`) as the IPv4 address it carries. */
function unmapped(address) {
  const match = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  return match ? match[1] : address;
}

/** The eight 16-bit groups of an IPv6 address (a trailing dotted IPv4 part included). */
function ipv6Groups(address) {
  let text = address.toLowerCase();
  const zone = text.indexOf('%');
  if (zone >= 0) text = text.slice(0, zone);
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted[1].split('.').map(Number);
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.includes('::') ? text.split('::') : [text, null];
  const left = head ? head.split(':') : [];
  const right = tail ? tail.split(':') : [];
  const fill = tail === null ? [] : new Array(8 - left.length - right.length).fill('0');
  return [...left, ...fill, ...right].map((group) => parseInt(group, 16));
}

/** Eight 16-bit groups as RFC 5952 text: lower case, the longest run of 2+ zero groups as `::`. */
function compress(groups) {
  let best = -1;
  let bestLength = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength) [best, bestLength] = [i, j - i];
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best < 0) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLength).join(':')}`;
}

/** `address` as a key: IPv4 as is, IPv6 as its /56 network (`2001:db8:0:ab00::/56`). */
function addressKey(address) {
  const plain = unmapped(address);
  if (net.isIPv6(plain.split('%')[0])) {
    const groups = ipv6Groups(plain);
    return `${compress([groups[0], groups[1], groups[2], groups[3] & 0xff00, 0, 0, 0, 0])}/56`;
  }
  return plain;
}

/**
 * A matcher of `trustedProxies`: IP addresses or CIDR ranges (`10.0.0.0/8`, `fd00::/8`).
 */
function trustedProxyList(trustedProxies) {
  if (trustedProxies === undefined || trustedProxies === null) return null;
  if (!Array.isArray(trustedProxies)) {
    // A lone string would be one entry in Python and characters elsewhere: ask for the list it meant.
    throw invalidArgument('trustedProxies', `must be an array of IP addresses or CIDR ranges, got ${JSON.stringify(trustedProxies)}`);
  }
  const list = new net.BlockList();
  for (const entry of trustedProxies) {
    const [address, bits, extra] = typeof entry === 'string' ? entry.trim().split('/') : [];
    const family = net.isIPv4(address) ? 'ipv4' : net.isIPv6(address) ? 'ipv6' : null;
    const prefix = bits === undefined ? null : Number(bits);
    const maxBits = family === 'ipv4' ? 32 : 128;
    if (family === null || extra !== undefined || (prefix !== null && !(/^\d+$/.test(bits) && prefix <= maxBits))) {
      throw invalidArgument('trustedProxies', `must be IP addresses or CIDR ranges, got ${JSON.stringify(entry)}`);
    }
    if (prefix === null) list.addAddress(address, family);
    else list.addSubnet(address, prefix, family);
  }
  return trustedProxies.length > 0 ? list : null;
}

/**
 * The `proxyHeader` option as the lower-case field name to read. Only that header is read: a
 * proxy that appends to X-Forwarded-For passes a client's own Forwarded through untouched (and
 * the reverse), so reading the other would let the client choose its key.
 */
function proxyHeaderName(value) {
  if (value === undefined) return 'x-forwarded-for';
  const name = typeof value === 'string' ? value.trim().toLowerCase() : null;
  if (name === 'x-forwarded-for' || name === 'forwarded') return name;
  throw invalidArgument('proxyHeader', `must be 'X-Forwarded-For' or 'Forwarded' (the header your proxy sets), got ${JSON.stringify(value)}`);
}

/** An address as a header or the peer gives it (`[v6]:port`, `v4:port`, quoted), or null. */
function parseAddress(text) {
  let value = text.trim().replace(/^"|"$/g, '');
  if (value.startsWith('[')) value = value.includes(']') ? value.slice(1, value.indexOf(']')) : value.slice(1);
  else if (value.split(':').length === 2) value = value.split(':')[0];
  const plain = unmapped(value);
  return net.isIP(plain.split('%')[0]) ? plain : null;
}

function isTrusted(list, address) {
  const family = net.isIPv4(address) ? 'ipv4' : 'ipv6';
  return list.check(address.split('%')[0], family);
}

/** The `for=` values of a `Forwarded` field (RFC 7239), first hop first. */
function forwardedFor(value) {
  const out = [];
  for (const element of value.split(',')) {
    for (const pair of element.split(';')) {
      const at = pair.indexOf('=');
      if (at > 0 && pair.slice(0, at).trim().toLowerCase() === 'for') out.push(pair.slice(at + 1).trim());
    }
  }
  return out;
}

/**
 * The default key: the client address, IPv6 grouped by /56. The proxy header (`proxyHeader`,
 * from `proxyHeaderName`) is read only when the peer is one of `trusted`, and no other: the
 * client is then the right-most address of its chain that is not a trusted proxy (the
 * left-most entries are the client's own writing). Every line of the header counts, in order:
 * `header(name)` returns them joined by commas (node:http and the Fetch API's Headers do), or an
 * array of them. A request without a peer address is counted as `unknown`.
 */
function clientKey(peer, header, trusted, proxyHeader = 'x-forwarded-for') {
  let address = peer ? parseAddress(peer) : null;
  if (address === null) return peer || 'unknown';
  if (trusted !== null && isTrusted(trusted, address)) {
    const given = header(proxyHeader) ?? '';
    const value = Array.isArray(given) ? given.join(',') : String(given);
    const chain = proxyHeader === 'forwarded' ? forwardedFor(value) : value.split(',').filter((hop) => hop.trim());
    for (let i = chain.length - 1; i >= 0; i--) {
      const hop = parseAddress(chain[i]);
      if (hop === null) break; // an obfuscated or unknown hop: the last address known stands
      address = hop;
      if (!isTrusted(trusted, hop)) break;
    }
  }
  return addressKey(address);
}

module.exports = { addressKey, clientKey, proxyHeaderName, trustedProxyList };
