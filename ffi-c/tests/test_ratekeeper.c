/* Tests of libratekeeper through its C ABI only (include/ratekeeper.h).
 *
 * Built by scripts/test-c with -fsanitize=address,undefined and LeakSanitizer on, against the
 * static and the shared library. Every limiter runs on the memory backend and, when the script
 * provides them, on a Redis server (RK_TEST_REDIS_URL) and a one-node Redis Cluster
 * (RK_TEST_REDIS_CLUSTER_URL). Prints "N passed, N failed[, N skipped]" last; exits 1 on any
 * failure. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

int g_check_failures;
const char *g_context = "-";

/* Fixed windows aligned to multiples of 100 years since the epoch: the next boundary is in
 * 2069, so counts in a bucket never reset while a test runs. */
#define CENTURY (100.0 * 365 * RK_DAY)

static char g_sentinel;
#define SENTINEL ((void *)&g_sentinel)

/* ---------------------------------------------------------------- fixtures */

typedef enum { MEMORY, REDIS, CLUSTER } backend_kind;

typedef struct {
  const char *label;
  backend_kind kind;
  const char *url;
} fixture;

static char g_prefix[64];

static rk_backend *new_backend(const fixture *f) {
  rk_backend *b = NULL;
  rk_status s = RK_UNKNOWN_ERROR;
  switch (f->kind) {
  case MEMORY:
    s = rk_backend_new_memory(&b);
    break;
  case REDIS:
    /* A generous deadline: sanitizers slow everything down. */
    s = rk_backend_new_redis(f->url, g_prefix, RK_FAIL_CLOSED, 0, 5.0, &b);
    break;
  case CLUSTER: {
    const char *seeds[] = {f->url};
    s = rk_backend_new_redis_cluster(seeds, 1, g_prefix, RK_FAIL_CLOSED, 0, 5.0, &b);
    break;
  }
  }
  if (!CHECK_OK(s)) {
    fprintf(stderr, "cannot create the %s backend: giving up\n", f->label);
    exit(2);
  }
  return b;
}

static rk_limiter *must(rk_status s, rk_limiter *limiter, const char *what) {
  if (!check_status_(s, RK_OK, what, __FILE__, __LINE__)) {
    fprintf(stderr, "cannot build limiter %s: giving up\n", what);
    exit(2);
  }
  return limiter;
}

static rk_decision check1(const rk_limiter *l, const char *key, uint64_t cost) {
  rk_decision d = {0};
  memset(&d, 0, sizeof d);
  CHECK_OK(rk_limiter_check(l, key, cost, &d));
  return d;
}

static rk_decision peek1(const rk_limiter *l, const char *key) {
  rk_decision d = {0};
  memset(&d, 0, sizeof d);
  CHECK_OK(rk_limiter_peek(l, key, &d));
  return d;
}

/* ---------------------------------------------------------------- every limiter, every backend */

static void test_bucket(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  must(rk_limiter_new_bucket(b, "c-bucket", 3, CENTURY, &l), l, "bucket");
  for (uint64_t i = 1; i <= 3; i++) {
    rk_decision d = check1(l, "user-1", 1);
    CHECK(d.allowed);
    CHECK_U64(d.limit, 3);
    CHECK_U64(d.remaining, 3 - i);
    CHECK_U64(d.retry_after_us, 0);
    CHECK(!d.has_lease);
    CHECK(d.reset_after_us > 0);
  }
  rk_decision refused = check1(l, "user-1", 1);
  CHECK(!refused.allowed);
  CHECK_U64(refused.remaining, 0);
  CHECK(refused.retry_after_us > 0);
  CHECK(!peek1(l, "user-1").allowed);
  /* Another key, and the shared (NULL) key, are untouched. */
  CHECK_U64(peek1(l, "user-2").remaining, 3);
  CHECK_U64(check1(l, NULL, 2).remaining, 1);
  CHECK_U64(peek1(l, "").remaining, 1); /* NULL is the key "" */
  /* cost 0 is always admitted and consumes nothing. */
  CHECK(check1(l, "user-1", 0).allowed);
  /* A second handle with the same kind and name shares the state; reset forgets it. */
  rk_limiter *same = NULL;
  must(rk_limiter_new_bucket(b, "c-bucket", 3, CENTURY, &same), same, "bucket again");
  CHECK(!peek1(same, "user-1").allowed);
  CHECK_OK(rk_limiter_reset(same, "user-1"));
  CHECK_U64(check1(l, "user-1", 1).remaining, 2);
  rk_limiter_free(same);
  rk_limiter_free(l);
  rk_backend_free(b);
}

static void test_window(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  must(rk_limiter_new_window(b, "c-window", 2, RK_HOUR, &l), l, "window");
  CHECK_U64(check1(l, "k", 1).remaining, 1);
  CHECK_U64(check1(l, "k", 1).remaining, 0);
  rk_decision d = check1(l, "k", 1);
  CHECK(!d.allowed);
  CHECK(d.retry_after_us > 0 && d.retry_after_us <= 3600u * 1000000u);
  /* Kinds never share state: a bucket with the same name is full. */
  rk_limiter *bucket = NULL;
  must(rk_limiter_new_bucket(b, "c-window", 2, CENTURY, &bucket), bucket, "bucket");
  CHECK_U64(peek1(bucket, "k").remaining, 2);
  rk_limiter_free(bucket);
  rk_limiter_free(l);

  /* 2 per hour AND 3 per two hours: the first binds. */
  rk_window_limit windows[] = {{3, 2 * RK_HOUR}, {2, RK_HOUR}};
  must(rk_limiter_new_windows(b, "c-windows", windows, 2, &l), l, "windows");
  CHECK(check1(l, NULL, 1).allowed);
  d = check1(l, NULL, 1);
  CHECK(d.allowed);
  CHECK_U64(d.limit, 2);
  CHECK_U64(d.remaining, 0);
  CHECK(!check1(l, NULL, 1).allowed);
  rk_limiter_free(l);
  rk_backend_free(b);
}

static void test_sliding_window(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  rk_sliding_limit limits[] = {{RK_HOUR, 5, RK_MINUTE}, {RK_DAY, 3, 0}};
  must(rk_limiter_new_sliding_window(b, "c-sliding", limits, 2, &l), l, "sliding_window");
  CHECK_U64(check1(l, "k", 2).remaining, 1);
  rk_decision d = check1(l, "k", 2); /* the daily limit of 3 refuses a cost of 2 now */
  CHECK(!d.allowed);
  CHECK_U64(d.limit, 3);
  CHECK(d.retry_after_us > 0);
  CHECK(check1(l, "k", 1).allowed); /* only admitted calls count */
  CHECK(!check1(l, "k", 1).allowed);
  rk_limiter_free(l);
  rk_backend_free(b);
}

static void test_leased(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  /* A bucket of 3 refilling one token per 1000 s, leased 2 at a time (on memory: the bucket). */
  must(rk_limiter_new_leased(b, "c-leased", 0.001, 3, 2, 0.5, &l), l, "leased");
  CHECK(check1(l, NULL, 1).allowed);
  CHECK(check1(l, NULL, 1).allowed);
  CHECK_OK(rk_limiter_close(l));
  CHECK(check1(l, NULL, 1).allowed);
  rk_decision d = check1(l, NULL, 1);
  CHECK(!d.allowed);
  CHECK(d.retry_after_us > 990u * 1000000u && d.retry_after_us <= 1000u * 1000000u);
  CHECK_OK(rk_limiter_close(l));
  rk_limiter_free(l);
  rk_backend_free(b);
}

static void test_token_bucket(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  /* One token per 1000 s: nothing refills while the test runs. */
  must(rk_limiter_new_token_bucket(b, "c-token", 0.001, 3, &l), l, "token_bucket");
  CHECK_U64(check1(l, "k", 2).remaining, 1);
  rk_decision d = check1(l, "k", 2);
  CHECK(!d.allowed);
  CHECK_U64(d.remaining, 1);
  CHECK(d.retry_after_us > 990u * 1000000u && d.retry_after_us <= 1000u * 1000000u);
  CHECK(check1(l, "k", 1).allowed);
  CHECK(!check1(l, "k", 1).allowed);
  CHECK(check1(l, "k", 0).allowed);
  /* A wait that cannot succeed in time fails at once, with the exact retry_after. */
  rk_decision over;
  memset(&over, 0xab, sizeof over);
  if (CHECK_STATUS(rk_limiter_acquire(l, "k", 1, 1.0, &over), RK_OVER_LIMIT)) {
    CHECK(!over.allowed);
    CHECK(over.retry_after_us > 990u * 1000000u);
    CHECK_U64(over.limit, 0);
    CHECK_MESSAGE("over limit");
  }
  rk_limiter_free(l);
  rk_backend_free(b);
}

static void test_leaky(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  must(rk_limiter_new_leaky(b, "c-leaky", 3, 3000.0, &l), l, "leaky");
  for (int i = 0; i < 3; i++) CHECK(check1(l, "k", 1).allowed);
  rk_decision d = check1(l, "k", 1);
  CHECK(!d.allowed);
  /* One call per drain/size = 1000 s. */
  CHECK(d.retry_after_us > 990u * 1000000u && d.retry_after_us <= 1000u * 1000000u);
  CHECK(d.reset_after_us > 2990u * 1000000u && d.reset_after_us <= 3000u * 1000000u);
  rk_limiter_free(l);
  rk_backend_free(b);
}

static void test_points(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  must(rk_limiter_new_points(b, "c-points", 10, 10000.0, &l), l, "points");
  CHECK_U64(check1(l, "q", 5).remaining, 5);
  rk_decision d = {0};
  CHECK_OK(rk_limiter_points_used(l, "q", 5, 2, &d)); /* refund 3 */
  CHECK_U64(d.remaining, 8);
  CHECK_OK(rk_limiter_points_used(l, "q", 2, 9, &d)); /* charge 7 more */
  CHECK_U64(d.remaining, 1);
  CHECK(!check1(l, "q", 2).allowed);
  /* points_used applies to the GCRA family only. */
  rk_limiter *bucket = NULL;
  must(rk_limiter_new_bucket(b, "c-points-bucket", 3, CENTURY, &bucket), bucket, "bucket");
  CHECK_FAILS(rk_limiter_points_used(bucket, "q", 1, 1, &d), RK_INVALID_ARGUMENT, "points_used");
  rk_limiter_free(bucket);
  rk_limiter_free(l);
  rk_backend_free(b);
}

static void test_settle(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL, *other = NULL, *mutex = NULL;
  must(rk_limiter_new_bucket(b, "c-settle", 10, CENTURY, &l), l, "bucket");
  must(rk_limiter_new_bucket(b, "c-settle-other", 10, CENTURY, &other), other, "bucket");
  must(rk_limiter_new_concurrent(b, "c-settle-mutex", 1, 30.0, 5.0, &mutex), mutex, "concurrent");
  rk_decision checked = check1(l, "q", 8);
  CHECK(checked.settle.settleable);
  CHECK_U64(checked.settle.cost, 8);
  rk_decision d = {0};
  CHECK_OK(rk_limiter_settle(l, "q", &checked, 3, &d)); /* refund 5 */
  CHECK_U64(d.remaining, 7);
  CHECK(!d.settle.settleable); /* the state after a settle is not itself settled */
  CHECK_OK(rk_limiter_settle(l, "q", &checked, 3, &d)); /* a repeat applies nothing */
  CHECK_U64(d.remaining, 7);
  CHECK_U64(peek1(l, "q").remaining, 7);
  /* A charge past the limit: refused until the window rolls over. */
  rk_decision charged = check1(l, "q", 1);
  CHECK_OK(rk_limiter_settle(l, "q", &charged, 9, &d));
  CHECK_U64(d.remaining, 0);
  CHECK(!check1(l, "q", 1).allowed);
  /* What cannot be settled names `decision`, and writes nothing. */
  rk_decision refused = check1(l, "q", 1);
  CHECK(!refused.allowed);
  CHECK_FAILS(rk_limiter_settle(l, "q", &refused, 0, &d), RK_INVALID_ARGUMENT, "decision");
  CHECK_FAILS(rk_limiter_settle(other, "q", &checked, 0, &d), RK_INVALID_ARGUMENT, "decision");
  rk_decision held = check1(mutex, "q", 1);
  CHECK_FAILS(rk_limiter_settle(mutex, "q", &held, 0, &d), RK_INVALID_ARGUMENT, "decision");
  CHECK_OK(rk_limiter_release(mutex, "q", &held.lease));
  CHECK_FAILS(rk_limiter_settle(l, "q", &checked, 9007199254740993u, &d), RK_INVALID_ARGUMENT, "actual");
  CHECK_FAILS(rk_limiter_settle(NULL, "q", &checked, 0, &d), RK_NULL_PARAMETER, "limiter");
  CHECK_FAILS(rk_limiter_settle(l, "q", NULL, 0, &d), RK_NULL_PARAMETER, "decision");
  CHECK_FAILS(rk_limiter_settle(l, "q", &checked, 0, NULL), RK_NULL_PARAMETER, "decision_out");
  CHECK_U64(peek1(l, "q").remaining, 0);
  /* A decision stored outside the process (its fields, and its seal) settles only unchanged:
   * another key, cost or id is refused naming `decision`, and writes nothing. */
  rk_decision stored = check1(l, "s", 4);
  rk_settle_seal seal;
  CHECK_OK(rk_limiter_seal_ticket(l, "s", &stored, &seal));
  CHECK_U64(strlen(seal.hex), 64);
  rk_decision forged = stored;
  forged.settle.cost = 9;
  CHECK_FAILS(rk_limiter_settle_sealed(l, "s", &forged, 0, seal.hex, &d), RK_INVALID_ARGUMENT, "decision");
  forged = stored;
  forged.settle.id += 1;
  CHECK_FAILS(rk_limiter_settle_sealed(l, "s", &forged, 0, seal.hex, &d), RK_INVALID_ARGUMENT, "decision");
  CHECK_FAILS(rk_limiter_settle_sealed(l, "q", &stored, 0, seal.hex, &d), RK_INVALID_ARGUMENT, "decision");
  CHECK_FAILS(rk_limiter_settle_sealed(l, "s", &stored, 0, "00", &d), RK_INVALID_ARGUMENT, "decision");
  CHECK_FAILS(rk_limiter_settle_sealed(l, "s", &stored, 0, NULL, &d), RK_NULL_PARAMETER, "seal");
  CHECK_FAILS(rk_limiter_seal_ticket(l, "s", &refused, &seal), RK_INVALID_ARGUMENT, "decision");
  CHECK_FAILS(rk_limiter_seal_ticket(l, "s", &stored, NULL), RK_NULL_PARAMETER, "seal_out");
  /* A ticket that says it cost more than the limiter admits in one call was not issued by it. */
  forged = stored;
  forged.settle.cost = 11;
  CHECK_FAILS(rk_limiter_settle(l, "s", &forged, 0, &d), RK_INVALID_ARGUMENT, "decision");
  CHECK_U64(peek1(l, "s").remaining, 6);
  CHECK_OK(rk_limiter_settle_sealed(l, "s", &stored, 1, seal.hex, &d));
  CHECK_U64(d.remaining, 9);
  rk_limiter_free(mutex);
  rk_limiter_free(other);
  rk_limiter_free(l);
  rk_backend_free(b);
}

