/* A random-input driver for every rk_* entry point, built by scripts/test-c with
 * -fsanitize=address,undefined and LeakSanitizer on.
 *
 * Each iteration calls one entry point with arguments drawn from hostile pools: NULL pointers,
 * empty, over-long, non-UTF-8 and surrogate-encoding strings, NaN, infinities, negative and huge
 * numbers, 2^53 + 1, random lease ids, handles of every limiter kind on the memory backend and,
 * when RK_TEST_REDIS_URL is set, on Redis. What must hold for every call:
 *  - the status is one the header declares, and never RK_PANIC (a caught panic is still a bug);
 *  - a failed call leaves a non-empty message, and argument errors name something;
 *  - a successful constructor returns a handle (freed again: LeakSanitizer checks at exit);
 *  - the sanitizers report nothing (the process aborts on the first report).
 * The sequence is reproducible: RK_FUZZ_SEED (default 1) and RK_FUZZ_ITERATIONS (default
 * 5000; a long run uses millions). Prints "N passed, N failed" last. */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

int g_check_failures;
const char *g_context = "fuzz";

/* ---------------------------------------------------------------- randomness (xorshift64*) */

static uint64_t g_state = 1;

static uint64_t next(void) {
  g_state ^= g_state >> 12;
  g_state ^= g_state << 25;
  g_state ^= g_state >> 27;
  return g_state * 0x2545F4914F6CDD1DULL;
}

static size_t below(size_t n) { return (size_t)(next() % n); }

/* ---------------------------------------------------------------- hostile pools */

static char g_long_name[300];
static char g_long_key[2100];
static char g_random_bytes[64];

static const char *pick_string(void) {
  /* Half the time a valid name or key, so that calls get past validation too. */
  if (below(2)) return below(2) ? "api" : "tenant-7";
  static const char *const pool[] = {
      NULL,           "",          "api",       "a-b_C9",       "with space", "sl/ash",
      "\xff\xfe",     "caf\xc3",   "\xed\xa0\x80" /* an encoded lone surrogate */,
      "\xc0\x80" /* overlong NUL */, "\xf4\x90\x80\x80" /* above U+10FFFF */, "emoji\xf0\x9f\x98\x80",
      "tenant-7",     "{hash}tag", "\n\r\t",
  };
  size_t n = sizeof pool / sizeof pool[0];
  size_t i = below(n + 3);
  if (i == n) return g_long_name;
  if (i == n + 1) return g_long_key;
  if (i == n + 2) {
    /* Random bytes, NUL-terminated somewhere inside. */
    for (size_t j = 0; j + 1 < sizeof g_random_bytes; j++) g_random_bytes[j] = (char)next();
    g_random_bytes[below(sizeof g_random_bytes)] = '\0';
    g_random_bytes[sizeof g_random_bytes - 1] = '\0';
    return g_random_bytes;
  }
  return pool[i];
}

static double pick_double(void) {
  if (below(2)) return 0.001 * (double)(1 + below(5000));
  static const double pool[] = {0.0,    -0.0,  1.0,     0.5,      -1.0,   1e-300, 1e-7,
                                1e300,  60.0,  3600.0,  86400.0,  1e9,    4e9,    DBL_MAX,
                                -DBL_MAX, DBL_MIN, 1e6, 1e6 + 1, 0.001, 1.5};
  size_t n = sizeof pool / sizeof pool[0];
  size_t i = below(n + 4);
  if (i == n) return NAN;
  if (i == n + 1) return INFINITY;
  if (i == n + 2) return -INFINITY;
  if (i == n + 3) return (double)(next() % 100000) / 100.0;
  return pool[i];
}

static uint64_t pick_count(void) {
  if (below(2)) return 1 + below(10);
  static const uint64_t pool[] = {0, 1, 2, 5, 100, RK_MAX_COUNT, RK_MAX_COUNT + 1, UINT64_MAX,
                                  UINT64_MAX / 2, 1000000};
  size_t n = sizeof pool / sizeof pool[0];
  size_t i = below(n + 1);
  return i == n ? next() : pool[i];
}

/* ---------------------------------------------------------------- handles */

#define MAX_BACKENDS 3
#define MAX_LIMITERS 24

