/* A C process spending the cross-language limits of ruby/test/languages_test.rb through
 * libratekeeper: waits until START (Unix seconds) so every language starts at once, then makes
 * ATTEMPTS checks on each of two limiters and prints how many each admitted.
 * Usage: spend REDIS_URL PREFIX START ATTEMPTS */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ratekeeper.h"

static void check(enum rk_status status, const char *what) {
  if (status != RK_OK) {
    char message[512];
    size_t n = 0;
    rk_last_error_message(message, sizeof message, &n);
    fprintf(stderr, "c spend: %s: %s: %s\n", what, rk_status_name((uint32_t)status), message);
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s REDIS_URL PREFIX START ATTEMPTS\n", argv[0]);
    return 2;
  }
  struct rk_backend *backend = NULL;
  check(rk_backend_new_redis(argv[1], argv[2], RK_FAIL_CLOSED, 0, 5.0, &backend), "rk_backend_new_redis");
  struct rk_limiter *scarce = NULL, *plenty = NULL;
  check(rk_limiter_new_window(backend, "scarce", 200, 3600.0, &scarce), "scarce");
  check(rk_limiter_new_bucket(backend, "plenty", 100000, RK_DAY, &plenty), "plenty");
  double start = atof(argv[3]);
  long attempts = atol(argv[4]);
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  double wait = start - ((double)now.tv_sec + now.tv_nsec / 1e9);
  if (wait > 0) {
    struct timespec pause = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
    nanosleep(&pause, NULL);
  }
  long scarce_admitted = 0, plenty_admitted = 0;
  for (long i = 0; i < attempts; i++) {
    struct rk_decision d;
    check(rk_limiter_check(scarce, "shared", 1, &d), "check scarce");
    scarce_admitted += d.allowed;
    check(rk_limiter_check(plenty, "shared", 1, &d), "check plenty");
    plenty_admitted += d.allowed;
  }
  printf("{\"language\":\"c\",\"scarce\":%ld,\"plenty\":%ld}\n", scarce_admitted, plenty_admitted);
  rk_limiter_free(scarce);
  rk_limiter_free(plenty);
  rk_backend_free(backend);
  return 0;
}