static void test_calendar(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  must(rk_limiter_new_calendar(b, "c-calendar", 2, "year", "Europe/Berlin", 0, &l), l, "calendar");
  CHECK_U64(check1(l, "q", 1).remaining, 1);
  CHECK_U64(check1(l, "q", 1).remaining, 0);
  rk_decision refused = check1(l, "q", 1);
  CHECK(!refused.allowed);
  /* Refused until the next new year in Berlin, the same instant as the reset. */
  CHECK(refused.retry_after_us > 0);
  CHECK_U64(refused.retry_after_us, refused.reset_after_us);
  rk_limiter_free(l);
  /* NULL tz is UTC; anchors apply to months. */
  must(rk_limiter_new_calendar(b, "c-calendar-m", 1, "month", NULL, 31, &l), l, "calendar month");
  CHECK_U64(check1(l, "q", 1).remaining, 0);
  rk_limiter_free(l);
  l = SENTINEL;
  CHECK_FAILS(rk_limiter_new_calendar(b, "n", 1, "day", "Mars/Olympus_Mons", 0, &l), RK_INVALID_ARGUMENT, "tz");
  CHECK_FAILS(rk_limiter_new_calendar(b, "n", 1, "fortnight", NULL, 0, &l), RK_INVALID_ARGUMENT, "period");
  CHECK_FAILS(rk_limiter_new_calendar(b, "n", 1, NULL, NULL, 0, &l), RK_NULL_PARAMETER, "period");
  CHECK_FAILS(rk_limiter_new_calendar(b, "n", 1, "month", NULL, 32, &l), RK_INVALID_ARGUMENT, "anchor");
  CHECK_FAILS(rk_limiter_new_calendar(b, "n", 1, "day", NULL, 5, &l), RK_INVALID_ARGUMENT, "anchor");
  CHECK_FAILS(rk_limiter_new_calendar(b, "n", 0, "day", NULL, 0, &l), RK_INVALID_ARGUMENT, "limit");
  CHECK(l == SENTINEL);
  rk_backend_free(b);
}

/* Specs as data: a limiter built from JSON reads its canonical spec back, shares state with
 * the same limiter built by its named constructor, and bad fields are named by their path. */
static void test_spec_json(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *named = NULL, *l = NULL;
  must(rk_limiter_new_token_bucket(b, "c-spec", 10.0, 3, &named), named, "token bucket");
  must(rk_limiter_new_from_json(b, "c-spec", "{\"capacity\": 3, \"rate\": 10.0, \"kind\": \"token_bucket\"}", &l),
       l, "from json");
  char buf[128];
  size_t n = 0;
  CHECK_OK(rk_limiter_spec_json(l, buf, sizeof buf, &n));
  CHECK(strcmp(buf, "{\"kind\":\"token_bucket\",\"rate\":10,\"capacity\":3}") == 0);
  CHECK_U64(n, strlen(buf));
  /* The same limiter: what one takes, the other sees. */
  CHECK_U64(check1(named, "k", 2).remaining, 1);
  CHECK_U64(check1(l, "k", 1).remaining, 0);
  /* Measuring, and a buffer too small: cut and NUL-terminated, full length reported. */
  CHECK_OK(rk_limiter_spec_json(named, NULL, 0, &n));
  CHECK_U64(n, strlen(buf));
  char small[6];
  CHECK_OK(rk_limiter_spec_json(named, small, sizeof small, &n));
  CHECK(strcmp(small, "{\"kin") == 0);
  CHECK_FAILS(rk_limiter_spec_json(named, NULL, 4, &n), RK_NULL_PARAMETER, "buf");
  CHECK_FAILS(rk_limiter_spec_json(named, buf, sizeof buf, NULL), RK_NULL_PARAMETER, "out_n");
  rk_limiter_free(l);
  rk_limiter_free(named);
  l = SENTINEL;
  CHECK_FAILS(rk_limiter_new_from_json(b, "n", "{\"kind\":\"windows\",\"windows\":[[25,5],[0,60]]}", &l),
              RK_INVALID_ARGUMENT, "`windows[1][0]`");
  CHECK_FAILS(rk_limiter_new_from_json(b, "n", "{\"kind\":\"token_bucket\",\"rate\":1}", &l), RK_INVALID_ARGUMENT,
              "`capacity`");
  CHECK_FAILS(rk_limiter_new_from_json(b, "n", "{\"kind\":", &l), RK_INVALID_ARGUMENT, "`spec`");
  CHECK_FAILS(rk_limiter_new_from_json(b, "n", NULL, &l), RK_NULL_PARAMETER, "json");
  CHECK_FAILS(rk_limiter_new_from_json(b, "n", "{\"kind\":\"unlimited\",\"\xff\":1}", &l), RK_INVALID_UTF8, "json");
  CHECK(l == SENTINEL);
  rk_backend_free(b);
}

/* Live limits, the registry and Prometheus through the C ABI, on every backend: the override
 * applies to this process at once and keeps the state; results are strings to rk_string_free. */
static void test_live_limits(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  must(rk_limiter_new_token_bucket(b, "c-live", 0.001, 2, &l), l, "token bucket");
  CHECK_U64(check1(l, "k", 1).remaining, 1);
  CHECK_OK(rk_backend_set_limit(b, "c-live", "{\"kind\":\"token_bucket\",\"rate\":0.001,\"capacity\":5}", NULL));
  rk_decision d = check1(l, "k", 1);
  CHECK(d.allowed);
  CHECK_U64(d.limit, 5);
  CHECK_U64(d.remaining, 3);
  CHECK_OK(rk_backend_set_limit(b, "c-live", "{\"kind\":\"token_bucket\",\"rate\":0.001,\"capacity\":9}", "vip"));
  rk_decision vip;
  CHECK_OK(rk_limiter_peek(l, "vip", &vip));
  CHECK_U64(vip.limit, 9);
  CHECK_OK(rk_backend_flush(b));
  char *json = NULL;
  CHECK_OK(rk_backend_limiters_json(b, &json));
  CHECK(json != NULL && strstr(json, "\"name\":\"c-live\"") != NULL);
  CHECK(json != NULL && strstr(json, "\"key\":\"vip\"") != NULL);
  rk_string_free(json);
  CHECK_OK(rk_backend_metrics_json(b, false, &json));
  CHECK(json != NULL && strstr(json, "\"allowed\":2") != NULL);
  rk_string_free(json);
  char *text = NULL;
  CHECK_OK(rk_backend_prometheus(b, false, &text));
  CHECK(text != NULL && strstr(text, "ratekeeper_checks_total{limiter=\"c-live\",kind=\"token_bucket\",outcome=\"allowed\"} 2") != NULL);
  rk_string_free(text);
  CHECK_OK(rk_backend_clear_limit(b, "c-live", NULL));
  CHECK_OK(rk_backend_clear_limit(b, "c-live", "vip"));
  CHECK_OK(rk_limiter_peek(l, "k", &d));
  CHECK_U64(d.limit, 2);
  /* Bad input is refused before anything is written. */
  CHECK_FAILS(rk_backend_set_limit(b, "c-live", "{\"kind\":\"token_bucket\",\"rate\":1}", NULL), RK_INVALID_ARGUMENT,
              "`capacity`");
  CHECK_FAILS(rk_backend_set_limit(b, "c-live", "{\"kind\":\"leaky\",\"size\":2,\"drain\":60}", NULL), RK_INVALID_ARGUMENT,
              "`spec`");
  CHECK_FAILS(rk_backend_set_limit(b, "bad name", "{\"kind\":\"token_bucket\",\"rate\":1,\"capacity\":1}", NULL),
              RK_INVALID_ARGUMENT, "`name`");
  CHECK_FAILS(rk_backend_set_limit(b, "c-live", NULL, NULL), RK_NULL_PARAMETER, "spec_json");
  CHECK_FAILS(rk_backend_limiters_json(b, NULL), RK_NULL_PARAMETER, "json_out");
  CHECK_FAILS(rk_backend_prometheus(NULL, false, &text), RK_NULL_PARAMETER, "backend");
  CHECK_OK(rk_limiter_peek(l, "k", &d));
  CHECK_U64(d.limit, 2);
  rk_string_free(NULL);
  rk_limiter_free(l);
  rk_backend_free(b);
}

/* Shadow mode: a copy made by rk_limiter_with_shadow, or a spec saying "shadow": true, admits
 * what it would refuse (shadow_refused), consumes nothing then, and grants no lease. */
static void test_shadow(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *enforcing = NULL, *shadow = NULL, *slots = NULL;
  must(rk_limiter_new_leaky(b, "c-shadow", 1, 3600.0, &enforcing), enforcing, "leaky");
  must(rk_limiter_with_shadow(enforcing, true, &shadow), shadow, "with_shadow");
  char buf[128];
  size_t n = 0;
  CHECK_OK(rk_limiter_spec_json(shadow, buf, sizeof buf, &n));
  CHECK(strcmp(buf, "{\"kind\":\"leaky\",\"size\":1,\"drain\":3600,\"shadow\":true}") == 0);
  rk_decision first = check1(shadow, "k", 1), second = check1(shadow, "k", 1);
  CHECK(first.allowed && !first.shadow_refused);
  CHECK(second.allowed && second.shadow_refused && second.retry_after_us > 0);
  rk_decision d = {0};
  CHECK_OK(rk_limiter_acquire(shadow, "k", 1, 3600.0, &d)); /* never waits */
  CHECK(d.allowed && d.shadow_refused);
  rk_decision refused = check1(enforcing, "k", 1);
  CHECK(!refused.allowed && !refused.shadow_refused);
  must(rk_limiter_new_from_json(b, "c-shadow-slots", "{\"kind\":\"concurrent\",\"limit\":1,\"shadow\":true}", &slots),
       slots, "concurrent from json");
  rk_decision held = check1(slots, "k", 1), extra = check1(slots, "k", 1);
  CHECK(held.has_lease && !held.shadow_refused);
  CHECK(extra.allowed && extra.shadow_refused && !extra.has_lease);
  CHECK_OK(rk_limiter_release(slots, "k", &held.lease));
  CHECK_FAILS(rk_limiter_with_shadow(NULL, true, &slots), RK_NULL_PARAMETER, "limiter");
  rk_limiter_free(slots);
  rk_limiter_free(shadow);
  rk_limiter_free(enforcing);
  rk_backend_free(b);
}

static void test_concurrent(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  must(rk_limiter_new_concurrent(b, "c-concurrent", 2, 30.0, 0.0, &l), l, "concurrent");
  rk_decision one = check1(l, "res", 1), two = check1(l, "res", 1);
  CHECK(one.allowed && one.has_lease && two.allowed && two.has_lease);
  CHECK(one.lease.id_hi != two.lease.id_hi || one.lease.id_lo != two.lease.id_lo);
  CHECK(one.lease.fencing_token > 0);
  CHECK(two.lease.fencing_token > one.lease.fencing_token);
  CHECK(one.lease.granted_at_us > 1600000000ull * 1000000ull);
  rk_decision full = check1(l, "res", 1);
  CHECK(!full.allowed && !full.has_lease);
  CHECK(full.retry_after_us > 0);
  /* Wait timeout 0 (the limiter's default here): refused at once. */
  rk_decision d = {0};
  CHECK_STATUS(rk_limiter_acquire(l, "res", 1, RK_WAIT_DEFAULT, &d), RK_OVER_LIMIT);
  CHECK(!d.allowed && d.retry_after_us > 0);
  CHECK_OK(rk_limiter_release(l, "res", &one.lease));
  CHECK_OK(rk_limiter_acquire(l, "res", 1, 0.0, &d));
  CHECK(d.allowed && d.has_lease && d.lease.fencing_token > two.lease.fencing_token);
  CHECK_OK(rk_limiter_extend(l, "res", &d.lease));
  CHECK_OK(rk_limiter_release(l, "res", &d.lease));
  /* After a reset the outstanding lease is lost, for release and extend alike. */
  CHECK_OK(rk_limiter_reset(l, "res"));
  CHECK_FAILS(rk_limiter_extend(l, "res", &two.lease), RK_LEASE_LOST, "lease");
  CHECK_FAILS(rk_limiter_release(l, "res", &two.lease), RK_LEASE_LOST, "lease");
  /* A lease is a plain value: a forged one was never held. */
  rk_lease forged = {1, 2, 3, 4};
  CHECK_STATUS(rk_limiter_release(l, "res", &forged), RK_LEASE_LOST);
  /* Leases belong to concurrent limiters only. */
  rk_limiter *bucket = NULL;
  must(rk_limiter_new_bucket(b, "c-concurrent-bucket", 3, CENTURY, &bucket), bucket, "bucket");
  CHECK_FAILS(rk_limiter_release(bucket, "res", &forged), RK_INVALID_ARGUMENT, "lease");
  rk_limiter_free(bucket);
  rk_limiter_free(l);
  rk_backend_free(b);
}

/* Several limits at once, all or nothing: an admitted combination consumes every part (the
 * concurrent part holds a lease); one refused part consumes nothing of the others; bad parts
 * are named before anything is written. */
static void test_check_all(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *rate = NULL, *quota = NULL, *slots = NULL;
  must(rk_limiter_new_from_json(b, "c-all-rate",
                                "{\"kind\":\"token_bucket\",\"rate\":0.001,\"capacity\":5,\"colocate\":\"tenant\"}",
                                &rate),
       rate, "rate");
  must(rk_limiter_new_from_json(b, "c-all-quota",
                                "{\"kind\":\"bucket\",\"limit\":3,\"interval\":3600,\"colocate\":\"tenant\"}", &quota),
       quota, "quota");
  must(rk_limiter_new_from_json(b, "c-all-slots",
                                "{\"kind\":\"concurrent\",\"limit\":2,\"lock_timeout\":3600,\"colocate\":\"tenant\"}",
                                &slots),
       slots, "slots");
  rk_check_all_part parts[3] = {{rate, "t1:u", 2}, {quota, "t1", 2}, {slots, "t1", 1}};
  rk_decision d[3];
  bool allowed = false;
  uint64_t retry = 1;
  CHECK_OK(rk_backend_check_all(b, parts, 3, d, &allowed, &retry));
  CHECK(allowed);
  CHECK_U64(retry, 0);
  CHECK_U64(d[0].remaining, 3);
  CHECK_U64(d[1].remaining, 1);
  CHECK(d[2].allowed && d[2].has_lease && d[2].lease.fencing_token > 0);
  rk_lease held = d[2].lease;

  CHECK_OK(rk_backend_check_all(b, parts, 3, d, &allowed, &retry));
  CHECK(!allowed);
  CHECK(d[0].allowed && !d[1].allowed && d[2].allowed && !d[2].has_lease);
  CHECK_U64(retry, d[1].retry_after_us);
  CHECK(retry > 0);
  CHECK_U64(peek1(rate, "t1:u").remaining, 3);
  CHECK_U64(peek1(quota, "t1").remaining, 1);
  CHECK_U64(peek1(slots, "t1").remaining, 1);
  CHECK_OK(rk_limiter_release(slots, "t1", &held));
  CHECK_U64(peek1(slots, "t1").remaining, 2);

  /* acquire_all gives up at once with the combination's retry_after. */
  CHECK_STATUS(rk_backend_acquire_all(b, parts, 3, 1.0, d, &allowed, &retry), RK_OVER_LIMIT);
  CHECK(!allowed && retry > 1000000);

  /* Bad parts, named; nothing written. */
  rk_check_all_part zero[2] = {{rate, "t1:u", 1}, {quota, "t1", 0}};
  CHECK_FAILS(rk_backend_check_all(b, zero, 2, d, &allowed, &retry), RK_INVALID_ARGUMENT, "parts[1].cost");
  rk_check_all_part null_limiter[1] = {{NULL, "t1", 1}};
  CHECK_FAILS(rk_backend_check_all(b, null_limiter, 1, d, &allowed, &retry), RK_NULL_PARAMETER, "parts[0].limiter");
  CHECK_FAILS(rk_backend_check_all(b, parts, 0, d, &allowed, &retry), RK_INVALID_ARGUMENT, "parts");
  CHECK_FAILS(rk_backend_check_all(b, parts, 3, NULL, &allowed, &retry), RK_NULL_PARAMETER, "decisions_out");
  /* A length no array can have is refused, named, as for every other array (it once reached
     slice::from_raw_parts_mut with the decisions first: undefined behaviour, an abort in debug). */
  CHECK_FAILS(rk_backend_check_all(b, parts, SIZE_MAX / 4, d, &allowed, &retry), RK_INVALID_ARGUMENT,
              "parts_len");
  CHECK_FAILS(rk_backend_acquire_all(b, parts, SIZE_MAX / 4, 1.0, d, &allowed, &retry),
              RK_INVALID_ARGUMENT, "parts_len");
  CHECK_U64(peek1(rate, "t1:u").remaining, 3);
  rk_limiter_free(rate);
  rk_limiter_free(quota);
  rk_limiter_free(slots);
  rk_backend_free(b);
}