static rk_backend *g_backends[MAX_BACKENDS];
static rk_manual_clock *g_clock;
static size_t g_n_backends;
static rk_limiter *g_limiters[MAX_LIMITERS];
static size_t g_n_limiters;

static const rk_backend *pick_backend(void) {
  size_t i = below(g_n_backends + 1);
  return i == g_n_backends ? NULL : g_backends[i];
}

static const rk_limiter *pick_limiter(void) {
  size_t i = below(g_n_limiters + 1);
  return i == g_n_limiters ? NULL : g_limiters[i];
}

/* Keeps a new limiter (replacing a random one when full) so later calls use it. */
static void keep(rk_limiter *limiter) {
  if (g_n_limiters < MAX_LIMITERS) {
    g_limiters[g_n_limiters++] = limiter;
    return;
  }
  size_t i = below(MAX_LIMITERS);
  rk_limiter_free(g_limiters[i]);
  g_limiters[i] = limiter;
}

/* ---------------------------------------------------------------- the contract of one call */

static uint64_t g_calls, g_ok, g_errors;

static void verify(rk_status status, const char *what) {
  g_calls++;
  if (!CHECK(status <= RK_BACKEND_REJECTED)) {
    fprintf(stderr, "    %s returned an undeclared status %u\n", what, (unsigned)status);
    return;
  }
  if (!CHECK(status != RK_PANIC)) {
    fprintf(stderr, "    %s panicked inside the library: %s\n", what, last_error());
    return;
  }
  if (status == RK_OK || status == RK_OVER_LIMIT) {
    g_ok++;
    return;
  }
  g_errors++;
  const char *message = last_error();
  if (!CHECK(message[0] != '\0')) fprintf(stderr, "    %s failed with an empty message\n", what);
}

static void constructed(rk_status status, rk_limiter *limiter, const char *what) {
  /* Called through BUILD, after the constructor returned (C leaves argument order open). */
  verify(status, what);
  if (status == RK_OK) {
    if (CHECK(limiter != NULL)) keep(limiter);
  } else {
    CHECK(limiter == NULL);
  }
}

/* Calls started with rk_limiter_check_start and the other *_start functions, and their
 * callbacks (on runtime threads: counted atomically, judged at the end). A callback must come
 * exactly once, with a declared status other than RK_PANIC, a message exactly on failure, and no
 * decision on a failure other than an acquire's RK_OVER_LIMIT (a release has none on RK_OK). */
static atomic_ullong g_started, g_completed, g_bad_completions;

static void completed(void *user_data, rk_status status, const rk_decision *decision,
                      const char *message) {
  bool ok = user_data == (void *)&g_started && status <= RK_BACKEND_REJECTED && status != RK_PANIC &&
            message != NULL &&
            (status == RK_OK ? message[0] == '\0'
                             : message[0] != '\0' && (decision == NULL || status == RK_OVER_LIMIT));
  if (!ok) {
    fprintf(stderr, "    rk_limiter_check_start completed with %s: %s\n", rk_status_name((uint32_t)status),
            message ? message : "(NULL message)");
    atomic_fetch_add(&g_bad_completions, 1);
  }
  atomic_fetch_add(&g_completed, 1);
}

/* Runs a constructor writing to `out`, then checks and keeps what it built. */
#define BUILD(call, what)                                                                         \
  do {                                                                                            \
    rk_status status_ = (call);                                                                   \
    constructed(status_, out, what);                                                              \
  } while (0)

/* ---------------------------------------------------------------- one random call */

