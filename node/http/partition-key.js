'use strict';
// The draft-11 `pk` parameter (partition key) of the `RateLimit` field, sent when the user gives
// `partitionKeySecret`. The field is visible to the client, so it never carries the key itself
// (an IP address, a user id) but a keyed hash of it: the first 16 bytes of HMAC-SHA256(secret,
// key). An unkeyed hash would not hide it: every IPv4 address can be hashed in minutes. The
// same secret and key give the same `pk` in Python (ratekeeper/_http.py), so a client sees one
// partition across a fleet of both.

const crypto = require('node:crypto');
const { invalidArgument } = require('./errors.js');

/** The shortest secret accepted, in bytes (128 bits). */
const MIN_SECRET_BYTES = 16;
/** How much of the HMAC is sent, in bytes. */
const PK_BYTES = 16;

/**
 * The function from a request's key to its `pk` (base64), or null when `secret` is not given.
 * Throws `ERR_INVALID_ARGUMENT` naming `partitionKeySecret` (never showing it) for a secret that
 * is not a string or bytes of at least 16 bytes, or when the header form has no `pk`.
 */
function partitionKeyOf(secret, standardHeaders) {
  if (secret === undefined || secret === null) return null;
  let bytes;
  if (typeof secret === 'string') bytes = Buffer.from(secret, 'utf8');
  else if (secret instanceof Uint8Array) bytes = Buffer.from(secret);
  else throw invalidArgument('partitionKeySecret', `must be a string or a Uint8Array, got ${typeof secret}`);
  if (bytes.length < MIN_SECRET_BYTES) {
    throw invalidArgument('partitionKeySecret', `must be at least ${MIN_SECRET_BYTES} bytes, got ${bytes.length}`);
  }
  if (standardHeaders !== 'draft-11') {
    throw invalidArgument('partitionKeySecret', `applies only to standardHeaders 'draft-11' (pk is a draft-11 parameter)`);
  }
  return (key) => crypto.createHmac('sha256', bytes).update(key, 'utf8').digest().subarray(0, PK_BYTES).toString('base64');
}

module.exports = { partitionKeyOf };
