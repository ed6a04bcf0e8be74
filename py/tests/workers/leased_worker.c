/* A C process of the leased-fleet test (py/tests/test_leased_fleet.py): the same steps as
 * leased_worker.py, with rk_limiter_new_leased, rk_limiter_check and rk_limiter_acquire.
 * Usage: leased_worker URL PREFIX NAME RATE CAPACITY CHUNK TTL SECONDS */
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

static double wall_ms(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec * 1000.0 + tv.tv_usec / 1000.0;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: leased_worker URL PREFIX NAME RATE CAPACITY CHUNK TTL SECONDS\n");
        return 2;
    }
    rk_backend *backend = NULL;
    rk_limiter *limiter = NULL;
    enum rk_status s = rk_backend_new_redis(argv[1], argv[2], RK_FAIL_CLOSED, 0, 2.0, &backend);
    if (s != RK_OK) fail("rk_backend_new_redis", s);
    s = rk_limiter_new_leased(backend, argv[3], atof(argv[4]), strtoull(argv[5], NULL, 10),
                              strtoull(argv[6], NULL, 10), atof(argv[7]), &limiter);
    if (s != RK_OK) fail("rk_limiter_new_leased", s);
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin) || strncmp(line, "go", 2) != 0) return 2;
    unsigned long long admitted = 0, calls = 0;
    struct rk_decision d;
    double first = wall_ms();
    double deadline = mono_s() + atof(argv[8]);
    while (mono_s() < deadline) {
        calls++;
        if (calls % 2) {
            if ((s = rk_limiter_check(limiter, NULL, 1, &d)) != RK_OK) fail("rk_limiter_check", s);
            admitted += d.allowed;
        } else {
            s = rk_limiter_acquire(limiter, NULL, 1, 0.05, &d);
            if (s == RK_OK) admitted++;
            else if (s != RK_OVER_LIMIT) fail("rk_limiter_acquire", s);
        }
    }
    double last = wall_ms();
    if ((s = rk_limiter_close(limiter)) != RK_OK) fail("rk_limiter_close", s);
    printf("{\"admitted\": %llu, \"calls\": %llu, \"first\": %.3f, \"last\": %.3f}\n", admitted, calls, first, last);
    rk_limiter_free(limiter);
    rk_backend_free(backend);
    return 0;
}
