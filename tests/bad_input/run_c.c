/* The shared bad-input table (tests/bad_input/cases.json) through the C ABI. It reads the cases
 * as lowered by tests/bad_input/lower_c.rb (one line each: the call, the expected status, the
 * parameter and the arguments as tokens) from stdin, makes each call, and checks its status,
 * that the last error message names the parameter (its first `quoted` word), and that nothing
 * was written: a limiter's peeks of the shared key and of key "k" are unchanged, and a backend
 * lists no override after a refused set_limit; a refused check_all leaves every part's peek of
 * key "t1" unchanged. Cases C cannot express arrive as "skip" lines
 * and are reported with their reason. Ends with "N passed, N failed" (scripts/test-c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ratekeeper.h"

#define MAX_TOKENS 64
#define START_US 1700000000000000ULL

typedef struct {
  char *tok[MAX_TOKENS];
  int n;
  int next;
  char *strings[MAX_TOKENS]; /* decoded strings, freed after the case */
  int nstrings;
  const char *bad; /* set when a token is malformed */
} args_t;

static const char *next_token(args_t *a) {
  if (a->next >= a->n) {
    a->bad = "too few arguments";
    return "N";
  }
  return a->tok[a->next++];
}

/* `s:<hex>` (a NUL-terminated copy) or `N` (NULL). */
static const char *arg_str(args_t *a) {
  const char *t = next_token(a);
  if (strcmp(t, "N") == 0) return NULL;
  if (strncmp(t, "s:", 2) != 0 || a->nstrings == MAX_TOKENS) {
    a->bad = "expected a string token";
    return "";
  }
  size_t len = strlen(t + 2) / 2;
  char *s = malloc(len + 1);
  for (size_t i = 0; i < len; i++) {
    unsigned int byte = 0;
    sscanf(t + 2 + 2 * i, "%2x", &byte);
    s[i] = (char)byte;
  }
  s[len] = '\0';
  a->strings[a->nstrings++] = s;
  return s;
}

static uint64_t arg_u64(args_t *a) {
  const char *t = next_token(a);
  if (strncmp(t, "u:", 2) != 0) {
    a->bad = "expected an unsigned token";
    return 0;
  }
  return strtoull(t + 2, NULL, 10);
}

static double arg_f64(args_t *a) {
  const char *t = next_token(a);
  if (strncmp(t, "d:", 2) != 0) {
    a->bad = "expected a double token";
    return 0;
  }
  return strtod(t + 2, NULL); /* reads nan, inf and -inf too */
}

static rk_status status_of_name(const char *name) {
  for (uint32_t s = 0; s <= 11; s++) {
    if (strcmp(rk_status_name(s), name) == 0) return (rk_status)s;
  }
  return RK_UNKNOWN_ERROR;
}

static const char *last_error(void) {
  static char buf[2048];
  size_t n = 0;
  if (rk_last_error_message(buf, sizeof buf, &n) != RK_OK) return "(no message)";
  return buf;
}

static char g_message[2048]; /* the call's own message, kept past the checks' calls */

/* The first `quoted` word of the last error: the parameter it names. */
static void named_parameter(char *out, size_t len) {
  const char *m = last_error();
  snprintf(g_message, sizeof g_message, "%s", m);
  const char *open = strchr(m, '`');
  const char *close = open ? strchr(open + 1, '`') : NULL;
  out[0] = '\0';
  if (open && close && (size_t)(close - open - 1) < len) {
    memcpy(out, open + 1, (size_t)(close - open - 1));
    out[close - open - 1] = '\0';
  }
}

typedef struct {
  bool allowed;
  uint64_t remaining, retry_after_us;
} peeked_t;

/* Field by field: a struct's padding bytes are unspecified, so memcmp may see a difference
 * where there is none (or none where there is one, if the compiler reuses storage). */
static bool same_peek(const peeked_t *a, const peeked_t *b) {
  return a->allowed == b->allowed && a->remaining == b->remaining && a->retry_after_us == b->retry_after_us;
}

static bool peek_key(const rk_limiter *l, const char *key, peeked_t *out) {
  rk_decision d;
  if (rk_limiter_peek(l, key, &d) != RK_OK) return false;
  *out = (peeked_t){d.allowed, d.remaining, d.retry_after_us};
  return true;
}