typedef struct {
  const rk_limiter *limiter;
  rk_status status;
  rk_decision decision;
  atomic_int released; /* set by the holder just before it releases */
  int saw_release;
} waiter_args;

static void *waiter(void *arg) {
  waiter_args *w = arg;
  w->status = rk_limiter_acquire(w->limiter, "mutex", 1, 20.0, &w->decision);
  w->saw_release = atomic_load(&w->released);
  if (w->status == RK_OK) rk_limiter_release(w->limiter, "mutex", &w->decision.lease);
  return NULL;
}

/* A blocked acquire (on a thread of the caller's) is woken by a release, long before its
 * timeout and before the holder's lock_timeout. */
static void test_acquire_woken_by_release(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  must(rk_limiter_new_concurrent(b, "c-mutex", 1, 60.0, 5.0, &l), l, "mutex");
  rk_decision held = check1(l, "mutex", 1);
  CHECK(held.allowed);
  waiter_args w = {.limiter = l, .status = RK_UNKNOWN_ERROR};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter, &w) == 0);
  /* Give the waiter time to block (not needed for correctness: it passes either way). */
  nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
  atomic_store(&w.released, 1);
  CHECK_OK(rk_limiter_release(l, "mutex", &held.lease));
  pthread_join(t, NULL);
  CHECK_STATUS(w.status, RK_OK);
  CHECK(w.saw_release);
  CHECK(w.decision.lease.fencing_token > held.lease.fencing_token);
  rk_limiter_free(l);
  rk_backend_free(b);
}

/* acquire sleeps until the decision can change: 20 per second, so the second call waits
 * about 50 ms and succeeds. */
static void test_acquire_waits_for_refill(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  must(rk_limiter_new_token_bucket(b, "c-refill", 20.0, 1, &l), l, "token_bucket");
  rk_decision d = {0};
  CHECK_OK(rk_limiter_acquire(l, "k", 1, 5.0, &d));
  CHECK_OK(rk_limiter_acquire(l, "k", 1, 5.0, &d));
  CHECK(d.allowed);
  rk_limiter_free(l);
  rk_backend_free(b);
}

static void test_unlimited(const fixture *f) {
  (void)f;
  rk_limiter *l = NULL;
  must(rk_limiter_new_unlimited(&l), l, "unlimited");
  for (int i = 0; i < 3; i++) {
    rk_decision d = check1(l, "anyone", 1000000);
    CHECK(d.allowed);
    CHECK_U64(d.limit, RK_MAX_COUNT);
    CHECK_U64(d.remaining, RK_MAX_COUNT);
  }
  rk_decision d = {0};
  CHECK_OK(rk_limiter_acquire(l, NULL, 5, RK_WAIT_DEFAULT, &d));
  CHECK_OK(rk_limiter_reset(l, NULL));
  rk_limiter_free(l);
}

/* ---------------------------------------------------------------- 16 threads, one handle */

#define THREADS 16

typedef struct {
  const rk_limiter *limiter;
  int attempts;
  int admitted;
  int errors;
} hammer_args;

static void *hammer(void *arg) {
  hammer_args *h = arg;
  for (int i = 0; i < h->attempts; i++) {
    rk_decision d = {0};
    if (rk_limiter_check(h->limiter, "shared", 1, &d) != RK_OK) {
      h->errors++;
    } else if (d.allowed) {
      h->admitted++;
    }
  }
  return NULL;
}

/* 16 threads × 100 checks on one bucket handle of 1000: exactly 1000 are admitted. */
static void test_threads_share_one_bucket(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  must(rk_limiter_new_bucket(b, "c-threads", 1000, CENTURY, &l), l, "bucket");
  rk_backend_free(b); /* the limiter keeps what it needs of its backend */
  pthread_t threads[THREADS];
  hammer_args args[THREADS];
  for (int i = 0; i < THREADS; i++) {
    args[i] = (hammer_args){.limiter = l, .attempts = 100};
    CHECK(pthread_create(&threads[i], NULL, hammer, &args[i]) == 0);
  }
  int admitted = 0, errors = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(threads[i], NULL);
    admitted += args[i].admitted;
    errors += args[i].errors;
  }
  CHECK_U64((uint64_t)errors, 0);
  CHECK_U64((uint64_t)admitted, 1000);
  CHECK_U64(peek1(l, "shared").remaining, 0);
  rk_limiter_free(l);
}

typedef struct {
  const rk_limiter *limiter;
  pthread_mutex_t *lock;
  int *in_flight, *max_in_flight;
  int rounds, acquired, errors;
} holder_args;

static void *holder(void *arg) {
  holder_args *h = arg;
  for (int i = 0; i < h->rounds; i++) {
    rk_decision d = {0};
    if (rk_limiter_acquire(h->limiter, "pool", 1, 30.0, &d) != RK_OK) {
      h->errors++;
      continue;
    }
    h->acquired++;
    pthread_mutex_lock(h->lock);
    if (++*h->in_flight > *h->max_in_flight) *h->max_in_flight = *h->in_flight;
    pthread_mutex_unlock(h->lock);
    nanosleep(&(struct timespec){0, 1000 * 1000}, NULL); /* hold the slot for 1 ms */
    pthread_mutex_lock(h->lock);
    --*h->in_flight;
    pthread_mutex_unlock(h->lock);
    if (rk_limiter_release(h->limiter, "pool", &d.lease) != RK_OK) h->errors++;
  }
  return NULL;
}

/* 16 threads through a concurrent limit of 4: never more than 4 inside, everyone gets in. */
static void test_threads_share_one_semaphore(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  must(rk_limiter_new_concurrent(b, "c-pool", 4, 30.0, 30.0, &l), l, "concurrent");
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  int in_flight = 0, max_in_flight = 0;
  pthread_t threads[THREADS];
  holder_args args[THREADS];
  for (int i = 0; i < THREADS; i++) {
    args[i] = (holder_args){.limiter = l, .lock = &lock, .in_flight = &in_flight,
                            .max_in_flight = &max_in_flight, .rounds = 10};
    CHECK(pthread_create(&threads[i], NULL, holder, &args[i]) == 0);
  }
  int acquired = 0, errors = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(threads[i], NULL);
    acquired += args[i].acquired;
    errors += args[i].errors;
  }
  CHECK_U64((uint64_t)errors, 0);
  CHECK_U64((uint64_t)acquired, THREADS * 10);
  CHECK(max_in_flight >= 1 && max_in_flight <= 4);
  CHECK_U64(peek1(l, "pool").remaining, 4);
  rk_limiter_free(l);
  rk_backend_free(b);
}

/* ---------------------------------------------------------------- bad arguments */

static const char BAD_UTF8[] = "bad\xff\xfe";

/* Bad arguments to backend constructors: each returns its status and writes nothing. */
static void test_backend_arguments(const fixture *f) {
  (void)f;
  rk_backend *b = SENTINEL;
  CHECK_FAILS(rk_backend_new_memory(NULL), RK_NULL_PARAMETER, "backend_out");
  CHECK_FAILS(rk_backend_new_memory_with(100, NULL), RK_NULL_PARAMETER, "backend_out");
  CHECK_FAILS(rk_backend_new_memory_with(0, &b), RK_INVALID_ARGUMENT, "max_keys");
  CHECK(b == SENTINEL);

  const char *url = "redis://127.0.0.1:1";
  CHECK_FAILS(rk_backend_new_redis(url, NULL, RK_FAIL_CLOSED, 0, 0, NULL), RK_NULL_PARAMETER,
              "backend_out");
  CHECK_FAILS(rk_backend_new_redis(NULL, NULL, RK_FAIL_CLOSED, 0, 0, &b), RK_NULL_PARAMETER, "url");
  CHECK_FAILS(rk_backend_new_redis(BAD_UTF8, NULL, RK_FAIL_CLOSED, 0, 0, &b), RK_INVALID_UTF8, "url");
  CHECK_FAILS(rk_backend_new_redis("http://x", NULL, RK_FAIL_CLOSED, 0, 0, &b), RK_INVALID_ARGUMENT,
              "url");
  CHECK_FAILS(rk_backend_new_redis(url, BAD_UTF8, RK_FAIL_CLOSED, 0, 0, &b), RK_INVALID_UTF8,
              "prefix");
  CHECK_FAILS(rk_backend_new_redis(url, "", RK_FAIL_CLOSED, 0, 0, &b), RK_INVALID_ARGUMENT, "prefix");
  CHECK_FAILS(rk_backend_new_redis(url, NULL, 3, 0, 0, &b), RK_INVALID_ARGUMENT, "failure_policy");
  CHECK_FAILS(rk_backend_new_redis(url, NULL, 0xffffffffu, 0, 0, &b), RK_INVALID_ARGUMENT,
              "failure_policy");
  CHECK_FAILS(rk_backend_new_redis(url, NULL, RK_FALLBACK, 0, 0, &b), RK_INVALID_ARGUMENT, "divisor");
  CHECK_FAILS(rk_backend_new_redis(url, NULL, RK_FAIL_CLOSED, 0, -1.0, &b), RK_INVALID_ARGUMENT,
              "deadline");
  CHECK_FAILS(rk_backend_new_redis(url, NULL, RK_FAIL_CLOSED, 0, NAN, &b), RK_INVALID_ARGUMENT,
              "deadline");
  CHECK_FAILS(rk_backend_new_redis(url, NULL, RK_FAIL_CLOSED, 0, INFINITY, &b), RK_INVALID_ARGUMENT,
              "deadline");
  CHECK_FAILS(rk_backend_new_redis(url, NULL, RK_FAIL_CLOSED, 0, 1e-9, &b), RK_INVALID_ARGUMENT,
              "deadline");
  CHECK(b == SENTINEL);

  const char *seeds[] = {url, NULL};
  const char *bad_seeds[] = {BAD_UTF8};
  const char *http_seeds[] = {"http://x:1"};
  CHECK_FAILS(rk_backend_new_redis_cluster(seeds, 1, NULL, RK_FAIL_CLOSED, 0, 0, NULL),
              RK_NULL_PARAMETER, "backend_out");
  CHECK_FAILS(rk_backend_new_redis_cluster(NULL, 1, NULL, RK_FAIL_CLOSED, 0, 0, &b),
              RK_NULL_PARAMETER, "seeds");
  CHECK_FAILS(rk_backend_new_redis_cluster(NULL, 0, NULL, RK_FAIL_CLOSED, 0, 0, &b),
              RK_INVALID_ARGUMENT, "seeds");
  CHECK_FAILS(rk_backend_new_redis_cluster(seeds, 2, NULL, RK_FAIL_CLOSED, 0, 0, &b),
              RK_NULL_PARAMETER, "seeds[1]");
  CHECK_FAILS(rk_backend_new_redis_cluster(bad_seeds, 1, NULL, RK_FAIL_CLOSED, 0, 0, &b),
              RK_INVALID_UTF8, "seeds[0]");
  CHECK_FAILS(rk_backend_new_redis_cluster(http_seeds, 1, NULL, RK_FAIL_CLOSED, 0, 0, &b),
              RK_INVALID_ARGUMENT, "`seeds[0]`");
  CHECK_FAILS(rk_backend_new_redis_cluster(seeds, SIZE_MAX, NULL, RK_FAIL_CLOSED, 0, 0, &b),
              RK_INVALID_ARGUMENT, "seeds_len");
  CHECK_FAILS(rk_backend_new_redis_cluster(seeds, 1, NULL, 9, 0, 0, &b), RK_INVALID_ARGUMENT,
              "failure_policy");
  CHECK(b == SENTINEL);
  rk_backend_free(NULL); /* a no-op */
}

/* rk_backend_new_from_json: bad configurations name their field and write nothing; a good one
 * builds the same backend as the positional constructors (a JSON-built Redis backend and a
 * positional one with the same prefix share one limit). */
