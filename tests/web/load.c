/* Load from a C process (libratekeeper): a concurrent limiter of 2 on key "batch", one slot held
 * (and extended every second) for the whole run, the other acquired for 20 ms every 40 ms until
 * killed, so the Limits page has a C limiter whose numbers move and a holder whose age grows. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ratekeeper.h"

static void check(enum rk_status status, const char *what) {
  if (status == RK_TIMEOUT || status == RK_BACKEND_UNAVAILABLE) {
    /* A loaded test machine can miss the 200 ms deadline: say so and go on. */
    fprintf(stderr, "c load: %s failed with status %d (transient)\n", what, (int)status);
    return;
  }
  if (status != RK_OK) {
    fprintf(stderr, "c load: %s failed with status %d\n", what, (int)status);
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s REDIS_URL\n", argv[0]);
    return 2;
  }
  struct rk_backend *backend = NULL;
  check(rk_backend_new_redis(argv[1], NULL, 0, 0, 0.0, &backend), "rk_backend_new_redis");
  struct rk_limiter *reports = NULL;
  check(rk_limiter_new_from_json(backend, "c-reports", "{\"kind\":\"concurrent\",\"limit\":2,\"lock_timeout\":30}",
                                 &reports),
        "rk_limiter_new_from_json");
  struct rk_decision long_held;
  check(rk_limiter_acquire(reports, "batch", 1, 10.0, &long_held), "rk_limiter_acquire");
  check(rk_backend_flush(backend), "rk_backend_flush");
  printf("c load: running\n");
  fflush(stdout);
  struct timespec pause = {0, 20 * 1000 * 1000};
  for (unsigned round = 1;; round++) {
    struct rk_decision decision;
    decision.allowed = false;
    check(rk_limiter_check(reports, "batch", 1, &decision), "rk_limiter_check");
    nanosleep(&pause, NULL);
    if (decision.allowed) check(rk_limiter_release(reports, "batch", &decision.lease), "rk_limiter_release");
    /* A pause after a release too: a waiter of another process gets the slot. */
    nanosleep(&pause, NULL);
    if (round % 25 == 0) check(rk_limiter_extend(reports, "batch", &long_held.lease), "rk_limiter_extend");
  }
}
