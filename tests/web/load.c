/* Load from a C process (libratekeeper): a concurrent limiter of 2 acquired and released every
 * 20 ms until killed, so the Limits page has a C limiter whose numbers move. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ratekeeper.h"

static void check(enum rk_status status, const char *what) {
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
  check(rk_backend_flush(backend), "rk_backend_flush");
  printf("c load: running\n");
  fflush(stdout);
  struct timespec pause = {0, 20 * 1000 * 1000};
  for (;;) {
    struct rk_decision decision;
    check(rk_limiter_check(reports, "batch", 1, &decision), "rk_limiter_check");
    nanosleep(&pause, NULL);
    if (decision.allowed) check(rk_limiter_release(reports, "batch", &decision.lease), "rk_limiter_release");
  }
}