static void test_backend_from_json(const fixture *f) {
  rk_backend *b = SENTINEL;
  CHECK_FAILS(rk_backend_new_from_json("{}", NULL), RK_NULL_PARAMETER, "backend_out");
  CHECK_FAILS(rk_backend_new_from_json(NULL, &b), RK_NULL_PARAMETER, "json");
  CHECK_FAILS(rk_backend_new_from_json(BAD_UTF8, &b), RK_INVALID_UTF8, "json");
  CHECK_FAILS(rk_backend_new_from_json("{", &b), RK_INVALID_ARGUMENT, "`json`");
  CHECK_FAILS(rk_backend_new_from_json("[1]", &b), RK_INVALID_ARGUMENT, "`json`");
  CHECK_FAILS(rk_backend_new_from_json("{\"urll\":\"redis://x\"}", &b), RK_INVALID_ARGUMENT, "urll");
  CHECK_FAILS(rk_backend_new_from_json("{\"kind\":\"etcd\"}", &b), RK_INVALID_ARGUMENT, "`kind`");
  CHECK_FAILS(rk_backend_new_from_json("{\"kind\":\"redis\"}", &b), RK_INVALID_ARGUMENT, "`url`");
  CHECK_FAILS(rk_backend_new_from_json("{\"url\":\"http://x\"}", &b), RK_INVALID_ARGUMENT, "`url`");
  CHECK_FAILS(rk_backend_new_from_json("{\"url\":7}", &b), RK_INVALID_ARGUMENT, "`url`");
  CHECK_FAILS(rk_backend_new_from_json("{\"url\":\"redis://x:1\",\"prefix\":\"a:b\"}", &b), RK_INVALID_ARGUMENT, "`prefix`");
  CHECK_FAILS(rk_backend_new_from_json("{\"url\":\"redis://x:1\",\"deadline\":0}", &b), RK_INVALID_ARGUMENT, "`deadline`");
  CHECK_FAILS(rk_backend_new_from_json("{\"url\":\"redis://x:1\",\"deadline\":\"soon\"}", &b), RK_INVALID_ARGUMENT, "`deadline`");
  CHECK_FAILS(rk_backend_new_from_json("{\"url\":\"redis://x:1\",\"connect_timeout\":-1}", &b), RK_INVALID_ARGUMENT,
              "`connect_timeout`");
  CHECK_FAILS(rk_backend_new_from_json("{\"url\":\"redis://x:1\",\"failure_policy\":\"maybe\"}", &b), RK_INVALID_ARGUMENT,
              "`failure_policy`");
  CHECK_FAILS(rk_backend_new_from_json("{\"url\":\"redis://x:1\",\"fallback_divisor\":2}", &b), RK_INVALID_ARGUMENT,
              "`fallback_divisor`");
  CHECK_FAILS(rk_backend_new_from_json("{\"url\":\"redis://x:1\",\"failure_policy\":\"fallback\",\"fallback_divisor\":0}", &b),
              RK_INVALID_ARGUMENT, "`fallback_divisor`");
  CHECK_FAILS(rk_backend_new_from_json("{\"url\":\"rediss://x:1\",\"tls_ca_data\":\"not a certificate\"}", &b),
              RK_INVALID_ARGUMENT, "`tls_ca_data`");
  CHECK_FAILS(rk_backend_new_from_json("{\"url\":\"rediss://x:1\",\"tls_ca_file\":\"/nonexistent/ca.pem\"}", &b),
              RK_INVALID_ARGUMENT, "`tls_ca_file`");
  CHECK_FAILS(rk_backend_new_from_json("{\"url\":\"rediss://x:1\",\"tls_cert_file\":\"/nonexistent/c.pem\"}", &b),
              RK_INVALID_ARGUMENT, "tls_");
  CHECK_FAILS(rk_backend_new_from_json("{\"seeds\":[]}", &b), RK_INVALID_ARGUMENT, "`seeds`");
  CHECK_FAILS(rk_backend_new_from_json("{\"seeds\":[\"redis://x:1\",5]}", &b), RK_INVALID_ARGUMENT, "`seeds[1]`");
  CHECK_FAILS(rk_backend_new_from_json("{\"max_keys\":0}", &b), RK_INVALID_ARGUMENT, "`max_keys`");
  CHECK_FAILS(rk_backend_new_from_json("{\"max_keys\":1.5}", &b), RK_INVALID_ARGUMENT, "`max_keys`");
  CHECK_FAILS(rk_backend_new_from_json("{\"kind\":\"memory\",\"prefix\":\"p\"}", &b), RK_INVALID_ARGUMENT, "`prefix`");
  CHECK_FAILS(rk_backend_new_from_json("{\"url\":\"redis://x:1\",\"max_keys\":5}", &b), RK_INVALID_ARGUMENT, "`max_keys`");
  CHECK(b == SENTINEL);

  /* The same backend as the fixture's, built from JSON, shares its state. */
  char json[512];
  switch (f->kind) {
  case MEMORY:
    snprintf(json, sizeof json, "{\"max_keys\":100,\"client\":\"c\"}");
    break;
  case REDIS:
    snprintf(json, sizeof json, "{\"url\":\"%s\",\"prefix\":\"%s\",\"deadline\":5,\"connect_timeout\":5}", f->url, g_prefix);
    break;
  case CLUSTER:
    snprintf(json, sizeof json, "{\"seeds\":[\"%s\"],\"prefix\":\"%s\",\"deadline\":5,\"failure_policy\":\"fail_closed\"}",
             f->url, g_prefix);
    break;
  }
  b = NULL;
  if (!CHECK_OK(rk_backend_new_from_json(json, &b))) return;
  rk_limiter *from_json = NULL;
  must(rk_limiter_new_bucket(b, "c-json", 5, CENTURY, &from_json), from_json, "c-json");
  CHECK_U64(check1(from_json, "k", 2).remaining, 3);
  if (f->kind != MEMORY) {
    rk_backend *positional = new_backend(f);
    rk_limiter *same = NULL;
    must(rk_limiter_new_bucket(positional, "c-json", 5, CENTURY, &same), same, "c-json");
    CHECK_U64(peek1(same, "k").remaining, 3);
    rk_limiter_free(same);
    rk_backend_free(positional);
  } else {
    /* max_keys 100 took effect: the 101st key is refused rather than resetting a live one. */
    rk_status last = RK_OK;
    char key[16];
    for (int i = 0; i < 101 && last == RK_OK; i++) {
      rk_decision d;
      snprintf(key, sizeof key, "n%d", i);
      last = rk_limiter_check(from_json, key, 1, &d);
    }
    CHECK_STATUS(last, RK_BACKEND_UNAVAILABLE);
  }
  rk_limiter_free(from_json);
  rk_backend_free(b);
}

/* Bad arguments to every limiter constructor: the status, a message naming the parameter, and
 * nothing written. */
