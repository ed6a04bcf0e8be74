/* bench-c: the C API's memory check against the C API's floor (an unlimited limiter's check:
 * the call across the ABI and the decision struct, no limiter work), side by side in one run.
 * Prints one line per row, "scenario<TAB>checks/s" (medians of the rounds); bench/c/run.py
 * builds it, runs it and writes bench/results/bench-c.json. Not a test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ratekeeper.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Checks per second of `limiter` on `key` over `seconds`. */
static double rate(const rk_limiter *limiter, const char *key, double seconds) {
    rk_decision d;
    unsigned long n = 0;
    double start = now(), elapsed;
    while ((elapsed = now() - start) < seconds) {
        for (int i = 0; i < 10000; i++) {
            if (rk_limiter_check(limiter, key, 1, &d) != RK_OK) {
                fprintf(stderr, "bench-c: check failed\n");
                exit(1);
            }
        }
        n += 10000;
    }
    return (double)n / elapsed;
}

static void ok(rk_status s, const char *what) {
    if (s != RK_OK) {
        fprintf(stderr, "bench-c: %s: %s\n", what, rk_status_name(s));
        exit(1);
    }
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int rounds = quick ? 3 : 7;
    double seconds = quick ? 0.3 : 1.0;
    rk_backend *backend;
    rk_limiter *bucket, *unlimited;
    ok(rk_backend_new_memory(&backend), "memory backend");
    ok(rk_limiter_new_token_bucket(backend, "bench", 1000000.0, 1000000000ULL, &bucket), "token bucket");
    ok(rk_limiter_new_unlimited(&unlimited), "unlimited");
    double ours[16], floor_[16];
    rate(bucket, "k", seconds / 4);
    rate(unlimited, "k", seconds / 4);
    for (int r = 0; r < rounds; r++) {
        ours[r] = rate(bucket, "k", seconds);
        floor_[r] = rate(unlimited, "k", seconds);
    }
    qsort(ours, rounds, sizeof ours[0], cmp);
    qsort(floor_, rounds, sizeof floor_[0], cmp);
    printf("rounds\t%d\nseconds\t%g\n", rounds, seconds);
    printf("token_bucket\t%.0f\nunlimited\t%.0f\n", ours[rounds / 2], floor_[rounds / 2]);
    rk_limiter_free(bucket);
    rk_limiter_free(unlimited);
    rk_backend_free(backend);
    return 0;
}