/* What peeks of the shared key and of key "k" see: a refused call must not change it. */
static bool snapshot(const rk_limiter *l, peeked_t out[2]) {
  return peek_key(l, NULL, &out[0]) && peek_key(l, "k", &out[1]);
}

static bool same_snapshot(const peeked_t a[2], const peeked_t b[2]) {
  return same_peek(&a[0], &b[0]) && same_peek(&a[1], &b[1]);
}

/* Whether a backend lists an override (a refused set_limit must write none). */
static bool has_override(const rk_backend *b) {
  char *json = NULL;
  if (rk_backend_limiters_json(b, &json) != RK_OK) return true;
  bool found = strstr(json, "\"overrides\":[{") != NULL;
  rk_string_free(json);
  return found;
}

static rk_backend *fresh_backend(void) {
  rk_manual_clock *clock = NULL;
  rk_backend *b = NULL;
  rk_manual_clock_new(START_US, &clock);
  rk_backend_new_memory_with_clock(clock, &b);
  rk_manual_clock_free(clock);
  return b;
}

/* A check_all part is four tokens (lower_c.rb): at most this many parts fit in a line. */
#define MAX_PARTS (MAX_TOKENS / 4)

/* rk_backend_check_all with each part's limiter built from its spec on one fresh backend (or,
 * for a part marked so, on another); a refused call must change no part's state (each part's
 * limiter peeked at key "t1", the key the table's parts use, before and after). */
static rk_status run_check_all(args_t *a, bool *untouched, char *param, size_t plen) {
  rk_status st = RK_UNKNOWN_ERROR;
  rk_backend *b = fresh_backend(), *other = fresh_backend();
  rk_limiter *built[MAX_PARTS] = {0};
  rk_check_all_part parts[MAX_PARTS];
  peeked_t before[MAX_PARTS], after[MAX_PARTS];
  size_t n = (size_t)arg_u64(a);
  if (n > MAX_PARTS) {
    a->bad = "too many parts";
    n = 0;
  }
  for (size_t i = 0; i < n && !a->bad; i++) {
    const char *spec = arg_str(a);
    const char *key = arg_str(a);
    uint64_t cost = arg_u64(a);
    bool on_other = arg_u64(a) != 0;
    char name[32];
    snprintf(name, sizeof name, "part%zu", i);
    if (a->bad || rk_limiter_new_from_json(on_other ? other : b, name, spec, &built[i]) != RK_OK ||
        !peek_key(built[i], "t1", &before[i])) {
      fprintf(stderr, "    part %zu's limiter is refused: %s\n", i, last_error());
      if (!a->bad) a->bad = "bad part limiter spec";
    }
    parts[i] = (rk_check_all_part){.limiter = built[i], .key = key, .cost = cost};
  }
  if (!a->bad) {
    rk_decision decisions[MAX_PARTS];
    bool allowed = false;
    uint64_t retry_after_us = 0;
    /* `parts` is never NULL, even with no parts: the case is about the count. */
    st = rk_backend_check_all(b, parts, n, decisions, &allowed, &retry_after_us);
    named_parameter(param, plen);
    for (size_t i = 0; i < n; i++) {
      if (!peek_key(built[i], "t1", &after[i]) || !same_peek(&before[i], &after[i])) *untouched = false;
    }
  }
  for (size_t i = 0; i < MAX_PARTS; i++) rk_limiter_free(built[i]);
  rk_backend_free(other);
  rk_backend_free(b);
  return st;
}

/* Makes the call; returns its status. `untouched` is cleared when it wrote state. The status
 * and last error are those of the call itself (checks run after the message is read). */