static void test_limiter_arguments(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = SENTINEL;
  char long_name[200];
  memset(long_name, 'n', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';

  /* What every constructor shares: backend, name, limiter_out. */
  CHECK_FAILS(rk_limiter_new_bucket(NULL, "n", 1, 1, &l), RK_NULL_PARAMETER, "backend");
  CHECK_FAILS(rk_limiter_new_bucket(b, NULL, 1, 1, &l), RK_NULL_PARAMETER, "name");
  CHECK_FAILS(rk_limiter_new_bucket(b, BAD_UTF8, 1, 1, &l), RK_INVALID_UTF8, "name");
  CHECK_FAILS(rk_limiter_new_bucket(b, "a b", 1, 1, &l), RK_INVALID_ARGUMENT, "name");
  CHECK_FAILS(rk_limiter_new_bucket(b, "", 1, 1, &l), RK_INVALID_ARGUMENT, "name");
  CHECK_FAILS(rk_limiter_new_bucket(b, long_name, 1, 1, &l), RK_INVALID_ARGUMENT, "name");
  CHECK_FAILS(rk_limiter_new_bucket(b, "n", 1, 1, NULL), RK_NULL_PARAMETER, "limiter_out");

  /* concurrent */
  CHECK_FAILS(rk_limiter_new_concurrent(NULL, "n", 1, 1, 1, &l), RK_NULL_PARAMETER, "backend");
  CHECK_FAILS(rk_limiter_new_concurrent(b, NULL, 1, 1, 1, &l), RK_NULL_PARAMETER, "name");
  CHECK_FAILS(rk_limiter_new_concurrent(b, BAD_UTF8, 1, 1, 1, &l), RK_INVALID_UTF8, "name");
  CHECK_FAILS(rk_limiter_new_concurrent(b, "n", 1, 1, 1, NULL), RK_NULL_PARAMETER, "limiter_out");
  CHECK_FAILS(rk_limiter_new_concurrent(b, "n", 0, 1, 1, &l), RK_INVALID_ARGUMENT, "limit");
  CHECK_FAILS(rk_limiter_new_concurrent(b, "n", RK_MAX_COUNT + 1, 1, 1, &l), RK_INVALID_ARGUMENT,
              "limit");
  CHECK_FAILS(rk_limiter_new_concurrent(b, "n", 1, 0, 1, &l), RK_INVALID_ARGUMENT, "lock_timeout");
  CHECK_FAILS(rk_limiter_new_concurrent(b, "n", 1, NAN, 1, &l), RK_INVALID_ARGUMENT, "lock_timeout");
  CHECK_FAILS(rk_limiter_new_concurrent(b, "n", 1, 1, -1, &l), RK_INVALID_ARGUMENT, "wait_timeout");
  CHECK_FAILS(rk_limiter_new_concurrent(b, "n", 1, 1, INFINITY, &l), RK_INVALID_ARGUMENT,
              "wait_timeout");

  /* bucket and window */
  CHECK_FAILS(rk_limiter_new_bucket(b, "n", 0, 1, &l), RK_INVALID_ARGUMENT, "limit");
  CHECK_FAILS(rk_limiter_new_bucket(b, "n", UINT64_MAX, 1, &l), RK_INVALID_ARGUMENT, "limit");
  CHECK_FAILS(rk_limiter_new_bucket(b, "n", 1, 0, &l), RK_INVALID_ARGUMENT, "interval");
  CHECK_FAILS(rk_limiter_new_bucket(b, "n", 1, -RK_SECOND, &l), RK_INVALID_ARGUMENT, "interval");
  CHECK_FAILS(rk_limiter_new_bucket(b, "n", 1, CENTURY * 2, &l), RK_INVALID_ARGUMENT, "interval");
  CHECK_FAILS(rk_limiter_new_window(NULL, "n", 1, 1, &l), RK_NULL_PARAMETER, "backend");
  CHECK_FAILS(rk_limiter_new_window(b, BAD_UTF8, 1, 1, &l), RK_INVALID_UTF8, "name");
  CHECK_FAILS(rk_limiter_new_window(b, "n", 1, 1, NULL), RK_NULL_PARAMETER, "limiter_out");
  CHECK_FAILS(rk_limiter_new_window(b, "n", 0, 1, &l), RK_INVALID_ARGUMENT, "limit");
  CHECK_FAILS(rk_limiter_new_window(b, "n", 1, NAN, &l), RK_INVALID_ARGUMENT, "interval");

  /* windows */
  rk_window_limit windows[] = {{1, 1}, {0, 1}};
  rk_window_limit bad_interval[] = {{1, -5}};
  CHECK_FAILS(rk_limiter_new_windows(NULL, "n", windows, 1, &l), RK_NULL_PARAMETER, "backend");
  CHECK_FAILS(rk_limiter_new_windows(b, NULL, windows, 1, &l), RK_NULL_PARAMETER, "name");
  CHECK_FAILS(rk_limiter_new_windows(b, "n", windows, 1, NULL), RK_NULL_PARAMETER, "limiter_out");
  CHECK_FAILS(rk_limiter_new_windows(b, "n", NULL, 1, &l), RK_NULL_PARAMETER, "windows");
  CHECK_FAILS(rk_limiter_new_windows(b, "n", NULL, 0, &l), RK_INVALID_ARGUMENT, "windows");
  CHECK_FAILS(rk_limiter_new_windows(b, "n", windows, 2, &l), RK_INVALID_ARGUMENT, "limit");
  CHECK_FAILS(rk_limiter_new_windows(b, "n", bad_interval, 1, &l), RK_INVALID_ARGUMENT, "interval");
  CHECK_FAILS(rk_limiter_new_windows(b, "n", windows, SIZE_MAX / 4, &l), RK_INVALID_ARGUMENT,
              "windows_len");

  /* sliding_window */
  rk_sliding_limit limits[] = {{60, 1, 0}};
  rk_sliding_limit fine_precision[] = {{3600, 1, 0.001}}; /* 3.6 million sub-buckets */
  rk_sliding_limit negative_precision[] = {{60, 1, -1}};
  rk_sliding_limit zero_limit[] = {{60, 0, 1}};
  rk_sliding_limit bad_duration[] = {{NAN, 1, 1}};
  CHECK_FAILS(rk_limiter_new_sliding_window(NULL, "n", limits, 1, &l), RK_NULL_PARAMETER,
              "backend");
  CHECK_FAILS(rk_limiter_new_sliding_window(b, BAD_UTF8, limits, 1, &l), RK_INVALID_UTF8, "name");
  CHECK_FAILS(rk_limiter_new_sliding_window(b, "n", limits, 1, NULL), RK_NULL_PARAMETER,
              "limiter_out");
  CHECK_FAILS(rk_limiter_new_sliding_window(b, "n", NULL, 3, &l), RK_NULL_PARAMETER, "limits");
  CHECK_FAILS(rk_limiter_new_sliding_window(b, "n", limits, 0, &l), RK_INVALID_ARGUMENT, "limits");
  CHECK_FAILS(rk_limiter_new_sliding_window(b, "n", fine_precision, 1, &l), RK_INVALID_ARGUMENT,
              "precision");
  CHECK_FAILS(rk_limiter_new_sliding_window(b, "n", negative_precision, 1, &l),
              RK_INVALID_ARGUMENT, "precision");
  CHECK_FAILS(rk_limiter_new_sliding_window(b, "n", zero_limit, 1, &l), RK_INVALID_ARGUMENT,
              "limit");
  CHECK_FAILS(rk_limiter_new_sliding_window(b, "n", bad_duration, 1, &l), RK_INVALID_ARGUMENT,
              "duration");

  /* token_bucket, leaky, points */
  CHECK_FAILS(rk_limiter_new_token_bucket(NULL, "n", 1, 1, &l), RK_NULL_PARAMETER, "backend");
  CHECK_FAILS(rk_limiter_new_token_bucket(b, BAD_UTF8, 1, 1, &l), RK_INVALID_UTF8, "name");
  CHECK_FAILS(rk_limiter_new_token_bucket(b, "n", 1, 1, NULL), RK_NULL_PARAMETER, "limiter_out");
  CHECK_FAILS(rk_limiter_new_token_bucket(b, "n", 0, 1, &l), RK_INVALID_ARGUMENT, "rate");
  CHECK_FAILS(rk_limiter_new_token_bucket(b, "n", NAN, 1, &l), RK_INVALID_ARGUMENT, "rate");
  CHECK_FAILS(rk_limiter_new_token_bucket(b, "n", 2e6, 1, &l), RK_INVALID_ARGUMENT, "rate");
  CHECK_FAILS(rk_limiter_new_token_bucket(b, "n", 1, 0, &l), RK_INVALID_ARGUMENT, "capacity");
  CHECK_FAILS(rk_limiter_new_leased(NULL, "n", 1, 1, 0, 0, &l), RK_NULL_PARAMETER, "backend");
  CHECK_FAILS(rk_limiter_new_leased(b, "n", 1, 1, 0, 0, NULL), RK_NULL_PARAMETER, "limiter_out");
  CHECK_FAILS(rk_limiter_new_leased(b, "n", 0, 1, 0, 0, &l), RK_INVALID_ARGUMENT, "rate");
  CHECK_FAILS(rk_limiter_new_leased(b, "n", 1, 4, 5, 0, &l), RK_INVALID_ARGUMENT, "chunk");
  CHECK_FAILS(rk_limiter_new_leased(b, "n", 1, 4, 2, -1, &l), RK_INVALID_ARGUMENT, "lease_ttl");
  CHECK_FAILS(rk_limiter_close(NULL), RK_NULL_PARAMETER, "limiter");
  CHECK_FAILS(rk_limiter_new_leaky(NULL, "n", 1, 1, &l), RK_NULL_PARAMETER, "backend");
  CHECK_FAILS(rk_limiter_new_leaky(b, BAD_UTF8, 1, 1, &l), RK_INVALID_UTF8, "name");
  CHECK_FAILS(rk_limiter_new_leaky(b, "n", 1, 1, NULL), RK_NULL_PARAMETER, "limiter_out");
  CHECK_FAILS(rk_limiter_new_leaky(b, "n", 0, 1, &l), RK_INVALID_ARGUMENT, "size");
  CHECK_FAILS(rk_limiter_new_leaky(b, "n", 1, -1, &l), RK_INVALID_ARGUMENT, "drain");
  CHECK_FAILS(rk_limiter_new_points(NULL, "n", 1, 1, &l), RK_NULL_PARAMETER, "backend");
  CHECK_FAILS(rk_limiter_new_points(b, BAD_UTF8, 1, 1, &l), RK_INVALID_UTF8, "name");
  CHECK_FAILS(rk_limiter_new_points(b, "n", 1, 1, NULL), RK_NULL_PARAMETER, "limiter_out");
  CHECK_FAILS(rk_limiter_new_points(b, "n", RK_MAX_COUNT + 1, 1, &l), RK_INVALID_ARGUMENT,
              "capacity");
  CHECK_FAILS(rk_limiter_new_points(b, "n", 1, INFINITY, &l), RK_INVALID_ARGUMENT, "refill");
  CHECK_FAILS(rk_limiter_new_unlimited(NULL), RK_NULL_PARAMETER, "limiter_out");
  CHECK(l == SENTINEL);
  rk_limiter_free(NULL); /* a no-op */
  rk_backend_free(b);
}

/* Bad arguments to every call: the status, a message naming the parameter, nothing written,
 * and the limiter's state untouched. */
static void test_call_arguments(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL, *c = NULL;
  must(rk_limiter_new_points(b, "c-args", 10, 1000.0, &l), l, "points");
  must(rk_limiter_new_concurrent(b, "c-args-c", 1, 30, 0, &c), c, "concurrent");
  char long_key[1100];
  memset(long_key, 'k', sizeof long_key - 1);
  long_key[sizeof long_key - 1] = '\0';
  rk_decision d, untouched;
  memset(&d, 0xab, sizeof d);
  memcpy(&untouched, &d, sizeof d);
  rk_lease lease = {0};

  CHECK_FAILS(rk_limiter_check(NULL, "k", 1, &d), RK_NULL_PARAMETER, "limiter");
  CHECK_FAILS(rk_limiter_check(l, "k", 1, NULL), RK_NULL_PARAMETER, "decision_out");
  CHECK_FAILS(rk_limiter_check(l, BAD_UTF8, 1, &d), RK_INVALID_UTF8, "key");
  CHECK_FAILS(rk_limiter_check(l, long_key, 1, &d), RK_INVALID_ARGUMENT, "key");
  CHECK_FAILS(rk_limiter_check(l, "k", RK_MAX_COUNT + 1, &d), RK_INVALID_ARGUMENT, "cost");
  CHECK_FAILS(rk_limiter_check(l, "k", 11, &d), RK_INVALID_ARGUMENT, "cost");
  CHECK_FAILS(rk_limiter_peek(NULL, "k", &d), RK_NULL_PARAMETER, "limiter");
  CHECK_FAILS(rk_limiter_peek(l, "k", NULL), RK_NULL_PARAMETER, "decision_out");
  CHECK_FAILS(rk_limiter_peek(l, BAD_UTF8, &d), RK_INVALID_UTF8, "key");
  CHECK_FAILS(rk_limiter_peek(l, long_key, &d), RK_INVALID_ARGUMENT, "key");
  CHECK_FAILS(rk_limiter_acquire(NULL, "k", 1, 0, &d), RK_NULL_PARAMETER, "limiter");
  CHECK_FAILS(rk_limiter_acquire(l, "k", 1, 0, NULL), RK_NULL_PARAMETER, "decision_out");
  CHECK_FAILS(rk_limiter_acquire(l, BAD_UTF8, 1, 0, &d), RK_INVALID_UTF8, "key");
  CHECK_FAILS(rk_limiter_acquire(l, "k", RK_MAX_COUNT + 1, 0, &d), RK_INVALID_ARGUMENT, "cost");
  CHECK_FAILS(rk_limiter_acquire(l, "k", 1, NAN, &d), RK_INVALID_ARGUMENT, "wait_timeout");
  CHECK_FAILS(rk_limiter_acquire(l, "k", 1, -2.0, &d), RK_INVALID_ARGUMENT, "wait_timeout");
  CHECK_FAILS(rk_limiter_acquire(l, "k", 1, 1e300, &d), RK_INVALID_ARGUMENT, "wait_timeout");
  CHECK_FAILS(rk_limiter_points_used(NULL, "k", 1, 1, &d), RK_NULL_PARAMETER, "limiter");
  CHECK_FAILS(rk_limiter_points_used(l, "k", 1, 1, NULL), RK_NULL_PARAMETER, "decision_out");
  CHECK_FAILS(rk_limiter_points_used(l, BAD_UTF8, 1, 1, &d), RK_INVALID_UTF8, "key");
  CHECK_FAILS(rk_limiter_points_used(l, "k", 11, 1, &d), RK_INVALID_ARGUMENT, "estimate");
  CHECK_FAILS(rk_limiter_points_used(l, "k", 1, UINT64_MAX, &d), RK_INVALID_ARGUMENT, "actual");
  CHECK(memcmp(&d, &untouched, sizeof d) == 0);

  CHECK_FAILS(rk_limiter_release(NULL, "k", &lease), RK_NULL_PARAMETER, "limiter");
  CHECK_FAILS(rk_limiter_release(c, "k", NULL), RK_NULL_PARAMETER, "lease");
  CHECK_FAILS(rk_limiter_release(c, BAD_UTF8, &lease), RK_INVALID_UTF8, "key");
  CHECK_FAILS(rk_limiter_release(c, long_key, &lease), RK_INVALID_ARGUMENT, "key");
  CHECK_FAILS(rk_limiter_extend(NULL, "k", &lease), RK_NULL_PARAMETER, "limiter");
  CHECK_FAILS(rk_limiter_extend(c, "k", NULL), RK_NULL_PARAMETER, "lease");
  CHECK_FAILS(rk_limiter_extend(c, BAD_UTF8, &lease), RK_INVALID_UTF8, "key");
  CHECK_FAILS(rk_limiter_reset(NULL, "k"), RK_NULL_PARAMETER, "limiter");
  CHECK_FAILS(rk_limiter_reset(l, BAD_UTF8), RK_INVALID_UTF8, "key");
  CHECK_FAILS(rk_limiter_reset(l, long_key), RK_INVALID_ARGUMENT, "key");

  /* None of it touched the state. */
  CHECK_U64(peek1(l, "k").remaining, 10);
  CHECK_U64(peek1(c, "k").remaining, 1);
  /* A key of exactly 1 KiB is fine, and so is any UTF-8. */
  long_key[1024] = '\0';
  CHECK(check1(l, long_key, 1).allowed);
  CHECK_U64(check1(l, "\xc3\xa9t\xc3\xa9 \xe2\x9c\x93 {tag} \"q\" *", 4).remaining, 6);
  rk_limiter_free(l);
  rk_limiter_free(c);
  rk_backend_free(b);
}

/* ---------------------------------------------------------------- errors and panics */

static void test_backoff(const fixture *f) {
  (void)f;
  rk_backoff *b = NULL;
  bool again = false;
  uint64_t delay = 0;
  /* Sidekiq's default: reschedule n waits 300 n s plus [0, 300) s; 21 is past the last. */
  CHECK_OK(rk_backoff_new(300, 300, 20, 7, &b));
  for (uint32_t n = 1; n <= 20; n++) {
    CHECK_OK(rk_backoff_reschedule_in(b, n, 0, &again, &delay));
    CHECK(again && delay >= 300000000ull * n && delay < 300000000ull * (n + 1));
  }
  CHECK_OK(rk_backoff_reschedule_in(b, 21, 0, &again, &delay));
  CHECK(!again);
  CHECK_U64(delay, 0);
  CHECK_FAILS(rk_backoff_reschedule_in(b, 0, 0, &again, &delay), RK_INVALID_ARGUMENT, "attempt");
  CHECK_FAILS(rk_backoff_reschedule_in(b, 1, 0, NULL, &delay), RK_NULL_PARAMETER, "reschedule_out");
  CHECK_FAILS(rk_backoff_reschedule_in(NULL, 1, 0, &again, &delay), RK_NULL_PARAMETER, "backoff");
  rk_backoff_free(b);
  /* retry_after is a floor; no jitter: exact. */
  CHECK_OK(rk_backoff_new(1, 0, 3, 0, &b));
  CHECK_OK(rk_backoff_reschedule_in(b, 2, 2500000, &again, &delay));
  CHECK(again);
  CHECK_U64(delay, 2500000);
  CHECK_OK(rk_backoff_reschedule_in(b, 3, 10, &again, &delay));
  CHECK_U64(delay, 3000000);
  rk_backoff_free(b);
  rk_backoff_free(NULL);
  b = NULL;
  CHECK_FAILS(rk_backoff_new(-1, 0, 3, 0, &b), RK_INVALID_ARGUMENT, "base");
  CHECK_FAILS(rk_backoff_new(1, NAN, 3, 0, &b), RK_INVALID_ARGUMENT, "jitter");
  CHECK_FAILS(rk_backoff_new(1, 1, 3, 0, NULL), RK_NULL_PARAMETER, "backoff_out");
  CHECK(b == NULL);
}

static void test_status_names_and_version(const fixture *f) {
  (void)f;
  CHECK(strcmp(rk_status_name(RK_OK), "RK_OK") == 0);
  CHECK(strcmp(rk_status_name(RK_OVER_LIMIT), "RK_OVER_LIMIT") == 0);
  CHECK(strcmp(rk_status_name(RK_PANIC), "RK_PANIC") == 0);
  CHECK(strcmp(rk_status_name(RK_UNKNOWN_ERROR), "RK_UNKNOWN_ERROR") == 0);
  CHECK(strcmp(rk_status_name(RK_BACKEND_REJECTED), "RK_BACKEND_REJECTED") == 0);
  CHECK(strcmp(rk_status_name(12345), "RK_UNKNOWN_ERROR") == 0);
  const char *version = rk_version();
  CHECK(version != NULL && version[0] >= '0' && version[0] <= '9' && strchr(version, '.'));
}

static void test_last_error_message(const fixture *f) {
  (void)f;
  rk_backend *b = NULL;
  CHECK_OK(rk_backend_new_memory(&b));
  rk_limiter *l = NULL;
  size_t n = 12345;
  char buf[8];
  /* After a success the message is empty. */
  CHECK_OK(rk_last_error_message(buf, sizeof buf, &n));
  CHECK_U64(n, 0);
  CHECK(buf[0] == '\0');

  CHECK_STATUS(rk_limiter_new_bucket(b, "n", 0, 1, &l), RK_INVALID_ARGUMENT);
  /* Measure, then read in full; the message names the parameter. */
  size_t full = 0;
  CHECK_OK(rk_last_error_message(NULL, 0, &full));
  CHECK(full > 10);
  char *message = malloc(full + 1);
  CHECK_OK(rk_last_error_message(message, full + 1, &n));
  CHECK_U64(n, full);
  CHECK_U64(strlen(message), full);
  CHECK(strstr(message, "`limit`") != NULL);
  /* Truncated like snprintf: len - 1 bytes and a NUL, *out_n the full length. */
  CHECK_OK(rk_last_error_message(buf, sizeof buf, &n));
  CHECK_U64(n, full);
  CHECK_U64(strlen(buf), sizeof buf - 1);
  CHECK(strncmp(buf, message, sizeof buf - 1) == 0);
  CHECK_OK(rk_last_error_message(buf, 1, &n));
  CHECK(buf[0] == '\0');
  /* Its own bad arguments keep the message. */
  CHECK_STATUS(rk_last_error_message(buf, sizeof buf, NULL), RK_NULL_PARAMETER);
  CHECK_STATUS(rk_last_error_message(NULL, 5, &n), RK_NULL_PARAMETER);
  CHECK_OK(rk_last_error_message(NULL, 0, &n));
  CHECK_U64(n, full);
  free(message);

  /* Truncation never splits a UTF-8 character: the key is echoed in no message, so use a name. */
  CHECK_STATUS(rk_limiter_new_bucket(b, "\xc3\xa9\xc3\xa9\xc3\xa9", 1, 1, &l), RK_INVALID_ARGUMENT);
  char big[512];
  CHECK_OK(rk_last_error_message(big, sizeof big, &n));
  const char *e = strstr(big, "\xc3\xa9");
  if (CHECK(e != NULL)) {
    size_t cut = (size_t)(e - big) + 2; /* a buffer ending inside the first 'é' */
    char small[512];
    CHECK_OK(rk_last_error_message(small, cut, &n));
    CHECK_U64(strlen(small), cut - 2);
  }
  /* A success clears it; the message is per thread. */
  CHECK_OK(rk_limiter_new_bucket(b, "n", 1, 1, &l));
  CHECK_OK(rk_last_error_message(NULL, 0, &n));
  CHECK_U64(n, 0);
  rk_limiter_free(l);
  rk_backend_free(b);
}

static void *fail_on_thread(void *arg) {
  (void)arg;
  rk_limiter *l = NULL;
  rk_limiter_new_unlimited(NULL);
  size_t n = 0;
  rk_last_error_message(NULL, 0, &n);
  (void)l;
  return (void *)(uintptr_t)n;
}

static void test_last_error_is_per_thread(const fixture *f) {
  (void)f;
  rk_limiter *l = NULL;
  CHECK_OK(rk_limiter_new_unlimited(&l));
  void *n_on_thread = NULL;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, fail_on_thread, NULL) == 0);
  pthread_join(t, &n_on_thread);
  CHECK((uintptr_t)n_on_thread > 0);
  size_t n = 99;
  CHECK_OK(rk_last_error_message(NULL, 0, &n));
  CHECK_U64(n, 0);
  rk_limiter_free(l);
}

/* A panic inside the library comes back as RK_PANIC, writes nothing, and leaves the handles
 * usable. */
static void test_panics_become_rk_panic(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  must(rk_limiter_new_bucket(b, "c-panic", 5, CENTURY, &l), l, "bucket");
  CHECK_FAILS(rk_test_panic(), RK_PANIC, "panic");

  rk_decision d, untouched;
  memset(&d, 0xab, sizeof d);
  memcpy(&untouched, &d, sizeof d);
  rk_test_panic_next_call();
  CHECK_FAILS(rk_limiter_check(l, "k", 1, &d), RK_PANIC, "rk_test_panic_next_call");
  CHECK(memcmp(&d, &untouched, sizeof d) == 0);
  CHECK_U64(check1(l, "k", 1).remaining, 4); /* the panicking call consumed nothing */

  rk_backend *other = SENTINEL;
  rk_test_panic_next_call();
  CHECK_STATUS(rk_backend_new_memory(&other), RK_PANIC);
  CHECK(other == SENTINEL);
  rk_test_panic_next_call();
  const char *name = rk_status_name(RK_OK); /* returns no status: a harmless value */
  CHECK(name != NULL && name[0] == '\0');
  rk_test_panic_next_call();
  rk_limiter_free(l); /* the panic happens before the free: the handle is still valid */
  CHECK_U64(check1(l, "k", 1).remaining, 3);
  rk_limiter_free(l);
  rk_backend_free(b);
}

/* ---------------------------------------------------------------- Redis failure policies */

/* A TCP listener that accepts connections (in the kernel's backlog) but never answers: the
 * worst kind of dead Redis. */