static void one_call(void) {
  rk_limiter *out = NULL;
  rk_decision decision;
  switch (below(28)) {
  case 0:
    BUILD(rk_limiter_new_concurrent(pick_backend(), pick_string(), pick_count(), pick_double(),
                                          pick_double(), &out), "rk_limiter_new_concurrent");
    break;
  case 1:
    BUILD(rk_limiter_new_bucket(pick_backend(), pick_string(), pick_count(), pick_double(), &out), "rk_limiter_new_bucket");
    break;
  case 2:
    BUILD(rk_limiter_new_window(pick_backend(), pick_string(), pick_count(), pick_double(), &out), "rk_limiter_new_window");
    break;
  case 3: {
    rk_window_limit windows[4];
    size_t n = below(5);
    for (size_t i = 0; i < n; i++) windows[i] = (rk_window_limit){pick_count(), pick_double()};
    /* A NULL array with a length, or a real one with length 0. */
    const rk_window_limit *array = below(6) == 0 ? NULL : windows;
    BUILD(rk_limiter_new_windows(pick_backend(), pick_string(), array, array ? n : below(3), &out), "rk_limiter_new_windows");
    break;
  }
  case 4: {
    rk_sliding_limit limits[4];
    size_t n = below(5);
    for (size_t i = 0; i < n; i++) limits[i] = (rk_sliding_limit){pick_double(), pick_count(), pick_double()};
    const rk_sliding_limit *array = below(6) == 0 ? NULL : limits;
    BUILD(
        rk_limiter_new_sliding_window(pick_backend(), pick_string(), array, array ? n : below(3), &out), "rk_limiter_new_sliding_window");
    break;
  }
  case 5:
    BUILD(rk_limiter_new_token_bucket(pick_backend(), pick_string(), pick_double(), pick_count(), &out), "rk_limiter_new_token_bucket");
    break;
  case 6:
    BUILD(rk_limiter_new_leaky(pick_backend(), pick_string(), pick_count(), pick_double(), &out), "rk_limiter_new_leaky");
    break;
  case 7:
    BUILD(rk_limiter_new_points(pick_backend(), pick_string(), pick_count(), pick_double(), &out), "rk_limiter_new_points");
    break;
  case 8:
    BUILD(rk_limiter_with_allow_fallback(pick_limiter(), next() & 1, below(8) ? &out : NULL), "rk_limiter_with_allow_fallback");
    break;
  case 9:
    verify(rk_limiter_check(pick_limiter(), pick_string(), below(2) ? 1 : pick_count(),
                            below(8) ? &decision : NULL),
           "rk_limiter_check");
    break;
  case 10: {
    /* A started call; the limiter may be freed (replaced by keep) while it is in flight. Waits
     * are bounded as case 12's. */
    const rk_limiter *limiter = pick_limiter();
    const char *key = pick_string();
    rk_completion_fn callback = below(8) ? completed : NULL;
    rk_lease lease = {next(), next(), next(), next()};
    rk_decision d = {.allowed = next() & 1, .remaining = pick_count()};
    d.settle = (rk_settle_ticket){next() & 1, next(), pick_count(), next(), next()};
    double wait = below(2) ? 0.0 : pick_double();
    if (isfinite(wait) && wait > 0.01) wait = 0.01;
    rk_status s = RK_OK;
    const char *what = "";
    switch (below(5)) {
    case 0:
      s = rk_limiter_check_start(limiter, key, below(2) ? 1 : pick_count(), callback, &g_started);
      what = "rk_limiter_check_start";
      break;
    case 1:
      s = rk_limiter_peek_start(limiter, key, callback, &g_started);
      what = "rk_limiter_peek_start";
      break;
    case 2:
      s = rk_limiter_acquire_start(limiter, key, below(4) ? 1 : pick_count(), wait, callback, &g_started);
      what = "rk_limiter_acquire_start";
      break;
    case 3:
      s = rk_limiter_settle_start(limiter, key, below(8) ? &d : NULL, pick_count(), callback, &g_started);
      what = "rk_limiter_settle_start";
      break;
    default:
      s = rk_limiter_release_start(limiter, key, below(6) ? &lease : NULL, callback, &g_started);
      what = "rk_limiter_release_start";
    }
    verify(s, what);
    if (s == RK_OK) atomic_fetch_add(&g_started, 1);
    break;
  }
  case 11:
    verify(rk_limiter_peek(pick_limiter(), pick_string(), below(8) ? &decision : NULL), "rk_limiter_peek");
    break;
  case 12: {
    /* Waiting is bounded so that a full concurrent limiter cannot stall the run. */
    double wait = below(2) ? 0.0 : (below(2) ? pick_double() : RK_WAIT_DEFAULT);
    if (isfinite(wait) && wait > 0.01) wait = 0.01;
    const rk_limiter *limiter = pick_limiter();
    const char *key = pick_string();
    rk_status s = rk_limiter_acquire(limiter, key, below(4) ? 1 : pick_count(), wait, &decision);
    verify(s, "rk_limiter_acquire");
    if (s == RK_OK && decision.has_lease && below(2)) {
      verify(rk_limiter_release(limiter, key, &decision.lease), "rk_limiter_release (granted)");
    }
    break;
  }
  case 13: {
    rk_lease lease = {next(), next(), next(), next()};
    verify(below(2) ? rk_limiter_release(pick_limiter(), pick_string(), below(6) ? &lease : NULL)
                    : rk_limiter_extend(pick_limiter(), pick_string(), below(6) ? &lease : NULL),
           "rk_limiter_release/extend");
    break;
  }
  case 14:
    verify(rk_limiter_reset(pick_limiter(), pick_string()), "rk_limiter_reset");
    break;
  case 15:
    verify(rk_limiter_points_used(pick_limiter(), pick_string(), pick_count(), pick_count(),
                                  below(8) ? &decision : NULL),
           "rk_limiter_points_used");
    break;
  case 27: {
    /* A settle of a fresh check's decision, of a random ticket, or of nothing. */
    rk_decision settled;
    const rk_limiter *l = pick_limiter();
    const char *key = pick_string();
    rk_status s = rk_limiter_check(l, key, pick_count(), &decision);
    if (s != RK_OK || below(4) == 0) {
      memset(&decision, 0, sizeof decision);
      decision.allowed = below(2);
      decision.settle.settleable = below(2);
      decision.settle.id = next();
      decision.settle.cost = pick_count();
      decision.settle.charged_at_us = next();
      decision.settle.limiter = next();
    }
    verify(rk_limiter_settle(below(8) ? l : NULL, key, below(8) ? &decision : NULL, pick_count(),
                             below(8) ? &settled : NULL),
           "rk_limiter_settle");
    /* Its seal, then a sealed settle with that seal, a random string or nothing. */
    rk_settle_seal seal;
    memset(&seal, 0, sizeof seal);
    verify(rk_limiter_seal_ticket(below(8) ? l : NULL, key, below(8) ? &decision : NULL, below(8) ? &seal : NULL),
           "rk_limiter_seal_ticket");
    verify(rk_limiter_settle_sealed(below(8) ? l : NULL, key, below(8) ? &decision : NULL, pick_count(),
                                    below(2) ? seal.hex : pick_string(), below(8) ? &settled : NULL),
           "rk_limiter_settle_sealed");
    break;
  }
  case 21: {
    /* Pauses are kept short (or invalid) so that they do not silence the rest of the run. */
    uint64_t in_effect = 0;
    double duration = below(2) ? pick_double() : 0.001;
    if (isfinite(duration) && duration > 0.01) duration = 0.01;
    verify(rk_limiter_pause(pick_limiter(), pick_string(), duration, below(4) ? &in_effect : NULL),
           "rk_limiter_pause");
    break;
  }
  case 22: {
    static const char *const names[] = {"Retry-After", "retry-after", "RateLimit-Remaining", "RateLimit-Reset",
                                        "X-RateLimit-Reset", "Content-Type"};
    static const char *const values[] = {"0.001", "0", "-1", "Thu, 01 Jan 1970 00:00:00 GMT", "1e308", "", "soon"};
    /* Every element is set (NULL ones included), so any length up to 4 reads only these. */
    const char *n[4], *v[4];
    for (size_t i = 0; i < 4; i++) {
      n[i] = below(4) ? names[below(6)] : pick_string();
      v[i] = below(4) ? values[below(7)] : pick_string();
    }
    uint64_t pause_us = 0;
    verify(rk_limiter_observe(pick_limiter(), pick_string(), below(2) ? 429 : (uint32_t)next(),
                              below(8) ? n : NULL, below(8) ? v : NULL, below(5),
                              below(4) ? &pause_us : NULL),
           "rk_limiter_observe");
    break;
  }
  case 25:
    BUILD(rk_limiter_new_leased(pick_backend(), pick_string(), pick_double(), pick_count(),
                                below(2) ? 0 : pick_count(), below(2) ? 0.0 : pick_double(), &out),
          "rk_limiter_new_leased");
    break;
  case 26:
    verify(rk_limiter_close(pick_limiter()), "rk_limiter_close");
    break;
  case 18: {
    static const char *const periods[] = {"day", "week", "month", "year"};
    static const char *const zones[] = {"UTC", "Europe/Berlin", "America/New_York", "Mars/Olympus"};
    BUILD(rk_limiter_new_calendar(pick_backend(), pick_string(), pick_count(),
                                  below(4) ? periods[below(4)] : pick_string(),
                                  below(4) ? zones[below(4)] : pick_string(),
                                  below(2) ? (uint32_t)below(33) : (uint32_t)next(), &out),
          "rk_limiter_new_calendar");
    break;
  }
  case 19: {
    static const char *const specs[] = {
        "{\"kind\":\"token_bucket\",\"rate\":10,\"capacity\":20}",
        "{\"kind\":\"windows\",\"windows\":[[25,5],[300,60]]}",
        "{\"kind\":\"sliding_window\",\"limits\":[[60,100,1],[1,10,0.1]]}",
        "{\"kind\":\"concurrent\",\"limit\":2,\"lock_timeout\":30,\"wait_timeout\":0}",
        "{\"kind\":\"calendar\",\"limit\":1000,\"period\":\"month\",\"tz\":\"Europe/Berlin\",\"anchor\":15}",
        "{\"kind\":\"windows\",\"windows\":[[25,5],[1e308,-1]]}",
        "{\"kind\":\"sliding_window\",\"limits\":[[1e-9,1,1e-12]]}",
        "{\"kind\":\"points\",\"capacity\":9007199254740993,\"refill\":1}",
        "{\"kind\":\"leaky\",\"size\":[],\"drain\":{}}",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
        "{\"kind\":\"unlimited\",\"wait_timeout\":1e300}",
        "{}",
    };
    BUILD(rk_limiter_new_from_json(pick_backend(), pick_string(), below(4) ? specs[below(12)] : pick_string(), &out),
          "rk_limiter_new_from_json");
    break;
  }
  case 20: {
    char buf[48];
    size_t n = 0;
    size_t len = below(sizeof buf + 1);
    verify(rk_limiter_spec_json(pick_limiter(), below(4) ? buf : NULL, len, below(6) ? &n : NULL),
           "rk_limiter_spec_json");
    break;
  }
  case 23: {
    /* Live limits, the registry and Prometheus: hostile names, specs and keys; owned strings. */
    static const char *const specs[] = {
        "{\"kind\":\"token_bucket\",\"rate\":10,\"capacity\":20}",
        "{\"kind\":\"window\",\"limit\":5,\"interval\":60}",
        "{\"kind\":\"unlimited\"}",
        "{\"kind\":\"concurrent\",\"limit\":0}",
    };
    const rk_backend *backend = pick_backend();
    const char *spec = below(4) ? specs[below(4)] : pick_string();
    const char *key = below(2) ? NULL : pick_string();
    char *out = NULL;
    switch (below(6)) {
    case 5:
      verify(rk_backend_metrics_json(backend, next() & 1, below(6) ? &out : NULL), "rk_backend_metrics_json");
      break;
    case 0:
      verify(rk_backend_set_limit(backend, pick_string(), spec, key), "rk_backend_set_limit");
      break;
    case 1:
      verify(rk_backend_clear_limit(backend, pick_string(), key), "rk_backend_clear_limit");
      break;
    case 2:
      verify(rk_backend_flush(backend), "rk_backend_flush");
      break;
    case 3:
      verify(rk_backend_limiters_json(backend, below(6) ? &out : NULL), "rk_backend_limiters_json");
      break;
    default:
      verify(rk_backend_prometheus(backend, next() & 1, below(6) ? &out : NULL), "rk_backend_prometheus");
      break;
    }
    rk_string_free(out);
    break;
  }
  case 24: {
    /* A backoff policy from hostile durations, asked about hostile attempts; freed again. */
    rk_backoff *backoff = NULL;
    rk_status s = rk_backoff_new(pick_double(), below(2) ? 0.0 : pick_double(), (uint32_t)next(), next(),
                                 below(8) ? &backoff : NULL);
    verify(s, "rk_backoff_new");
    CHECK((s == RK_OK) == (backoff != NULL));
    bool again = false;
    uint64_t delay = 0;
    verify(rk_backoff_reschedule_in(below(6) ? backoff : NULL, below(2) ? (uint32_t)below(3) : (uint32_t)next(),
                                    below(2) ? below(2000000) : next(), below(8) ? &again : NULL,
                                    below(8) ? &delay : NULL),
           "rk_backoff_reschedule_in");
    rk_backoff_free(backoff);
    break;
  }
  case 17: {
    /* The manual clock, NULL or real, moved by any amount (saturating far in the future). */
    uint64_t now = 0;
    const rk_manual_clock *clock = below(6) ? g_clock : NULL;
    verify(rk_manual_clock_advance(clock, below(2) ? below(2000000) : pick_count()), "rk_manual_clock_advance");
    verify(rk_manual_clock_now_us(clock, below(6) ? &now : NULL), "rk_manual_clock_now_us");
    break;
  }
  case 16: {
    /* The error accessors with small, NULL and odd buffers. */
    char small[8];
    size_t n = 0;
    size_t len = below(sizeof small + 1);
    rk_status s = rk_last_error_message(below(4) ? small : NULL, len, below(4) ? &n : NULL);
    CHECK(s <= RK_BACKEND_REJECTED && s != RK_PANIC);
    CHECK(rk_status_name((uint32_t)next()) != NULL);
    break;
  }
  }
}

