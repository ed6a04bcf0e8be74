/* One real check against the Redis at $REDIS_URL through the installed C package
 * (scripts/test-packages builds it with pkg-config and with CMake, shared and static). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "ratekeeper.h"

/* This thread's last error message (empty after a success). */
static const char *last_error(void) {
  static char buf[512];
  size_t n;
  rk_last_error_message(buf, sizeof buf, &n);
  return buf;
}

int main(void) {
  const char *url = getenv("REDIS_URL");
  rk_backend *backend;
  rk_limiter *limiter;
  rk_decision first, second;
  char key[32]; /* one key per run: each of the four builds starts with a full bucket */
  snprintf(key, sizeof key, "run-%ld", (long)getpid());
  if (url == NULL ||
      rk_backend_new_redis(url, "packages-c", RK_FAIL_CLOSED, 0, 0.0, &backend) != RK_OK) {
    fprintf(stderr, "backend: %s\n", last_error());
    return 1;
  }
  if (rk_limiter_new_token_bucket(backend, "installed", 1.0, 1, &limiter) != RK_OK ||
      rk_limiter_check(limiter, key, 1, &first) != RK_OK ||
      rk_limiter_check(limiter, key, 1, &second) != RK_OK) {
    fprintf(stderr, "check: %s\n", last_error());
    return 1;
  }
  /* A bucket of one: the first check is allowed, the second refused. */
  int ok = first.allowed && !second.allowed && second.retry_after_us > 0;
  printf("c: allowed=%d then allowed=%d retry_after_us=%llu\n", first.allowed, second.allowed,
         (unsigned long long)second.retry_after_us);
  /* In the registry before the process ends: the installed CLI's `limits` lists it next. */
  if (rk_backend_flush(backend) != RK_OK) {
    fprintf(stderr, "flush: %s\n", last_error());
    ok = 0;
  }
  rk_limiter_free(limiter);
  rk_backend_free(backend);
  return ok ? 0 : 1;
}