static int silent_listener(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr *)&addr, &len) != 0) {
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

/* A silent listener and its redis:// URL (in `url`, 64 bytes); the listener's fd, or -1. */
static int silent_redis(int *port, char url[64]) {
  int fd = silent_listener(port);
  if (fd >= 0) snprintf(url, 64, "redis://127.0.0.1:%d", *port);
  return fd;
}

static void test_failure_policies(const fixture *f) {
  (void)f;
  int port = 0;
  char url[64];
  int fd = silent_redis(&port, url);
  if (!CHECK(fd >= 0)) return;
  rk_backend *closed = NULL, *open = NULL, *fallback = NULL;
  CHECK_OK(rk_backend_new_redis(url, "dead", RK_FAIL_CLOSED, 0, 0.1, &closed));
  CHECK_OK(rk_backend_new_redis(url, "dead", RK_FAIL_OPEN, 0, 0.1, &open));
  CHECK_OK(rk_backend_new_redis(url, "dead", RK_FALLBACK, 2, 0.1, &fallback));
  rk_limiter *l = NULL;
  rk_decision d = {0};

  must(rk_limiter_new_bucket(closed, "c-dead", 4, CENTURY, &l), l, "bucket");
  rk_status s = rk_limiter_check(l, "k", 1, &d);
  CHECK(s == RK_TIMEOUT);
  CHECK(strlen(last_error()) > 0);
  rk_limiter_free(l);

  must(rk_limiter_new_bucket(open, "c-dead", 4, CENTURY, &l), l, "bucket");
  for (int i = 0; i < 6; i++) CHECK(check1(l, "k", 1).allowed);
  rk_limiter_free(l);

  /* The in-memory fallback takes over with 4 / 2 = 2. */
  must(rk_limiter_new_bucket(fallback, "c-dead", 4, CENTURY, &l), l, "bucket");
  CHECK(check1(l, "k", 1).allowed);
  CHECK(check1(l, "k", 1).allowed);
  CHECK(!check1(l, "k", 1).allowed);
  rk_limiter_free(l);

  /* Concurrent limiters fail closed under fail_open and fallback unless they opt in: a
   * per-process mutex is not a fleet-wide one, and a lease granted open guards nothing. */
  rk_backend *lenient[2] = {open, fallback};
  for (int i = 0; i < 2; i++) {
    rk_limiter *opted = NULL;
    must(rk_limiter_new_concurrent(lenient[i], "c-dead-mutex", 1, 60, 0, &l), l, "concurrent");
    s = rk_limiter_check(l, "k", 1, &d);
    CHECK(s == RK_TIMEOUT || s == RK_BACKEND_UNAVAILABLE);
    CHECK_OK(rk_limiter_with_allow_fallback(l, true, &opted));
    rk_decision granted = check1(opted, "k", 1);
    CHECK(granted.allowed && granted.has_lease);
    CHECK((granted.lease.fencing_token == 0) == (i == 0)); /* fail_open: token 0 */
    CHECK_OK(rk_limiter_release(opted, "k", &granted.lease));
    rk_limiter_free(opted);
    rk_limiter_free(l);
  }
  CHECK_FAILS(rk_limiter_with_allow_fallback(NULL, true, &l), RK_NULL_PARAMETER, "limiter");

  rk_backend_free(closed);
  rk_backend_free(open);
  rk_backend_free(fallback);
  close(fd);
}

static double monotonic_secs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A deferred event for ordering assertions: after `secs` (unless stopped first) it shuts the
 * silent listener down, ending the hang, and records that it did. A call asserted to end
 * "before the watchdog" did not wait on the server; `secs` bounds nothing measured. */
typedef struct {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int stopped;
  atomic_int fired;
  int fd;
  time_t secs;
} watchdog;

static void *watchdog_run(void *arg) {
  watchdog *w = arg;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += w->secs;
  pthread_mutex_lock(&w->lock);
  int rc = 0;
  while (!w->stopped && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&w->cond, &w->lock, &until);
  int fire = !w->stopped;
  pthread_mutex_unlock(&w->lock);
  if (fire) {
    shutdown(w->fd, SHUT_RDWR);
    atomic_store(&w->fired, 1);
  }
  return NULL;
}

static void watchdog_start(watchdog *w, int fd, time_t secs) {
  w->stopped = 0;
  atomic_init(&w->fired, 0);
  w->fd = fd;
  w->secs = secs;
  pthread_mutex_init(&w->lock, NULL);
  pthread_cond_init(&w->cond, NULL);
  pthread_create(&w->thread, NULL, watchdog_run, w);
}

/* Cancels the watchdog if it has not fired; returns whether it had. */
static int watchdog_stop(watchdog *w) {
  pthread_mutex_lock(&w->lock);
  w->stopped = 1;
  pthread_cond_signal(&w->cond);
  pthread_mutex_unlock(&w->lock);
  pthread_join(w->thread, NULL);
  pthread_mutex_destroy(&w->lock);
  pthread_cond_destroy(&w->cond);
  return atomic_load(&w->fired);
}

/* A silent server ends every call with RK_TIMEOUT at its deadline (not at the 1 s connect
 * timeout before it), with one message, on a standalone server and a cluster; and by itself:
 * before a watchdog ends the hang 10 s later (an ordering, not a latency bound). */
static void test_hung_redis_times_out_at_the_deadline(const fixture *f) {
  (void)f;
  int port = 0;
  char url[64];
  int fd = silent_redis(&port, url);
  if (!CHECK(fd >= 0)) return;
  const char *seeds[] = {url};
  rk_backend *backends[2] = {NULL, NULL};
  CHECK_OK(rk_backend_new_redis(url, "hung", RK_FAIL_CLOSED, 0, 2.0, &backends[0]));
  CHECK_OK(rk_backend_new_redis_cluster(seeds, 1, "hung", RK_FAIL_CLOSED, 0, 2.0, &backends[1]));
  for (int i = 0; i < 2; i++) {
    if (!backends[i]) continue;
    rk_limiter *l = NULL;
    must(rk_limiter_new_bucket(backends[i], "c-hung", 4, CENTURY, &l), l, "bucket");
    for (int round = 0; round < 2; round++) {
      rk_decision d = {0};
      watchdog w;
      watchdog_start(&w, fd, 10);
      double began = monotonic_secs();
      rk_status s = rk_limiter_check(l, "k", 1, &d);
      double took = monotonic_secs() - began;
      CHECK(!atomic_load(&w.fired)); /* ended while the server still hung */
      CHECK(!watchdog_stop(&w));
      CHECK(s == RK_TIMEOUT);
      CHECK(took >= 2.0);
      char expected[256];
      snprintf(expected, sizeof expected,
               "timed out: Redis at 127.0.0.1:%d did not answer within 2s; is it reachable from here and not overloaded? A slow link needs a longer deadline", port);
      CHECK(strcmp(last_error(), expected) == 0);
    }
    rk_limiter_free(l);
    rk_backend_free(backends[i]);
  }
  close(fd);
}

/* A wrong password is Redis refusing the call, not an outage: RK_BACKEND_REJECTED even under
 * RK_FAIL_OPEN and RK_FALLBACK (which would otherwise admit everything, silently). */
static void test_wrong_password_is_rejected(const fixture *f) {
  if (f->kind != REDIS) return;
  const char *host = strstr(f->url, "://");
  if (!CHECK(host != NULL)) return;
  char url[256];
  snprintf(url, sizeof url, "redis://nobody:wrong@%s", host + 3);
  const uint32_t policies[] = {RK_FAIL_OPEN, RK_FALLBACK};
  for (int i = 0; i < 2; i++) {
    rk_backend *b = NULL;
    CHECK_OK(rk_backend_new_redis(url, g_prefix, policies[i], policies[i] == RK_FALLBACK ? 2 : 0, 1.0, &b));
    if (!b) continue;
    rk_limiter *l = NULL;
    must(rk_limiter_new_bucket(b, "c-wrongpass", 4, CENTURY, &l), l, "bucket");
    rk_decision d = {0};
    CHECK(rk_limiter_check(l, "k", 1, &d) == RK_BACKEND_REJECTED);
    CHECK(strstr(last_error(), "WRONGPASS") != NULL);
    rk_limiter_free(l);
    rk_backend_free(b);
  }
}

/* A password in a URL never shows (issue #31, item 9): neither a refused URL's message nor a
 * wrong password's. The secret is "Pa55-w0rd-9f3e". */
static void test_passwords_never_show(const fixture *f) {
  if (f->kind != REDIS) return;
  const char *secret = "Pa55-w0rd-9f3e";
  const char *refused[] = {"redix://user:Pa55-w0rd-9f3e@127.0.0.1:1", "user:Pa55-w0rd-9f3e@127.0.0.1:6380"};
  for (int i = 0; i < 2; i++) {
    rk_backend *b = NULL;
    CHECK(rk_backend_new_redis(refused[i], NULL, RK_FAIL_CLOSED, 0, 0, &b) == RK_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "`url`") != NULL);
    if (!CHECK(strstr(last_error(), secret) == NULL)) fprintf(stderr, "    shown: %s\n", last_error());
  }
  const char *seeds[] = {"redis://127.0.0.1:1", "http://:Pa55-w0rd-9f3e@127.0.0.1:2"};
  rk_backend *c = NULL;
  CHECK(rk_backend_new_redis_cluster(seeds, 2, NULL, RK_FAIL_CLOSED, 0, 0, &c) == RK_INVALID_ARGUMENT);
  if (!CHECK(strstr(last_error(), secret) == NULL)) fprintf(stderr, "    shown: %s\n", last_error());

  const char *host = strstr(f->url, "://");
  if (!CHECK(host != NULL)) return;
  char url[256];
  snprintf(url, sizeof url, "redis://nobody:%s@%s", secret, host + 3);
  rk_backend *b = NULL;
  CHECK_OK(rk_backend_new_redis(url, g_prefix, RK_FAIL_CLOSED, 0, 1.0, &b));
  if (!b) return;
  rk_limiter *l = NULL;
  must(rk_limiter_new_bucket(b, "c-secret", 4, CENTURY, &l), l, "bucket");
  rk_decision d = {0};
  CHECK(rk_limiter_check(l, "k", 1, &d) == RK_BACKEND_REJECTED);
  CHECK(strstr(last_error(), "WRONGPASS") != NULL);
  if (!CHECK(strstr(last_error(), secret) == NULL)) fprintf(stderr, "    shown: %s\n", last_error());
  rk_limiter_free(l);
  rk_backend_free(b);
}

/* ---------------------------------------------------------------- runner */

typedef struct {
  const char *name;
  void (*run)(const fixture *);
  bool per_backend; /* run on every backend, or once */
} test_case;

static void test_pause_and_observe(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  /* One token per 1000 s: nothing refills while the test runs. */
  must(rk_limiter_new_token_bucket(b, "c-pause", 0.001, 5, &l), l, "token_bucket");
  CHECK(check1(l, "k", 1).allowed);
  uint64_t in_effect = 0;
  CHECK_OK(rk_limiter_pause(l, "k", 3600.0, &in_effect));
  CHECK_U64(in_effect, 3600u * 1000000u);
  for (int i = 0; i < 3; i++) {
    rk_decision d = check1(l, "k", 1);
    CHECK(!d.allowed);
    CHECK(d.retry_after_us > 0 && d.retry_after_us <= 3600u * 1000000u);
    CHECK_U64(d.remaining, 0);
  }
  CHECK(!peek1(l, "k").allowed);
  CHECK(check1(l, "other", 1).allowed);
  /* A shorter pause leaves the longer one in effect (NULL: the caller does not ask). */
  CHECK_OK(rk_limiter_pause(l, "k", 2.0, &in_effect));
  CHECK(in_effect > 2u * 1000000u);
  CHECK_OK(rk_limiter_pause(l, "k", 2.0, NULL));
  /* Bad durations are refused naming `duration`, before anything is written. */
  CHECK_FAILS(rk_limiter_pause(l, "fresh", 0.0, &in_effect), RK_INVALID_ARGUMENT, "duration");
  CHECK_FAILS(rk_limiter_pause(l, "fresh", -1.0, &in_effect), RK_INVALID_ARGUMENT, "duration");
  CHECK_FAILS(rk_limiter_pause(l, "fresh", NAN, &in_effect), RK_INVALID_ARGUMENT, "duration");
  CHECK_STATUS(rk_limiter_pause(NULL, "fresh", 1.0, &in_effect), RK_NULL_PARAMETER);
  CHECK(check1(l, "fresh", 1).allowed);

  /* observe: a 429 with Retry-After pauses for it; names are case-insensitive. */
  const char *names[] = {"Content-Type", "retry-after"};
  const char *values[] = {"text/plain", "30"};
  uint64_t pause_us = 1;
  CHECK_OK(rk_limiter_observe(l, "o", 429, names, values, 2, &pause_us));
  CHECK_U64(pause_us, 30u * 1000000u);
  rk_decision o = check1(l, "o", 1);
  CHECK(!o.allowed && o.retry_after_us > 0 && o.retry_after_us <= 30u * 1000000u);
  /* A 200, a 429 without a pause header, or a malformed value: no pause. */
  CHECK_OK(rk_limiter_observe(l, "n", 200, names, values, 2, &pause_us));
  CHECK_U64(pause_us, 0);
  CHECK_OK(rk_limiter_observe(l, "n", 429, names, values, 1, &pause_us));
  CHECK_U64(pause_us, 0);
  const char *bad_values[] = {"text/plain", "soon"};
  CHECK_OK(rk_limiter_observe(l, "n", 503, names, bad_values, 2, NULL));
  CHECK(check1(l, "n", 1).allowed);
  /* Bad arguments, named. */
  CHECK_FAILS(rk_limiter_observe(l, "n", 42, names, values, 2, &pause_us), RK_INVALID_ARGUMENT, "status");
  CHECK_FAILS(rk_limiter_observe(l, "n", 429, NULL, values, 2, &pause_us), RK_NULL_PARAMETER, "header_names");
  const char *holes[] = {"Retry-After", NULL};
  CHECK_FAILS(rk_limiter_observe(l, "n", 429, names, holes, 2, &pause_us), RK_NULL_PARAMETER, "header_values[1]");
  CHECK_OK(rk_limiter_observe(l, "n", 429, NULL, NULL, 0, &pause_us));
  CHECK(check1(l, "n", 1).allowed);

  /* reset forgets the pause. */
  CHECK_OK(rk_limiter_reset(l, "k"));
  CHECK(check1(l, "k", 1).allowed);

  /* A hostile Retry-After (70 years) pauses for max_pause: one hour by default, or the copy's. */
  const char *hostile_names[] = {"Retry-After"};
  const char *hostile_values[] = {"2200000000"};
  CHECK_OK(rk_limiter_observe(l, "h", 429, hostile_names, hostile_values, 1, &pause_us));
  CHECK_U64(pause_us, 3600u * 1000000u);
  rk_limiter *short_pauses = NULL;
  must(rk_limiter_with_max_pause(l, 10.0, &short_pauses), short_pauses, "with_max_pause");
  CHECK_OK(rk_limiter_observe(short_pauses, "s", 429, hostile_names, hostile_values, 1, &pause_us));
  CHECK_U64(pause_us, 10u * 1000000u);
  CHECK_OK(rk_limiter_pause(short_pauses, "s2", 60.0, &in_effect));
  CHECK_U64(in_effect, 10u * 1000000u);
  CHECK_FAILS(rk_limiter_with_max_pause(l, 0.0, &short_pauses), RK_INVALID_ARGUMENT, "max_pause");
  CHECK_FAILS(rk_limiter_with_max_pause(l, NAN, &short_pauses), RK_INVALID_ARGUMENT, "max_pause");
  /* resume ends a pause (in every process), and says whether there was one. */
  bool was_paused = false;
  CHECK(!check1(l, "h", 1).allowed);
  CHECK_OK(rk_limiter_resume(l, "h", &was_paused));
  CHECK(was_paused);
  CHECK(check1(short_pauses, "h", 1).allowed);
  CHECK_OK(rk_limiter_resume(l, "h", &was_paused));
  CHECK(!was_paused);
  CHECK_OK(rk_limiter_resume(short_pauses, "s", NULL));
  CHECK(check1(l, "s", 1).allowed);
  CHECK_STATUS(rk_limiter_resume(NULL, "h", &was_paused), RK_NULL_PARAMETER);
  rk_limiter_free(short_pauses);
  rk_limiter_free(l);
  rk_backend_free(b);
}

