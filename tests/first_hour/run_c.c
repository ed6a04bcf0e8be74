/* The first-hour table (tests/first_hour/cases.json) through the C ABI. Reads the cases as
 * tests/first_hour/run_c.rb lowers them (one tab-separated line each: id, call, error, url,
 * name, spec, other_spec, then the key words; "-" for an empty field), makes each call, and
 * checks its status and that rk_last_error_message holds every key word. Ends with
 * "N passed, N failed" (scripts/test-c). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ratekeeper.h"

#define MAX_FIELDS 16

static char message[4096];

static void last_message(void) {
  size_t n = 0;
  message[0] = '\0';
  rk_last_error_message(message, sizeof message, &n);
}

/* The status of the case's call, with the message of its failure in `message`. */
static enum rk_status run(const char *call, const char *url, const char *name, const char *spec,
                          const char *other_spec) {
  struct rk_backend *backend = NULL;
  struct rk_limiter *limiter = NULL;
  struct rk_decision decision;
  enum rk_status status;
  if (strcmp(call, "check_redis") == 0 || strcmp(call, "set_limit_other_kind") == 0) {
    /* A prefix of this process's own, so reruns on one Redis never meet an earlier run's
     * registry entry. */
    char prefix[64];
    snprintf(prefix, sizeof prefix, "c-first-hour-%ld", (long)rand());
    status = rk_backend_new_redis(url, prefix, RK_FAIL_CLOSED, 1, 5.0, &backend);
    if (status == RK_OK) status = rk_limiter_new_from_json(backend, name, spec, &limiter);
    if (status == RK_OK) status = rk_limiter_check(limiter, NULL, 1, &decision);
    if (status == RK_OK && strcmp(call, "set_limit_other_kind") == 0) {
      status = rk_backend_flush(backend);
      if (status == RK_OK) status = rk_backend_set_limit(backend, name, other_spec, NULL);
    }
  } else if (strcmp(call, "new_redis") == 0) {
    status = rk_backend_new_redis(url, NULL, RK_FAIL_CLOSED, 1, 0, &backend);
  } else if (strcmp(call, "new_limiter") == 0) {
    status = rk_backend_new_memory(&backend);
    if (status == RK_OK) status = rk_limiter_new_from_json(backend, name, spec, &limiter);
  } else {
    snprintf(message, sizeof message, "the runner does not know the call %s", call);
    return RK_UNKNOWN_ERROR;
  }
  if (status != RK_OK) last_message();
  rk_limiter_free(limiter);
  rk_backend_free(backend);
  return status;
}

static enum rk_status expected_status(const char *error) {
  if (strcmp(error, "invalid_argument") == 0) return RK_INVALID_ARGUMENT;
  if (strcmp(error, "backend_unavailable") == 0) return RK_BACKEND_UNAVAILABLE;
  return RK_UNKNOWN_ERROR;
}

int main(void) {
  char line[8192];
  int passed = 0, failed = 0;
  srand((unsigned)getpid());
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\n")] = '\0';
    char *field[MAX_FIELDS];
    int n = 0;
    for (char *save = NULL, *f = strtok_r(line, "\t", &save); f && n < MAX_FIELDS; f = strtok_r(NULL, "\t", &save)) {
      field[n++] = strcmp(f, "-") == 0 ? NULL : f;
    }
    if (n < 8) {
      printf("malformed line (%d fields)\n", n);
      failed++;
      continue;
    }
    const char *id = field[0];
    enum rk_status want = expected_status(field[2]);
    enum rk_status got = run(field[1], field[3], field[4], field[5], field[6]);
    int ok = got == want;
    if (!ok) printf("FAIL %s: status %s, expected %s (%s)\n", id, rk_status_name(got), rk_status_name(want), message);
    for (int i = 7; ok && i < n; i++) {
      if (!strstr(message, field[i])) {
        printf("FAIL %s: the message lacks \"%s\": %s\n", id, field[i], message);
        ok = 0;
      }
    }
    if (ok) printf("ok %s\n", id);
    ok ? passed++ : failed++;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
