'use strict';
// The HTTP layer's errors have the package's shape: an `Error` with `code` `ERR_INVALID_ARGUMENT`
// and the option's name in `parameter`, thrown when the middleware is built.

const { codes } = require('../index.js');

/** An invalid-argument error naming `parameter`, like the core's. */
function invalidArgument(parameter, message) {
  const error = new Error(`invalid argument \`${parameter}\`: ${message}`);
  error.code = codes.INVALID_ARGUMENT;
  error.parameter = parameter;
  return error;
}

module.exports = { invalidArgument };
