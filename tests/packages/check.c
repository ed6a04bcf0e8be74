/* One real check against the Redis at $REDIS_URL through the installed C package
 * (scripts/test-packages builds it with pkg-config and with CMake, shared and static). */
#include <stdio.h>
#include <stdlib.h>
#include "ratekeeper.h"

int main(void) {
  const char *url = getenv("REDIS_URL");
  rk_backend *backend;
  rk_limiter *limiter;
  rk_decision first, second;
  if (url == NULL ||
      rk_backend_new_redis(url, "packages-c", RK_FAIL_CLOSED, 0, 0.0, &backend) != RK_OK) {
    fprintf(stderr, "backend: %s\n", rk_last_error_message());
    return 1;
  }
  if (rk_limiter_new_token_bucket(backend, "installed", 1.0, 1, &limiter) != RK_OK ||
      rk_limiter_check(limiter, NULL, 1, &first) != RK_OK ||
      rk_limiter_check(limiter, NULL, 1, &second) != RK_OK) {
    fprintf(stderr, "check: %s\n", rk_last_error_message());
    return 1;
  }
  /* A bucket of one: the first check is allowed, the second refused. */
  int ok = first.allowed && !second.allowed && second.retry_after_us > 0;
  printf("c: allowed=%d then allowed=%d retry_after_us=%llu\n", first.allowed, second.allowed,
         (unsigned long long)second.retry_after_us);
  rk_limiter_free(limiter);
  rk_backend_free(backend);
  return ok ? 0 : 1;
}
