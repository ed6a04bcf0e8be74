// C helpers of the module's cgo preambles: how a call's key goes in and its result comes out
// without a Go allocation or a locked OS thread. Each preamble is compiled on its own, so these
// are static inline (a preamble uses the ones it calls).
//
// - The key is passed as a Go string (_GoString_: its pointer and length, no copy, no
//   allocation). C never keeps that pointer: the helper copies the key, NUL-terminated, into a
//   buffer on the C stack for the duration of the library call (the library copies what it
//   keeps). The Go side has refused keys holding a NUL byte.
// - The limiter comes as an address (uintptr_t): a *C.rk_limiter argument would be boxed into
//   an interface for cgo's pointer check on every call (a heap allocation: the C type is
//   incomplete, so Go does not treat the pointer as one), for memory Go's collector never sees.
// - The result comes back by value (rkgo_result), so nothing of it escapes to Go's heap, with,
//   on failure, the library's thread-local message already read on the thread that failed (a
//   malloc'd copy the Go side frees): no goroutine needs runtime.LockOSThread for a call.

#ifndef RKGO_H
#define RKGO_H

#include <stdlib.h>
#include <string.h>
#include "ratekeeper.h"

// Keys up to 1 KiB (the library's limit) fit here with their NUL; a longer key, which the
// library refuses naming `key`, is copied to the heap so that the library words that refusal.
#define RKGO_KEY_BUF 1025

// A key as the library takes it, for the duration of one call.
typedef struct {
	char buf[RKGO_KEY_BUF];
	char *heap;
} rkgo_key_text;

// The key as NUL-terminated text in t: NULL for "" (the limiter's single shared key).
static inline const char *rkgo_key(rkgo_key_text *t, _GoString_ key) {
	size_t n = _GoStringLen(key);
	t->heap = NULL;
	if (n == 0) return NULL;
	char *dst = t->buf;
	if (n >= sizeof t->buf) {
		dst = t->heap = malloc(n + 1);
		if (dst == NULL) abort(); // as Go's own allocator does when memory runs out
	}
	memcpy(dst, _GoStringPtr(key), n);
	dst[n] = 0;
	return dst;
}

// Frees what rkgo_key allocated (nothing for keys up to 1 KiB).
static inline void rkgo_key_done(rkgo_key_text *t) { free(t->heap); }

// A call's outcome: its status, the decision on RK_OK (and on an acquire's RK_OVER_LIMIT), and
// on failure a malloc'd copy of the message (the Go side frees it; NULL on RK_OK).
typedef struct {
	rk_decision decision;
	char *message;
	int32_t status;
} rkgo_result;

// The calling thread's message after a failed call, as a malloc'd copy; NULL after RK_OK.
static inline char *rkgo_message(enum rk_status st) {
	if (st == RK_OK) return NULL;
	size_t n = 0;
	rk_last_error_message(NULL, 0, &n);
	char *m = malloc(n + 1);
	if (m == NULL) abort();
	rk_last_error_message(m, n + 1, &n);
	return m;
}

// Finishes a result: the message of a failure.
static inline rkgo_result rkgo_finish(rkgo_result r) {
	r.message = rkgo_message((enum rk_status)r.status);
	return r;
}

// The calls: each runs one library call with the limiter `l` and the key as NUL-terminated text
// `k` (for the duration of the call), with `r.decision` zeroed first for the calls that may not
// write it, and returns the finished result.
#define RKGO_CALL(limiter, key, zero, call)                \
	do {                                                   \
		const rk_limiter *l = (const rk_limiter *)limiter; \
		rkgo_key_text text;                                \
		const char *k = rkgo_key(&text, key);              \
		rkgo_result r;                                     \
		if (zero) memset(&r.decision, 0, sizeof r.decision); \
		r.status = (call);                                 \
		rkgo_key_done(&text);                              \
		return rkgo_finish(r);                             \
	} while (0)

static inline rkgo_result rkgo_check(uintptr_t limiter, _GoString_ key, uint64_t cost) {
	RKGO_CALL(limiter, key, 0, rk_limiter_check(l, k, cost, &r.decision));
}

static inline rkgo_result rkgo_peek(uintptr_t limiter, _GoString_ key) {
	RKGO_CALL(limiter, key, 0, rk_limiter_peek(l, k, &r.decision));
}

static inline rkgo_result rkgo_acquire(uintptr_t limiter, _GoString_ key, uint64_t cost, double wait) {
	RKGO_CALL(limiter, key, 1, rk_limiter_acquire(l, k, cost, wait, &r.decision));
}

static inline rkgo_result rkgo_settle(uintptr_t limiter, _GoString_ key, rk_decision d, uint64_t actual) {
	RKGO_CALL(limiter, key, 0, rk_limiter_settle(l, k, &d, actual, &r.decision));
}

static inline rkgo_result rkgo_release(uintptr_t limiter, _GoString_ key, rk_lease lease) {
	RKGO_CALL(limiter, key, 1, rk_limiter_release(l, k, &lease));
}

// The started calls' key, for the duration of the submitting call (the library copies it).
#define RKGO_START(key, call)                   \
	do {                                        \
		rkgo_key_text text;                     \
		const char *k = rkgo_key(&text, key);   \
		enum rk_status st = (call);             \
		rkgo_key_done(&text);                   \
		return st;                              \
	} while (0)

#endif
