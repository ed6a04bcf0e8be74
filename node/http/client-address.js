'use strict';
// The client address an HTTP request comes from, as a rate-limiting key: the peer's address,
// or, only when the peer is one of `trustedProxies`, the address those proxies forwarded
// (`Forwarded`, else `X-Forwarded-For`). IPv6 addresses are grouped by /56, the block one
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

/** `address` as a key: IPv4 as is, IPv6 as its /56 network (`2001:db8:0:ab00::/56`). */
function addressKey(address) {
  const plain = unmapped(address);
  if (net.isIPv6(plain)) {
    const groups = ipv6Groups(plain);
    const kept = [groups[0], groups[1], groups[2], groups[3] & 0xff00];
    return `${kept.map((g) => g.toString(16)).join(':')}::/56`;
  }
  return plain;
}

/**
 * A matcher of `trustedProxies`: addresses or CIDR blocks (`10.0.0.0/8`, `fd00::/8`), or the
 * words `loopback` (127.0.0.0/8 and ::1) and `private` (RFC 1918 and fc00::/7).
 */
function trustedProxyList(trustedProxies) {
  if (trustedProxies === undefined) return null;
  if (!Array.isArray(trustedProxies)) {
    throw invalidArgument('trustedProxies', 'must be an array of addresses or CIDR blocks');
  }
  const list = new net.BlockList();
  for (const entry of trustedProxies) {
    if (entry === 'loopback') {
      list.addSubnet('127.0.0.0', 8, 'ipv4');
      list.addAddress('::1', 'ipv6');
      continue;
    }
    if (entry === 'private') {
      list.addSubnet('10.0.0.0', 8, 'ipv4');
      list.addSubnet('172.16.0.0', 12, 'ipv4');
      list.addSubnet('192.168.0.0', 16, 'ipv4');
      list.addSubnet('fc00::', 7, 'ipv6');
      continue;
    }
    const [address, bits, extra] = typeof entry === 'string' ? entry.split('/') : [];
    const family = net.isIPv4(address) ? 'ipv4' : net.isIPv6(address) ? 'ipv6' : null;
    const prefix = bits === undefined ? null : Number(bits);
    const maxBits = family === 'ipv4' ? 32 : 128;
    if (family === null || extra !== undefined || (prefix !== null && !(Number.isInteger(prefix) && prefix >= 0 && prefix <= maxBits))) {
      throw invalidArgument('trustedProxies', `${JSON.stringify(entry)} is not an address, a CIDR block, 'loopback' or 'private'`);
    }
    if (prefix === null) list.addAddress(address, family);
    else list.addSubnet(address, prefix, family);
  }
  return list;
}

function isTrusted(list, address) {
  const plain = unmapped(address);
  const family = net.isIPv4(plain) ? 'ipv4' : net.isIPv6(plain) ? 'ipv6' : null;
  return family !== null && list.check(plain, family);
}

/** The `for=` addresses of a `Forwarded` header (RFC 7239), nearest proxy last. */
function forwardedFor(value) {
  const addresses = [];
  for (const element of value.split(',')) {
    for (const pair of element.split(';')) {
      const [name, raw] = pair.split('=');
      if (raw === undefined || name.trim().toLowerCase() !== 'for') continue;
      let address = raw.trim().replace(/^"|"$/g, '');
      const bracket = /^\[([^\]]+)\](?::\d+)?$/.exec(address);
      if (bracket) address = bracket[1];
      else if (/^\d+\.\d+\.\d+\.\d+:\d+$/.test(address)) address = address.split(':')[0];
      addresses.push(address);
    }
  }
  return addresses;
}

/**
 * The client's address: the peer's, or — when the peer is a trusted proxy — the nearest
 * forwarded address that is not itself a trusted proxy (reading the chain from the right,
 * as each proxy appends the address it saw).
 */
function clientAddress(peer, header, trusted) {
  if (!peer) return null;
  if (trusted === null || !isTrusted(trusted, peer)) return peer;
  const forwarded = header('forwarded');
  const chain = forwarded ? forwardedFor(forwarded) : (header('x-forwarded-for') || '').split(',').map((a) => a.trim());
  let client = peer;
  for (let i = chain.length - 1; i >= 0; i--) {
    const address = chain[i];
    if (!net.isIP(unmapped(address))) break; // `unknown` or an obfuscated id: stop at the last known hop
    client = address;
    if (!isTrusted(trusted, address)) break;
  }
  return client;
}

module.exports = { addressKey, clientAddress, trustedProxyList };
