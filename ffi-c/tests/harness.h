/* A minimal test harness: CHECK records a failure and goes on; each test passes when none of
 * its checks failed; main prints "N passed, N failed" and exits non-zero on any failure. */
#ifndef RK_TEST_HARNESS_H
#define RK_TEST_HARNESS_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ratekeeper.h"

extern int g_check_failures; /* failed checks in the current test */
extern const char *g_context; /* e.g. the backend the current test runs on */

static inline const char *last_error(void) {
  static _Thread_local char buf[1024];
  size_t n = 0;
  if (rk_last_error_message(buf, sizeof buf, &n) != RK_OK) {
    return "(rk_last_error_message failed)";
  }
  return buf;
}

static inline bool check_(bool ok, const char *what, const char *file, int line) {
  if (!ok) {
    g_check_failures++;
    fprintf(stderr, "    FAIL %s:%d [%s]: %s\n", file, line, g_context, what);
  }
  return ok;
}

static inline bool check_status_(rk_status got, rk_status want, const char *what, const char *file,
                                 int line) {
  if (got != want) {
    g_check_failures++;
    fprintf(stderr, "    FAIL %s:%d [%s]: %s returned %s, expected %s (last error: %s)\n", file,
            line, g_context, what, rk_status_name((uint32_t)got), rk_status_name((uint32_t)want),
            last_error());
    return false;
  }
  return true;
}

static inline bool check_u64_(uint64_t got, uint64_t want, const char *what, const char *file,
                              int line) {
  if (got != want) {
    g_check_failures++;
    fprintf(stderr, "    FAIL %s:%d [%s]: %s is %llu, expected %llu\n", file, line, g_context,
            what, (unsigned long long)got, (unsigned long long)want);
    return false;
  }
  return true;
}

/* The thread's last error message contains `needle`. */
static inline bool check_message_(const char *needle, const char *file, int line) {
  const char *message = last_error();
  if (strstr(message, needle) == NULL) {
    g_check_failures++;
    fprintf(stderr, "    FAIL %s:%d [%s]: last error \"%s\" does not mention \"%s\"\n", file, line,
            g_context, message, needle);
    return false;
  }
  return true;
}

#define CHECK(cond) check_((cond), #cond, __FILE__, __LINE__)
#define CHECK_STATUS(call, want) check_status_((call), (want), #call, __FILE__, __LINE__)
#define CHECK_OK(call) CHECK_STATUS(call, RK_OK)
#define CHECK_U64(got, want) check_u64_((got), (want), #got, __FILE__, __LINE__)
#define CHECK_MESSAGE(needle) check_message_((needle), __FILE__, __LINE__)

/* A failing call with the status it must return and a word its message must contain. */
#define CHECK_FAILS(call, want, needle)                                                           \
  do {                                                                                            \
    if (CHECK_STATUS(call, want)) CHECK_MESSAGE(needle);                                          \
  } while (0)

#endif