static rk_status run(const char *call, args_t *a, bool *untouched, char *param, size_t plen) {
  rk_status st = RK_UNKNOWN_ERROR;
  rk_backend *b = NULL;
  rk_limiter *l = NULL;
  *untouched = true;
  if (strcmp(call, "memory") == 0) {
    uint64_t max_keys = arg_u64(a);
    st = rk_backend_new_memory_with(max_keys, &b);
  } else if (strcmp(call, "redis") == 0 || strcmp(call, "cluster") == 0) {
    bool cluster = strcmp(call, "cluster") == 0;
    const char *seeds[MAX_TOKENS] = {0};
    size_t nseeds = 0;
    const char *url = NULL;
    if (cluster) {
      nseeds = (size_t)arg_u64(a);
      for (size_t i = 0; i < nseeds && i < MAX_TOKENS; i++) seeds[i] = arg_str(a);
    } else {
      url = arg_str(a);
    }
    const char *prefix = arg_str(a);
    uint32_t policy = (uint32_t)arg_u64(a);
    uint32_t divisor = (uint32_t)arg_u64(a);
    double deadline = arg_f64(a);
    st = cluster ? rk_backend_new_redis_cluster(nseeds ? seeds : NULL, nseeds, prefix, policy, divisor, deadline, &b)
                 : rk_backend_new_redis(url, prefix, policy, divisor, deadline, &b);
  } else if (strcmp(call, "backend_json") == 0) {
    st = rk_backend_new_from_json(arg_str(a), &b);
  } else if (strcmp(call, "manual_clock") == 0) {
    rk_manual_clock *c = NULL;
    st = rk_manual_clock_new(arg_u64(a), &c);
    rk_manual_clock_free(c);
  } else if (strcmp(call, "advance") == 0) {
    rk_manual_clock *c = NULL;
    rk_manual_clock_new(START_US, &c);
    st = rk_manual_clock_advance(c, arg_u64(a));
    rk_manual_clock_free(c);
  } else if (strcmp(call, "backoff") == 0 || strcmp(call, "reschedule_in") == 0) {
    rk_backoff *bo = NULL;
    if (strcmp(call, "backoff") == 0) {
      double base = arg_f64(a), jitter = arg_f64(a);
      uint32_t max = (uint32_t)arg_u64(a);
      st = rk_backoff_new(base, jitter, max, 1, &bo);
    } else {
      rk_backoff_new(300, 300, 20, 1, &bo);
      uint32_t attempt = (uint32_t)arg_u64(a);
      uint64_t retry_after = arg_u64(a);
      bool again = false;
      uint64_t delay = 0;
      st = rk_backoff_reschedule_in(bo, attempt, retry_after, &again, &delay);
    }
    rk_backoff_free(bo);
  } else if (strcmp(call, "http_rules") == 0) {
    /* The HTTP middleware's options the library validates: header form, trusted proxies, proxy
     * header, partition key secret (its length is the string's). */
    const char *headers = arg_str(a);
    size_t ntrusted = (size_t)arg_u64(a);
    const char *trusted[MAX_TOKENS] = {0};
    for (size_t i = 0; i < ntrusted && i < MAX_TOKENS; i++) trusted[i] = arg_str(a);
    const char *proxy_header = arg_str(a);
    const char *secret = arg_str(a);
    rk_http_rules *rules = NULL;
    st = rk_http_rules_new(headers, ntrusted ? trusted : NULL, ntrusted, proxy_header, (const uint8_t *)secret,
                           secret ? strlen(secret) : 0, &rules);
    rk_http_rules_free(rules);
  } else if (strcmp(call, "check_all") == 0) {
    st = run_check_all(a, untouched, param, plen);
  } else if (strcmp(call, "set_limit") == 0 || strcmp(call, "clear_limit") == 0) {
    b = fresh_backend();
    const char *name = arg_str(a);
    if (strcmp(call, "set_limit") == 0) {
      const char *spec = arg_str(a);
      st = rk_backend_set_limit(b, name, spec, arg_str(a));
    } else {
      st = rk_backend_clear_limit(b, name, arg_str(a));
    }
    named_parameter(param, plen);
    *untouched = !has_override(b);
  } else {
    b = fresh_backend();
    const char *spec_or_name = arg_str(a);
    if (strcmp(call, "limiter") == 0) {
      st = rk_limiter_new_from_json(b, spec_or_name, arg_str(a), &l);
    } else if (strcmp(call, "parse_rate") == 0) {
      rk_window_limit parsed[16];
      size_t parsed_len = 0;
      st = rk_parse_rate(spec_or_name, parsed, 16, &parsed_len);
    } else if (strcmp(call, "bucket") == 0 || strcmp(call, "window") == 0) {
      uint64_t limit = arg_u64(a);
      double interval = arg_f64(a);
      st = (call[0] == 'b' ? rk_limiter_new_bucket : rk_limiter_new_window)(b, spec_or_name, limit, interval, &l);
    } else if (strcmp(call, "windows") == 0) {
      rk_window_limit w[MAX_TOKENS];
      size_t n = (size_t)arg_u64(a);
      for (size_t i = 0; i < n && i < MAX_TOKENS; i++) {
        w[i].limit = arg_u64(a);
        w[i].interval_secs = arg_f64(a);
      }
      st = rk_limiter_new_windows(b, spec_or_name, w, n, &l);
    } else if (strcmp(call, "sliding_window") == 0) {
      rk_sliding_limit s[MAX_TOKENS];
      size_t n = (size_t)arg_u64(a);
      for (size_t i = 0; i < n && i < MAX_TOKENS; i++) {
        s[i].duration_secs = arg_f64(a);
        s[i].limit = arg_u64(a);
        s[i].precision_secs = arg_f64(a);
      }
      st = rk_limiter_new_sliding_window(b, spec_or_name, s, n, &l);
    } else if (strcmp(call, "token_bucket") == 0) {
      double rate = arg_f64(a);
      st = rk_limiter_new_token_bucket(b, spec_or_name, rate, arg_u64(a), &l);
    } else if (strcmp(call, "leaky") == 0 || strcmp(call, "points") == 0) {
      uint64_t size = arg_u64(a);
      double secs = arg_f64(a);
      st = (call[0] == 'l' ? rk_limiter_new_leaky : rk_limiter_new_points)(b, spec_or_name, size, secs, &l);
    } else if (strcmp(call, "concurrent") == 0) {
      uint64_t limit = arg_u64(a);
      double lock = arg_f64(a), wait = arg_f64(a);
      st = rk_limiter_new_concurrent(b, spec_or_name, limit, lock, wait, &l);
    } else if (strcmp(call, "calendar") == 0) {
      uint64_t limit = arg_u64(a);
      const char *period = arg_str(a);
      const char *tz = arg_str(a);
      st = rk_limiter_new_calendar(b, spec_or_name, limit, period, tz, (uint32_t)arg_u64(a), &l);
    } else {
      /* A call on a limiter built from the spec: snapshot, call, compare. */
      if (rk_limiter_new_from_json(b, "bad-input", spec_or_name, &l) != RK_OK) {
        fprintf(stderr, "    the case's limiter spec is refused: %s\n", last_error());
        a->bad = "bad limiter spec";
      } else {
        peeked_t before[2], after[2];
        snapshot(l, before);
        const char *key = arg_str(a);
        rk_decision d;
        if (strcmp(call, "check") == 0) {
          st = rk_limiter_check(l, key, arg_u64(a), &d);
        } else if (strcmp(call, "peek") == 0) {
          st = rk_limiter_peek(l, key, &d);
        } else if (strcmp(call, "reset") == 0) {
          st = rk_limiter_reset(l, key);
        } else if (strcmp(call, "acquire") == 0) {
          uint64_t cost = arg_u64(a);
          st = rk_limiter_acquire(l, key, cost, arg_f64(a), &d);
        } else if (strcmp(call, "points_used") == 0) {
          uint64_t estimate = arg_u64(a);
          st = rk_limiter_points_used(l, key, estimate, arg_u64(a), &d);
        } else if (strcmp(call, "settle") == 0) {
          /* The decision named by the case (see the table's `conventions.settle`); NULL for null. */
          const char *which = arg_str(a);
          uint64_t actual = arg_u64(a);
          rk_decision given;
          memset(&given, 0, sizeof given);
          if (which != NULL && strcmp(which, "peek") == 0) {
            rk_limiter_peek(l, NULL, &given);
          } else if (which != NULL && strcmp(which, "other_limiter") == 0) {
            rk_limiter *other = NULL;
            if (rk_limiter_new_from_json(b, "bad-input-other", spec_or_name, &other) == RK_OK) {
              rk_limiter_check(other, NULL, 0, &given);
              rk_limiter_free(other);
            }
          } else if (which != NULL) {
            rk_limiter_check(l, NULL, 0, &given);
          }
          st = rk_limiter_settle(l, key, which != NULL ? &given : NULL, actual, &d);
        } else if (strcmp(call, "pause") == 0) {
          uint64_t in_effect = 0;
          st = rk_limiter_pause(l, key, arg_f64(a), &in_effect);
        } else if (strcmp(call, "resume") == 0) {
          bool was_paused = false;
          st = rk_limiter_resume(l, key, &was_paused);
        } else if (strcmp(call, "with_max_pause") == 0) {
          rk_limiter *copy = NULL;
          st = rk_limiter_with_max_pause(l, arg_f64(a), &copy);
          rk_limiter_free(copy);
        } else if (strcmp(call, "block") == 0) {
          uint64_t in_effect = 0;
          st = rk_limiter_block(l, key, arg_f64(a), &in_effect);
        } else if (strcmp(call, "unblock") == 0) {
          bool was_blocked = false;
          st = rk_limiter_unblock(l, key, &was_blocked);
        } else if (strcmp(call, "with_block_for") == 0) {
          rk_limiter *copy = NULL;
          st = rk_limiter_with_block_for(l, arg_f64(a), &copy);
          rk_limiter_free(copy);
        } else if (strcmp(call, "observe") == 0) {
          uint32_t status = (uint32_t)arg_u64(a);
          size_t n = (size_t)arg_u64(a);
          const char *names[MAX_TOKENS], *values[MAX_TOKENS];
          for (size_t i = 0; i < n && i < MAX_TOKENS; i++) {
            names[i] = arg_str(a);
            values[i] = arg_str(a);
          }
          uint64_t pause = 0;
          st = rk_limiter_observe(l, key, status, n ? names : NULL, n ? values : NULL, n, &pause);
        } else {
          a->bad = "unknown call";
        }
        named_parameter(param, plen);
        *untouched = snapshot(l, after) && same_snapshot(before, after);
      }
    }
  }
  if (g_message[0] == '\0' && param[0] == '\0') named_parameter(param, plen);
  rk_limiter_free(l);
  rk_backend_free(b);
  return st;
}

