'use strict';
// When a node:http response is over: the point where a request's leases are released and,
// under `count`, its units given back.

/**
 * Calls `done(status)` once `res` (a node:http ServerResponse) has been sent, or
 * `done(null)` when the client went away first (the response's status never reached it).
 */
function onResponseDone(res, done) {
  const finished = () => {
    res.removeListener('close', closed);
    done(res.statusCode);
  };
  const closed = () => {
    res.removeListener('finish', finished);
    done(res.writableFinished ? res.statusCode : null);
  };
  res.once('finish', finished);
  res.once('close', closed);
}

module.exports = { onResponseDone };
