#include <stdio.h>
#include <stdlib.h>
#include "ratekeeper.h"

static int fail(rk_status s) {  /* prints this thread's last error */
  char why[256]; size_t n;
  rk_last_error_message(why, sizeof why, &n);
  fprintf(stderr, "%s: %s\n", rk_status_name(s), why);
  return 1;
}

int main(void) {
  const char *url = getenv("REDIS_URL") ? getenv("REDIS_URL") : "redis://127.0.0.1:6379";
  rk_backend *backend; rk_limiter *api; rk_decision d; rk_status s;
  if ((s = rk_backend_new_redis(url, NULL, RK_FAIL_CLOSED, 0, 0.0, &backend)) != RK_OK) return fail(s);
  if ((s = rk_limiter_new_token_bucket(backend, "stripe", 10.0, 20, &api)) != RK_OK) return fail(s); /* 10/s, bursts of 20 */
  if ((s = rk_limiter_check(api, "user-42", 1, &d)) != RK_OK) return fail(s);  /* never waits */
  printf("allowed: %d, remaining: %llu\n", d.allowed, (unsigned long long)d.remaining);
  if (!d.allowed) printf("retry in %llu us\n", (unsigned long long)d.retry_after_us);
  rk_limiter_free(api);
  rk_backend_free(backend);
  return 0;
}