int main(void) {
  static char line[1 << 16];
  int passed = 0, failed = 0, skipped = 0;
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\n")] = '\0';
    char *fields[MAX_TOKENS + 5];
    int nf = 0;
    for (char *f = strtok(line, "\t"); f && nf < MAX_TOKENS + 5; f = strtok(NULL, "\t")) fields[nf++] = f;
    if (nf >= 3 && strcmp(fields[0], "skip") == 0) {
      printf("  skipped %s: not expressible in C (%s)\n", fields[1], fields[2]);
      skipped++;
      continue;
    }
    if (nf < 5 || strcmp(fields[0], "case") != 0) {
      fprintf(stderr, "malformed line: %s\n", fields[0]);
      failed++;
      continue;
    }
    const char *name = fields[1], *call = fields[2], *want_param = fields[4];
    rk_status want = status_of_name(fields[3]);
    args_t a = {.n = nf - 5, .next = 0, .nstrings = 0, .bad = NULL};
    for (int i = 0; i < a.n; i++) a.tok[i] = fields[5 + i];
    char got_param[256] = "";
    g_message[0] = '\0';
    bool untouched = true;
    rk_status got = run(call, &a, &untouched, got_param, sizeof got_param);
    const char *message = g_message;
    bool ok = !a.bad && got == want && strcmp(got_param, want_param) == 0 && untouched;
    if (ok) {
      passed++;
    } else {
      failed++;
      fprintf(stderr, "  FAIL %s: %s; got %s naming `%s` (%s), expected %s naming `%s`%s\n", name,
              a.bad ? a.bad : "", rk_status_name((uint32_t)got), got_param, message, fields[3], want_param,
              untouched ? "" : "; and it wrote state");
    }
    for (int i = 0; i < a.nstrings; i++) free(a.strings[i]);
  }
  printf("bad input through the C ABI: %d skipped (not expressible in C)\n", skipped);
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 && passed > 0 ? 0 : 1;
}