/* Blocking: by hand (rk_limiter_block / rk_limiter_unblock, apart from pauses) and after a
 * refusal (rk_limiter_with_block_for, "block_for" in a JSON spec), on every backend. */
static void test_block(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  /* One token per 1000 s: nothing refills while the test runs. */
  must(rk_limiter_new_token_bucket(b, "c-block", 0.001, 5, &l), l, "token_bucket");
  CHECK(check1(l, "k", 1).allowed);
  bool was_blocked = true;
  CHECK_OK(rk_limiter_unblock(l, "k", &was_blocked));
  CHECK(!was_blocked);
  uint64_t in_effect = 0;
  CHECK_OK(rk_limiter_block(l, "k", 3600.0, &in_effect));
  CHECK_U64(in_effect, 3600u * 1000000u);
  for (int i = 0; i < 3; i++) {
    rk_decision d = check1(l, "k", 1);
    CHECK(!d.allowed);
    CHECK(d.retry_after_us > 0 && d.retry_after_us <= 3600u * 1000000u);
    CHECK_U64(d.remaining, 0);
  }
  CHECK(!peek1(l, "k").allowed);
  CHECK(check1(l, "other", 1).allowed);
  /* A resume ends a pause, never a block; a block by hand replaces the one in effect. */
  bool was_paused = true;
  CHECK_OK(rk_limiter_resume(l, "k", &was_paused));
  CHECK(!was_paused);
  CHECK(!check1(l, "k", 1).allowed);
  CHECK_OK(rk_limiter_block(l, "k", 2.0, &in_effect));
  CHECK_U64(in_effect, 2u * 1000000u);
  CHECK_OK(rk_limiter_unblock(l, "k", &was_blocked));
  CHECK(was_blocked);
  rk_decision back = check1(l, "k", 1);
  CHECK(back.allowed);
  CHECK_U64(back.remaining, 3); /* the blocked refusals consumed nothing */
  /* Bad arguments are refused naming them, before anything is written. */
  CHECK_FAILS(rk_limiter_block(l, "fresh", 0.0, &in_effect), RK_INVALID_ARGUMENT, "duration");
  CHECK_FAILS(rk_limiter_block(l, "fresh", NAN, NULL), RK_INVALID_ARGUMENT, "duration");
  CHECK_STATUS(rk_limiter_block(NULL, "fresh", 1.0, NULL), RK_NULL_PARAMETER);
  CHECK_STATUS(rk_limiter_unblock(NULL, "fresh", NULL), RK_NULL_PARAMETER);
  CHECK(check1(l, "fresh", 1).allowed);

  /* block_for: a copy whose refusals block the key, and the same from a JSON spec. */
  rk_limiter *strict = NULL;
  CHECK_FAILS(rk_limiter_with_block_for(l, 0.0, &strict), RK_INVALID_ARGUMENT, "block_for");
  CHECK_FAILS(rk_limiter_with_block_for(l, -1.0, &strict), RK_INVALID_ARGUMENT, "block_for");
  must(rk_limiter_with_block_for(l, 600.0, &strict), strict, "with_block_for");
  for (int i = 0; i < 5; i++) CHECK(check1(strict, "u", 1).allowed);
  rk_decision refused = check1(strict, "u", 1);
  CHECK(!refused.allowed && refused.retry_after_us >= 599u * 1000000u);
  CHECK(peek1(l, "u").retry_after_us > 590u * 1000000u); /* the key's block, whoever asks */
  CHECK_OK(rk_limiter_reset(l, "u"));
  CHECK(check1(strict, "u", 1).allowed); /* reset forgets the block */
  rk_limiter *from_json = NULL;
  must(rk_limiter_new_from_json(b, "c-block-json", "{\"kind\":\"bucket\",\"limit\":1,\"interval\":3600,\"block_for\":60}", &from_json), from_json, "from_json");
  CHECK(check1(from_json, "j", 1).allowed);
  CHECK(check1(from_json, "j", 1).retry_after_us >= 60u * 1000000u);
  rk_limiter_free(from_json);

  /* The deny cache: a copy that remembers refusals answers the same refusal again. */
  rk_limiter *cached = NULL;
  must(rk_limiter_with_deny_cache(strict, true, &cached), cached, "with_deny_cache");
  CHECK_OK(rk_limiter_block(l, "d", 60.0, NULL));
  rk_decision first = check1(cached, "d", 1);
  rk_decision again = check1(cached, "d", 1);
  CHECK(!first.allowed && !again.allowed && again.retry_after_us <= first.retry_after_us);
  CHECK_STATUS(rk_limiter_with_deny_cache(NULL, true, &cached), RK_NULL_PARAMETER);
  CHECK_OK(rk_limiter_unblock(cached, "d", NULL));
  CHECK(check1(cached, "d", 1).allowed); /* unblock forgets the remembered refusal */
  rk_limiter_free(cached);
  rk_limiter_free(strict);
  rk_limiter_free(l);
  rk_backend_free(b);
}

/* The memory backend on a manual clock: the remaining pause is exact, and it ends exactly. */
static void test_pause_ends_by_the_manual_clock(const fixture *f) {
  (void)f;
  rk_manual_clock *clock = NULL;
  rk_backend *b = NULL;
  rk_limiter *l = NULL;
  CHECK_OK(rk_manual_clock_new(1700000000000000u, &clock));
  CHECK_OK(rk_backend_new_memory_with_clock(clock, &b));
  must(rk_limiter_new_token_bucket(b, "c-pause-clock", 0.001, 5, &l), l, "token_bucket");
  CHECK_OK(rk_limiter_pause(l, NULL, 10.0, NULL));
  CHECK_OK(rk_manual_clock_advance(clock, 4000000u));
  CHECK_U64(check1(l, NULL, 1).retry_after_us, 6000000u);
  uint64_t in_effect = 0;
  CHECK_OK(rk_limiter_pause(l, NULL, 2.0, &in_effect));
  CHECK_U64(in_effect, 6000000u);
  CHECK_OK(rk_manual_clock_advance(clock, 5999999u));
  CHECK_U64(check1(l, NULL, 1).retry_after_us, 1);
  CHECK_OK(rk_manual_clock_advance(clock, 1));
  rk_decision d = check1(l, NULL, 1);
  CHECK(d.allowed);
  CHECK_U64(d.remaining, 4); /* the paused refusals consumed nothing */
  rk_limiter_free(l);
  rk_backend_free(b);
  rk_manual_clock_free(clock);
}

/* rk_backend_new_from_json_with_clock: the configuration's options and a manual clock, on
 * every backend kind: decisions carry the clock's time (the Redis scripts take it instead of
 * the server's) and a window reopens when the clock, not the wall, moves on. The memory
 * backend's `shards` is read (a bad count names it; Redis refuses it as memory-only). */
static void test_backend_from_json_with_clock(const fixture *f) {
  rk_manual_clock *clock = NULL;
  rk_backend *b = SENTINEL;
  CHECK_OK(rk_manual_clock_new(1700000000000000u, &clock));
  CHECK_FAILS(rk_backend_new_from_json_with_clock("{}", NULL, &b), RK_NULL_PARAMETER, "clock");
  CHECK_FAILS(rk_backend_new_from_json_with_clock(NULL, clock, &b), RK_NULL_PARAMETER, "json");
  CHECK_FAILS(rk_backend_new_from_json_with_clock("{}", clock, NULL), RK_NULL_PARAMETER, "backend_out");
  CHECK_FAILS(rk_backend_new_from_json_with_clock("{\"shards\":0}", clock, &b), RK_INVALID_ARGUMENT, "`shards`");
  CHECK_FAILS(rk_backend_new_from_json_with_clock("{\"shards\":70000}", clock, &b), RK_INVALID_ARGUMENT, "`shards`");
  CHECK_FAILS(rk_backend_new_from_json("{\"url\":\"redis://x:1\",\"shards\":4}", &b), RK_INVALID_ARGUMENT, "`shards`");
  CHECK(b == SENTINEL);

  char json[512];
  switch (f->kind) {
  case MEMORY:
    snprintf(json, sizeof json, "{\"max_keys\":100,\"shards\":4}");
    break;
  case REDIS:
    snprintf(json, sizeof json, "{\"url\":\"%s\",\"prefix\":\"%s\",\"deadline\":5}", f->url, g_prefix);
    break;
  case CLUSTER:
    snprintf(json, sizeof json, "{\"seeds\":[\"%s\"],\"prefix\":\"%s\",\"deadline\":5}", f->url, g_prefix);
    break;
  }
  b = NULL;
  if (!CHECK_OK(rk_backend_new_from_json_with_clock(json, clock, &b))) {
    rk_manual_clock_free(clock);
    return;
  }
  rk_manual_clock_free(clock); /* the backend keeps what it needs */
  clock = NULL;
  rk_limiter *l = NULL;
  /* A fresh name per run: the Redis state outlives the test, the clock restarts each time. */
  char name[64];
  snprintf(name, sizeof name, "c-json-clock-%llu", (unsigned long long)time(NULL));
  must(rk_limiter_new_bucket(b, name, 2, 10.0, &l), l, "bucket");
  rk_decision d = check1(l, "k", 2);
  CHECK(d.allowed);
  CHECK_U64(d.decided_at_us, 1700000000000000u);
  d = check1(l, "k", 1);
  CHECK(!d.allowed);
  CHECK_U64(d.retry_after_us, 10000000u); /* the window aligned to the clock: 10 s to go */
  rk_limiter_free(l);
  rk_backend_free(b);
}

/* Leased partitions: one member holds every partition (memory: always), acquire paces calls to
 * the held rate, close gives them back on Redis, bad input names its parameter. */
static void test_partitions(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  must(rk_limiter_new_partitions(b, "c-parts", 100.0, 10, 3.0, 0, 0, &l), l, "partitions");
  uint64_t first = 0, last = 0;
  for (int i = 0; i < 6; i++) {
    rk_decision d;
    memset(&d, 0, sizeof d);
    CHECK_OK(rk_limiter_acquire(l, NULL, 1, 5.0, &d));
    CHECK(d.allowed);
    if (i == 0) first = d.decided_at_us;
    last = d.decided_at_us;
  }
  /* 100 per second is one call per 10 ms; at most 20 ms of it carried: 5 gaps take >= 30 ms. */
  CHECK(last - first >= 30000);
  uint64_t held = 0;
  CHECK_OK(rk_limiter_partitions_held(l, NULL, &held));
  CHECK_U64(held, 10);
  CHECK_OK(rk_limiter_close(l));
  CHECK_OK(rk_limiter_partitions_held(l, NULL, &held));
  CHECK_U64(held, f->kind == MEMORY ? 10 : 0);
  rk_limiter *bad = NULL;
  CHECK_FAILS(rk_limiter_new_partitions(b, "c-parts", 0.0, 10, 3.0, 0, 0, &bad), RK_INVALID_ARGUMENT, "total_rate");
  CHECK_FAILS(rk_limiter_new_partitions(b, "c-parts", 100.0, 10, 0.01, 0, 0, &bad), RK_INVALID_ARGUMENT, "lease_ttl");
  CHECK_FAILS(rk_limiter_new_partitions(b, "c-parts", 100.0, 10, 3.0, 0, 1, &bad), RK_INVALID_ARGUMENT, "reserved");
  CHECK(bad == NULL);
  rk_limiter_free(l);
  rk_backend_free(b);
}

/* ---------------------------------------------------------------- checks that complete later */

/* Callbacks of rk_limiter_check_start land in slots; the test thread waits on `cond` until
 * `done` reaches what it submitted (bounded: a lost callback fails the test instead of hanging
 * it). */
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int done;
} completions;

typedef struct {
  completions *c;
  int calls;
  rk_status status;
  bool had_decision, on_submitting_thread;
  rk_decision decision;
  char message[512];
  pthread_t submitter;
} slot;

static void on_complete(void *user_data, rk_status status, const rk_decision *decision,
                        const char *error_message) {
  slot *s = user_data;
  pthread_mutex_lock(&s->c->lock);
  s->calls++;
  s->status = status;
  s->had_decision = decision != NULL;
  if (decision) s->decision = *decision;
  snprintf(s->message, sizeof s->message, "%s", error_message ? error_message : "(NULL)");
  s->on_submitting_thread = pthread_equal(pthread_self(), s->submitter);
  s->c->done++;
  pthread_cond_broadcast(&s->c->cond);
  pthread_mutex_unlock(&s->c->lock);
}

/* Waits (60 s at most) until `n` callbacks have come; false if they did not. */
static bool await_completions(completions *c, int n) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 60;
  pthread_mutex_lock(&c->lock);
  while (c->done < n && pthread_cond_timedwait(&c->cond, &c->lock, &until) == 0) {
  }
  bool all = c->done >= n;
  pthread_mutex_unlock(&c->lock);
  return all;
}

static int completions_so_far(completions *c) {
  pthread_mutex_lock(&c->lock);
  int n = c->done;
  pthread_mutex_unlock(&c->lock);
  return n;
}

#define IN_FLIGHT 150

/* 150 checks in flight at once on a limit of 100: each callback is called exactly once, from a
 * runtime thread, and exactly 100 are admitted, each with a different `remaining`. */