/* Hostile backend constructors: bad URLs, seeds, prefixes, policies and deadlines. Only the
 * test server's URL may connect; the others must fail or build a backend that is freed. */
static void backend_calls(const char *redis_url) {
  static const char *const urls[] = {NULL, "", "redis://", "redis://[::1", "rediss://127.0.0.1:0",
                                     "http://127.0.0.1:1", "redis://127.0.0.1:99999", "\xff://x",
                                     "redis://user:pa ss@127.0.0.1:1/0"};
  for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
    for (int round = 0; round < 4; round++) {
      rk_backend *b = NULL;
      rk_status s = rk_backend_new_redis(urls[i], pick_string(), (uint32_t)below(5), (uint32_t)pick_count(),
                                         below(2) ? 0.05 : pick_double(), &b);
      verify(s, "rk_backend_new_redis");
      if (s == RK_OK) rk_backend_free(b);
      const char *seeds[3] = {urls[i], pick_string(), NULL};
      s = rk_backend_new_redis_cluster(below(5) ? seeds : NULL, below(4), pick_string(), (uint32_t)below(5),
                                       (uint32_t)pick_count(), below(2) ? 0.05 : pick_double(), &b);
      verify(s, "rk_backend_new_redis_cluster");
      if (s == RK_OK) rk_backend_free(b);
    }
  }
  /* Hostile configurations as JSON: malformed text, wrong types, unknown fields, bad values. */
  static const char *const configs[] = {
      NULL, "", "{", "[]", "null", "\"redis\"", "{\"kind\":7}", "{\"kind\":\"etcd\"}", "{\"nope\":1}",
      "{\"url\":\"http://x\"}", "{\"url\":\"redis://127.0.0.1:1\",\"deadline\":-1}",
      "{\"url\":\"redis://127.0.0.1:1\",\"deadline\":1e308}", "{\"seeds\":[]}", "{\"seeds\":[1,null]}",
      "{\"seeds\":\"redis://x\"}", "{\"max_keys\":-1}", "{\"max_keys\":1.5}", "{\"max_keys\":1e30}",
      "{\"url\":\"rediss://127.0.0.1:1\",\"tls_ca_data\":\"not pem\"}", "{\"url\":\"redis://127.0.0.1:1\",\"tls_ca_file\":\"/nonexistent\"}",
      "{\"url\":\"redis://127.0.0.1:1\",\"failure_policy\":\"fallback\",\"fallback_divisor\":4294967296}",
      "{\"kind\":\"memory\",\"client\":\"\xff\"}", "\xff", "{\"kind\":\"memory\",\"max_keys\":1}",
      "{\"shards\":0}", "{\"shards\":-4}", "{\"shards\":1e30}", "{\"kind\":\"memory\",\"shards\":3}"};
  for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
    rk_backend *b = NULL;
    rk_status s = rk_backend_new_from_json(below(8) ? configs[i] : pick_string(), below(16) ? &b : NULL);
    verify(s, "rk_backend_new_from_json");
    if (s == RK_OK) rk_backend_free(b);
  }
  /* The same on the manual clock, or none. */
  for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
    rk_backend *b = NULL;
    rk_status s = rk_backend_new_from_json_with_clock(below(8) ? configs[i] : pick_string(), below(8) ? g_clock : NULL,
                                                      below(16) ? &b : NULL);
    verify(s, "rk_backend_new_from_json_with_clock");
    if (s == RK_OK) rk_backend_free(b);
  }
  verify(rk_backend_new_redis(redis_url, "rkfuzz", RK_FAIL_CLOSED, 0, 1.0, NULL), "rk_backend_new_redis");
  verify(rk_backend_new_memory(NULL), "rk_backend_new_memory");
  verify(rk_backend_new_memory_with(pick_count(), NULL), "rk_backend_new_memory_with");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *seed = getenv("RK_FUZZ_SEED");
  const char *iterations_env = getenv("RK_FUZZ_ITERATIONS");
  const char *redis_url = getenv("RK_TEST_REDIS_URL");
  uint64_t seed_value = seed && *seed ? strtoull(seed, NULL, 10) : 1;
  g_state = seed_value * 0x9E3779B97F4A7C15ULL + 1; /* distinct seeds, never 0 */
  uint64_t iterations = iterations_env && *iterations_env ? strtoull(iterations_env, NULL, 10) : 5000;

  memset(g_long_name, 'n', sizeof g_long_name - 1);
  memset(g_long_key, 'k', sizeof g_long_key - 1);

  CHECK_OK(rk_backend_new_memory(&g_backends[g_n_backends++]));
  CHECK_OK(rk_backend_new_memory_with(64, &g_backends[g_n_backends++]));
  /* A backend on the manual clock is built and freed but not used for calls: a waiting call
   * on it would wait for an advance that this single thread never makes. */
  CHECK_OK(rk_manual_clock_new(1700000000000000ULL, &g_clock));
  rk_backend *manual = NULL;
  if (CHECK_OK(rk_backend_new_memory_with_clock(g_clock, &manual))) rk_backend_free(manual);
  verify(rk_backend_new_memory_with_clock(NULL, &manual), "rk_backend_new_memory_with_clock");
  verify(rk_manual_clock_new(0, NULL), "rk_manual_clock_new");
  if (redis_url && *redis_url) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "rkfuzz%ld", (long)getpid());
    rk_backend *redis = NULL;
    if (CHECK_OK(rk_backend_new_redis(redis_url, prefix, RK_FAIL_CLOSED, 0, 2.0, &redis))) {
      g_backends[g_n_backends++] = redis;
    }
  } else {
    printf("RK_TEST_REDIS_URL is not set: Redis calls skipped\n");
  }
  rk_limiter *unlimited = NULL;
  if (CHECK_OK(rk_limiter_new_unlimited(&unlimited))) keep(unlimited);
  verify(rk_limiter_new_unlimited(NULL), "rk_limiter_new_unlimited");

  backend_calls(redis_url && *redis_url ? redis_url : "redis://127.0.0.1:1");
  for (uint64_t i = 0; i < iterations; i++) one_call();
  /* Every started check calls back (bounded wait: a lost callback fails the run). */
  for (int waited = 0; atomic_load(&g_completed) < atomic_load(&g_started) && waited < 6000; waited++) {
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  }
  CHECK(atomic_load(&g_completed) == atomic_load(&g_started));
  CHECK(atomic_load(&g_bad_completions) == 0);

  for (size_t i = 0; i < g_n_limiters; i++) rk_limiter_free(g_limiters[i]);
  for (size_t i = 0; i < g_n_backends; i++) rk_backend_free(g_backends[i]);
  rk_manual_clock_free(g_clock);
  rk_manual_clock_free(NULL);
  rk_limiter_free(NULL);
  rk_backend_free(NULL);

  printf("fuzz: seed %llu, %llu calls: %llu admitted or over limit, %llu refused with an error; "
         "%llu calls started, %llu called back\n",
         (unsigned long long)seed_value, (unsigned long long)g_calls,
         (unsigned long long)g_ok, (unsigned long long)g_errors,
         (unsigned long long)atomic_load(&g_started), (unsigned long long)atomic_load(&g_completed));
  /* One "test" per run: it passes when no check failed. */
  bool passed = g_check_failures == 0;
  printf("%d passed, %d failed\n", passed ? 1 : 0, passed ? 0 : 1);
  return passed ? 0 : 1;
}
