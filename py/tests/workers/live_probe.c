/* A C process for the live-limits test (py/tests/test_live.py): builds limiter NAME from SPEC on
 * a Redis backend, registers it (rk_backend_flush), prints "ready", then, for each of TARGETS
 * (comma-separated) in turn, peeks until the limit it decides with is that target and prints the
 * Unix time in ms when it first saw it. A peek that fails (the server restarting) is retried. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "ratekeeper.h"

static void fail(const char *what, enum rk_status status) {
    char message[512];
    size_t n = 0;
    rk_last_error_message(message, sizeof message, &n);
    fprintf(stderr, "%s: %s: %s\n", what, rk_status_name(status), message);
    exit(1);
}

static double now_ms(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec * 1000.0 + tv.tv_usec / 1000.0;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: live_probe URL PREFIX NAME SPEC TARGETS\n");
        return 2;
    }
    rk_backend *backend = NULL;
    rk_limiter *limiter = NULL;
    enum rk_status s = rk_backend_new_redis(argv[1], argv[2], RK_FAIL_CLOSED, 0, 2.0, &backend);
    if (s != RK_OK) fail("rk_backend_new_redis", s);
    if ((s = rk_limiter_new_from_json(backend, argv[3], argv[4], &limiter)) != RK_OK) fail("rk_limiter_new_from_json", s);
    struct rk_decision d;
    if ((s = rk_limiter_peek(limiter, NULL, &d)) != RK_OK) fail("rk_limiter_peek", s);
    if ((s = rk_backend_flush(backend)) != RK_OK) fail("rk_backend_flush", s);
    printf("ready\n");
    fflush(stdout);
    for (char *next = argv[5]; *next != '\0';) {
        unsigned long long target = strtoull(next, &next, 10);
        if (*next == ',') next++;
        double give_up = now_ms() + 20000.0;
        unsigned long long limit = 0;
        for (;;) {
            if (rk_limiter_peek(limiter, NULL, &d) == RK_OK) {
                limit = d.limit;
                if (limit == target) break;
            }
            if (now_ms() > give_up) {
                fprintf(stderr, "limit still %llu, not %llu\n", limit, target);
                return 1;
            }
            struct timespec pause = {0, 2 * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
        printf("%.1f\n", now_ms());
        fflush(stdout);
    }
    rk_limiter_free(limiter);
    rk_backend_free(backend);
    return 0;
}