static void test_check_start(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *l = NULL;
  must(rk_limiter_new_bucket(b, "c-start", 100, CENTURY, &l), l, "bucket");
  completions c = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  static slot slots[IN_FLIGHT];
  memset(slots, 0, sizeof slots);
  for (int i = 0; i < IN_FLIGHT; i++) {
    slots[i] = (slot){.c = &c, .submitter = pthread_self()};
    CHECK_OK(rk_limiter_check_start(l, "k", 1, on_complete, &slots[i]));
  }
  if (!CHECK(await_completions(&c, IN_FLIGHT))) return; /* slots still referenced: leak, not free */
  int admitted = 0;
  bool seen[100] = {false};
  for (int i = 0; i < IN_FLIGHT; i++) {
    CHECK_U64((uint64_t)slots[i].calls, 1);
    CHECK_STATUS(slots[i].status, RK_OK);
    CHECK(slots[i].had_decision);
    CHECK(!slots[i].on_submitting_thread);
    CHECK(strcmp(slots[i].message, "") == 0);
    if (slots[i].decision.allowed) {
      admitted++;
      uint64_t r = slots[i].decision.remaining;
      if (CHECK(r < 100)) {
        CHECK(!seen[r]);
        seen[r] = true;
      }
    } else {
      CHECK(slots[i].decision.retry_after_us > 0);
    }
  }
  CHECK_U64((uint64_t)admitted, 100);
  CHECK_U64(peek1(l, "k").remaining, 0);

  /* The key is copied before the call returns: freed at once (AddressSanitizer would report a
   * later read), the check still counts against it. */
  char *key = strdup("copied-key");
  slot copied = {.c = &c, .submitter = pthread_self()};
  CHECK_OK(rk_limiter_check_start(l, key, 3, on_complete, &copied));
  free(key);
  CHECK(await_completions(&c, IN_FLIGHT + 1));
  CHECK_STATUS(copied.status, RK_OK);
  CHECK_U64(peek1(l, "copied-key").remaining, 97);

  /* Bad values come through the callback, naming the parameter; nothing is consumed. */
  char long_key[1100];
  memset(long_key, 'x', sizeof long_key - 1);
  long_key[sizeof long_key - 1] = '\0';
  slot bad_key = {.c = &c, .submitter = pthread_self()};
  slot bad_cost = {.c = &c, .submitter = pthread_self()};
  CHECK_OK(rk_limiter_check_start(l, long_key, 1, on_complete, &bad_key));
  CHECK_OK(rk_limiter_check_start(l, "copied-key", RK_MAX_COUNT + 1, on_complete, &bad_cost));
  CHECK(await_completions(&c, IN_FLIGHT + 3));
  CHECK_STATUS(bad_key.status, RK_INVALID_ARGUMENT);
  CHECK(!bad_key.had_decision);
  CHECK(strstr(bad_key.message, "`key`") != NULL);
  CHECK_STATUS(bad_cost.status, RK_INVALID_ARGUMENT);
  CHECK(strstr(bad_cost.message, "`cost`") != NULL);
  CHECK_U64(peek1(l, "copied-key").remaining, 97);

  /* NULL and invalid UTF-8 are refused at once, and then the callback is never called. */
  slot never = {.c = &c, .submitter = pthread_self()};
  CHECK_FAILS(rk_limiter_check_start(NULL, "k", 1, on_complete, &never), RK_NULL_PARAMETER,
              "limiter");
  CHECK_FAILS(rk_limiter_check_start(l, "k", 1, NULL, &never), RK_NULL_PARAMETER, "callback");
  CHECK_FAILS(rk_limiter_check_start(l, "\xff", 1, on_complete, &never), RK_INVALID_UTF8, "key");

  /* A panic inside the submitted call reaches the callback as RK_PANIC, with its message. */
  slot panicked = {.c = &c, .submitter = pthread_self()};
  rk_test_panic_next_task();
  CHECK_OK(rk_limiter_check_start(l, "copied-key", 1, on_complete, &panicked));
  CHECK(await_completions(&c, IN_FLIGHT + 4));
  CHECK_STATUS(panicked.status, RK_PANIC);
  CHECK(strstr(panicked.message, "rk_test_panic_next_task") != NULL);
  CHECK_U64(peek1(l, "copied-key").remaining, 97);

  /* The limiter may be freed while its checks are in flight: they complete. */
  slot after_free[8];
  for (int i = 0; i < 8; i++) {
    after_free[i] = (slot){.c = &c, .submitter = pthread_self()};
    CHECK_OK(rk_limiter_check_start(l, "freed", 1, on_complete, &after_free[i]));
  }
  rk_limiter_free(l);
  CHECK(await_completions(&c, IN_FLIGHT + 12));
  for (int i = 0; i < 8; i++) {
    CHECK_STATUS(after_free[i].status, RK_OK);
    CHECK(after_free[i].decision.allowed);
  }
  CHECK_U64((uint64_t)never.calls, 0);
  CHECK_U64((uint64_t)completions_so_far(&c), IN_FLIGHT + 12);
  rk_backend_free(b);
}

/* The other started calls: peek, acquire (waiting on the library's runtime, no thread of the
 * caller), release (no decision) and settle, through the same callback; an acquire that times
 * out reports RK_OVER_LIMIT with its refusal; bad arguments the call can refuse at once are
 * refused at once, and then no callback comes. */
static void test_started_calls(const fixture *f) {
  rk_backend *b = new_backend(f);
  rk_limiter *mutex = NULL, *tb = NULL;
  must(rk_limiter_new_concurrent(b, "c-started", 1, CENTURY, 5.0, &mutex), mutex, "concurrent");
  must(rk_limiter_new_token_bucket(b, "tb-started", 0.001, 100, &tb), tb, "token bucket");
  completions c = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  int expected = 0;

  slot first = {.c = &c, .submitter = pthread_self()};
  CHECK_OK(rk_limiter_acquire_start(mutex, "k", 1, 0.0, on_complete, &first));
  if (!CHECK(await_completions(&c, ++expected))) return;
  CHECK_STATUS(first.status, RK_OK);
  CHECK(first.had_decision && first.decision.has_lease && !first.on_submitting_thread);

  slot timed_out = {.c = &c, .submitter = pthread_self()};
  CHECK_OK(rk_limiter_acquire_start(mutex, "k", 1, 0.05, on_complete, &timed_out));
  if (!CHECK(await_completions(&c, ++expected))) return;
  CHECK_STATUS(timed_out.status, RK_OVER_LIMIT);
  CHECK(timed_out.had_decision && !timed_out.decision.allowed && !timed_out.decision.has_lease);
  CHECK(timed_out.message[0] != '\0');

  /* A waiting acquire, then the release that wakes it. */
  slot waiting = {.c = &c, .submitter = pthread_self()};
  slot released = {.c = &c, .submitter = pthread_self()};
  CHECK_OK(rk_limiter_acquire_start(mutex, "k", 1, 30.0, on_complete, &waiting));
  CHECK_OK(rk_limiter_release_start(mutex, "k", &first.decision.lease, on_complete, &released));
  expected += 2;
  if (!CHECK(await_completions(&c, expected))) return;
  CHECK_STATUS(released.status, RK_OK);
  CHECK(!released.had_decision);
  CHECK_STATUS(waiting.status, RK_OK);
  CHECK(waiting.decision.has_lease &&
        waiting.decision.lease.fencing_token > first.decision.lease.fencing_token);

  /* Released twice: the second is lost. */
  slot again = {.c = &c, .submitter = pthread_self()};
  CHECK_OK(rk_limiter_release_start(mutex, "k", &first.decision.lease, on_complete, &again));
  if (!CHECK(await_completions(&c, ++expected))) return;
  CHECK_STATUS(again.status, RK_LEASE_LOST);
  CHECK(!again.had_decision && again.message[0] != '\0');

  slot peeked = {.c = &c, .submitter = pthread_self()};
  CHECK_OK(rk_limiter_peek_start(mutex, "k", on_complete, &peeked));
  if (!CHECK(await_completions(&c, ++expected))) return;
  CHECK_STATUS(peeked.status, RK_OK);
  CHECK(peeked.had_decision && !peeked.decision.allowed && !peeked.decision.has_lease);

  /* Settled from 5 to 2, twice: applied once. The decision is copied before the call returns. */
  rk_decision checked;
  CHECK_OK(rk_limiter_check(tb, "k", 5, &checked));
  rk_decision copy = checked;
  slot settled = {.c = &c, .submitter = pthread_self()};
  slot resettled = {.c = &c, .submitter = pthread_self()};
  CHECK_OK(rk_limiter_settle_start(tb, "k", &copy, 2, on_complete, &settled));
  memset(&copy, 0, sizeof copy);
  CHECK_OK(rk_limiter_settle_start(tb, "k", &checked, 2, on_complete, &resettled));
  expected += 2;
  if (!CHECK(await_completions(&c, expected))) return;
  CHECK_STATUS(settled.status, RK_OK);
  CHECK_STATUS(resettled.status, RK_OK);
  CHECK_U64(peek1(tb, "k").remaining, 98);

  /* Refused at once: no callback. */
  slot never = {.c = &c, .submitter = pthread_self()};
  CHECK_FAILS(rk_limiter_acquire_start(mutex, "k", 1, -5.0, on_complete, &never), RK_INVALID_ARGUMENT,
              "wait_timeout");
  CHECK_FAILS(rk_limiter_release_start(mutex, "k", NULL, on_complete, &never), RK_NULL_PARAMETER, "lease");
  CHECK_FAILS(rk_limiter_settle_start(tb, "k", NULL, 1, on_complete, &never), RK_NULL_PARAMETER,
              "decision");
  CHECK_FAILS(rk_limiter_peek_start(mutex, "k", NULL, &never), RK_NULL_PARAMETER, "callback");
  CHECK_U64((uint64_t)never.calls, 0);

  slot last = {.c = &c, .submitter = pthread_self()};
  CHECK_OK(rk_limiter_release_start(mutex, "k", &waiting.decision.lease, on_complete, &last));
  CHECK(await_completions(&c, ++expected));
  CHECK_STATUS(last.status, RK_OK);
  CHECK_U64((uint64_t)completions_so_far(&c), (uint64_t)expected);
  rk_limiter_free(mutex);
  rk_limiter_free(tb);
  rk_backend_free(b);
}

/* Against a Redis that never answers, the call returns at once and the callback receives the
 * timeout, with the message the blocking call would have left in the thread-local one. */
static void test_check_start_on_a_hung_redis(const fixture *f) {
  (void)f;
  int port = 0;
  char url[64];
  int fd = silent_redis(&port, url);
  if (!CHECK(fd >= 0)) return;
  rk_backend *b = NULL;
  CHECK_OK(rk_backend_new_redis(url, "hung", RK_FAIL_CLOSED, 0, 2.0, &b));
  rk_limiter *l = NULL;
  must(rk_limiter_new_bucket(b, "c-hung-start", 4, CENTURY, &l), l, "bucket");
  completions c = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  slot s = {.c = &c, .submitter = pthread_self()};
  watchdog w;
  watchdog_start(&w, fd, 30);
  CHECK_OK(rk_limiter_check_start(l, "k", 1, on_complete, &s));
  /* Returned while the server still hangs: no answer could have come yet. */
  CHECK(!atomic_load(&w.fired));
  CHECK_U64((uint64_t)completions_so_far(&c), 0);
  CHECK(await_completions(&c, 1));
  CHECK(!atomic_load(&w.fired)); /* the deadline, not the watchdog closing the socket, ended it */
  CHECK(!watchdog_stop(&w));
  CHECK_STATUS(s.status, RK_TIMEOUT);
  CHECK(!s.had_decision);
  char expected[256];
  snprintf(expected, sizeof expected,
           "timed out: Redis at 127.0.0.1:%d did not answer within 2s; is it reachable from here and not overloaded? A slow link needs a longer deadline", port);
  CHECK(strcmp(s.message, expected) == 0);
  rk_limiter_free(l);
  rk_backend_free(b);
  close(fd);
}

static const test_case TESTS[] = {
    {"status names and version", test_status_names_and_version, false},
    {"backoff", test_backoff, false},
    {"last error message", test_last_error_message, false},
    {"last error is per thread", test_last_error_is_per_thread, false},
    {"backend arguments", test_backend_arguments, false},
    {"backend from JSON", test_backend_from_json, true},
    {"unlimited", test_unlimited, false},
    {"failure policies on a silent Redis", test_failure_policies, false},
    {"a hung Redis times out at the deadline", test_hung_redis_times_out_at_the_deadline, false},
    {"panics become RK_PANIC", test_panics_become_rk_panic, false},
    {"limiter arguments", test_limiter_arguments, true},
    {"call arguments", test_call_arguments, true},
    {"bucket", test_bucket, true},
    {"a wrong password is RK_BACKEND_REJECTED", test_wrong_password_is_rejected, true},
    {"passwords never show", test_passwords_never_show, true},
    {"window and windows", test_window, true},
    {"sliding window", test_sliding_window, true},
    {"token bucket", test_token_bucket, true},
    {"leased", test_leased, true},
    {"leaky", test_leaky, true},
    {"points", test_points, true},
    {"settle", test_settle, true},
    {"calendar", test_calendar, true},
    {"spec_json", test_spec_json, true},
    {"live_limits", test_live_limits, true},
    {"concurrent", test_concurrent, true},
    {"check_all", test_check_all, true},
    {"shadow", test_shadow, true},
    {"acquire woken by release", test_acquire_woken_by_release, true},
    {"acquire waits for refill", test_acquire_waits_for_refill, true},
    {"16 threads share one bucket", test_threads_share_one_bucket, true},
    {"16 threads share one concurrent limit", test_threads_share_one_semaphore, true},
    {"pause and observe", test_pause_and_observe, true},
    {"block, unblock and block_for", test_block, true},
    {"partitions", test_partitions, true},
    {"checks that complete through a callback", test_check_start, true},
    {"peek, acquire, settle and release that complete through a callback", test_started_calls, true},
    {"a check started on a hung Redis completes with the timeout", test_check_start_on_a_hung_redis, false},
    {"a pause ends by the manual clock", test_pause_ends_by_the_manual_clock, false},
    {"backend from JSON on a manual clock", test_backend_from_json_with_clock, true},
};

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  snprintf(g_prefix, sizeof g_prefix, "rkc%ld", (long)getpid());
  fixture fixtures[3];
  int n_fixtures = 0, skipped = 0;
  fixtures[n_fixtures++] = (fixture){"memory", MEMORY, NULL};
  const char *redis = getenv("RK_TEST_REDIS_URL");
  const char *cluster = getenv("RK_TEST_REDIS_CLUSTER_URL");
  if (redis && *redis) {
    fixtures[n_fixtures++] = (fixture){"redis", REDIS, redis};
  } else {
    printf("RK_TEST_REDIS_URL is not set: Redis tests skipped\n");
  }
  if (cluster && *cluster) {
    fixtures[n_fixtures++] = (fixture){"cluster", CLUSTER, cluster};
  } else {
    printf("RK_TEST_REDIS_CLUSTER_URL is not set: Redis Cluster tests skipped\n");
  }
  printf("libratekeeper %s\n", rk_version());

  int passed = 0, failed = 0;
  for (size_t i = 0; i < sizeof TESTS / sizeof TESTS[0]; i++) {
    const test_case *t = &TESTS[i];
    for (int j = 0; j < (t->per_backend ? 3 : 1); j++) {
      if (t->per_backend && j >= n_fixtures) {
        skipped++;
        continue;
      }
      const fixture *f = &fixtures[j];
      g_context = t->per_backend ? f->label : "-";
      g_check_failures = 0;
      t->run(f);
      if (g_check_failures == 0) {
        passed++;
        printf("  ok   %s%s%s\n", t->name, t->per_backend ? " / " : "",
               t->per_backend ? f->label : "");
      } else {
        failed++;
        printf("  FAIL %s%s%s (%d checks failed)\n", t->name, t->per_backend ? " / " : "",
               t->per_backend ? f->label : "", g_check_failures);
      }
    }
  }
  if (skipped) {
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  } else {
    printf("%d passed, %d failed\n", passed, failed);
  }
  return failed == 0 ? 0 : 1;
}
