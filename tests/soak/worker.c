/* A C process of the soak (tests/soak/soak.py): the same loop as worker.py, on the formats of
 * tests/soak/config.py, through the C ABI. Usage: worker CONFIG */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "ratekeeper.h"

#define MAX_ITEMS 64

struct limiter_conf {
    char name[64];
    uint64_t max_cost;
    char spec[512];
    rk_limiter *limiter;
};

static char *seeds[8];
static size_t seeds_len;
static char prefix[128], log_path[1024];
static char *keys[8];
static size_t keys_len;
static double deadline, rate, start_at, stop_at;
static unsigned long long seed;
static long hold_ms;
static struct limiter_conf limiters[MAX_ITEMS];
static size_t limiters_len;

static void die(const char *what) {
    char message[512];
    size_t n = 0;
    rk_last_error_message(message, sizeof message, &n);
    fprintf(stderr, "soak worker: %s: %s\n", what, message);
    exit(1);
}

static uint64_t wall_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
}

static uint64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void sleep_us(int64_t us) {
    if (us <= 0) return;
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* xorshift64*: a seeded sequence of choices. */
static uint64_t next_random(void) {
    seed ^= seed >> 12;
    seed ^= seed << 25;
    seed ^= seed >> 27;
    return seed * 2685821657736338717ULL;
}

/* The judge's name for a status (RK_BACKEND_UNAVAILABLE -> BackendUnavailable). */
static void status_name(enum rk_status s, char *out, size_t len) {
    const char *name = rk_status_name(s);
    if (strncmp(name, "RK_", 3) == 0) name += 3;
    size_t o = 0;
    int upper = 1;
    for (; *name && o + 1 < len; name++) {
        if (*name == '_') {
            upper = 1;
            continue;
        }
        out[o++] = upper ? *name : (char)(*name >= 'A' && *name <= 'Z' ? *name + 32 : *name);
        upper = 0;
    }
    out[o] = 0;
}

static char *dup_word(const char *w) {
    char *c = strdup(w);
    if (!c) exit(1);
    return c;
}

static void read_config(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(1);
    }
    static char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *save = NULL;
        char *name = strtok_r(line, " ", &save);
        if (!name) continue;
        char *w;
        if (strcmp(name, "seeds") == 0) {
            while ((w = strtok_r(NULL, " ", &save)) && seeds_len < 8) seeds[seeds_len++] = dup_word(w);
        } else if (strcmp(name, "keys") == 0) {
            while ((w = strtok_r(NULL, " ", &save)) && keys_len < 8) keys[keys_len++] = dup_word(w);
        } else if (strcmp(name, "limiter") == 0 && limiters_len < MAX_ITEMS) {
            struct limiter_conf *l = &limiters[limiters_len++];
            snprintf(l->name, sizeof l->name, "%s", strtok_r(NULL, " ", &save));
            l->max_cost = strtoull(strtok_r(NULL, " ", &save), NULL, 10);
            snprintf(l->spec, sizeof l->spec, "%s", strtok_r(NULL, " ", &save));
        } else if ((w = strtok_r(NULL, " ", &save))) {
            if (strcmp(name, "prefix") == 0) snprintf(prefix, sizeof prefix, "%s", w);
            else if (strcmp(name, "log") == 0) snprintf(log_path, sizeof log_path, "%s", w);
            else if (strcmp(name, "deadline") == 0) deadline = strtod(w, NULL);
            else if (strcmp(name, "rate") == 0) rate = strtod(w, NULL);
            else if (strcmp(name, "start") == 0) start_at = strtod(w, NULL);
            else if (strcmp(name, "stop") == 0) stop_at = strtod(w, NULL);
            else if (strcmp(name, "seed") == 0) seed = strtoull(w, NULL, 10) * 2654435761u + 1;
            else if (strcmp(name, "hold_ms") == 0) hold_ms = strtol(w, NULL, 10);
        }
    }
    fclose(f);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: worker CONFIG\n");
        return 2;
    }
    read_config(argv[1]);
    rk_backend *backend = NULL;
    if (rk_backend_new_redis_cluster((const char *const *)seeds, seeds_len, prefix, RK_FAIL_CLOSED, 0, deadline,
                                     &backend) != RK_OK)
        die("rk_backend_new_redis_cluster");
    for (size_t i = 0; i < limiters_len; i++)
        if (rk_limiter_new_from_json(backend, limiters[i].name, limiters[i].spec, &limiters[i].limiter) != RK_OK)
            die(limiters[i].name);
    FILE *out = fopen(log_path, "a");
    if (!out) {
        perror(log_path);
        return 1;
    }
    setvbuf(out, NULL, _IOLBF, 0);

    size_t pairs = limiters_len * keys_len, order[MAX_ITEMS * 8];
    for (size_t i = 0; i < pairs; i++) order[i] = i;
    /* Connects to every master before the start (a peek on each limiter and key, not logged). */
    uint64_t start = (uint64_t)(start_at * 1e6);
    for (size_t i = 0; i < pairs; i++) {
        struct rk_decision d;
        while (wall_us() < start &&
               rk_limiter_peek(limiters[i / keys_len].limiter, keys[i % keys_len], &d) != RK_OK)
            sleep_us(50000);
    }
    sleep_us((int64_t)start - (int64_t)wall_us());
    uint64_t pause = (uint64_t)(1e6 / rate), next_at = mono_us();
    uint64_t stop = (uint64_t)(stop_at * 1e6);
    char status[64];
    while (wall_us() < stop) {
        for (size_t i = pairs - 1; i > 0; i--) {
            size_t j = next_random() % (i + 1), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (size_t p = 0; p < pairs && wall_us() < stop; p++) {
            struct limiter_conf *l = &limiters[order[p] / keys_len];
            const char *key = keys[order[p] % keys_len];
            uint64_t cost = 1 + next_random() % l->max_cost;
            struct rk_decision d;
            memset(&d, 0, sizeof d);
            uint64_t t0 = wall_us(), m0 = mono_us();
            enum rk_status s = rk_limiter_check(l->limiter, key, cost, &d);
            uint64_t dur = mono_us() - m0;
            if (s == RK_OK) snprintf(status, sizeof status, "%s", d.allowed ? "ok" : "over");
            else status_name(s, status, sizeof status);
            int leased = s == RK_OK && d.has_lease;
            fprintf(out, "%s %s c %s %llu %llu %llu %llu %llu\n", l->name, key, status, (unsigned long long)t0,
                    (unsigned long long)dur,
                    (unsigned long long)(leased ? d.lease.granted_at_us : (s == RK_OK ? d.decided_at_us : 0)),
                    (unsigned long long)cost, (unsigned long long)(leased ? d.lease.fencing_token : 0));
            if (leased) {
                sleep_us((int64_t)(next_random() % (uint64_t)(hold_ms * 1000 + 1)));
                t0 = wall_us();
                m0 = mono_us();
                s = rk_limiter_release(l->limiter, key, &d.lease);
                dur = mono_us() - m0;
                if (s == RK_OK) snprintf(status, sizeof status, "ok");
                else status_name(s, status, sizeof status);
                fprintf(out, "%s %s r %s %llu %llu 0 0 %llu\n", l->name, key, status, (unsigned long long)t0,
                        (unsigned long long)dur, (unsigned long long)d.lease.fencing_token);
            }
            next_at += pause;
            uint64_t now = mono_us();
            if (next_at < now) next_at = now;
            sleep_us((int64_t)(next_at - now));
        }
    }
    fclose(out);
    for (size_t i = 0; i < limiters_len; i++) rk_limiter_free(limiters[i].limiter);
    rk_backend_free(backend);
    return 0;
}
