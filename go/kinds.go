package ratekeeper

/*
#include "ratekeeper.h"
*/
import "C"

import (
	"encoding/json"
	"runtime"
	"sync/atomic"
	"time"
)

// The limiter kinds: one constructor each on Backend, over the C library's. Names are 1 to 128
// characters from [A-Za-z0-9_-]; limiters with the same kind and name on the same backend (or
// the same Redis, from any process and any language) share state.

// newLimiter builds a limiter with build, given the backend's handle and the name as C text.
func (b *Backend) newLimiter(name string, build func(*C.rk_backend, *C.char, **C.rk_limiter) status) (*Limiter, error) {
	n, err := text(name, "name")
	if err != nil {
		return nil, err
	}
	var ptr *C.rk_limiter
	if err := b.use(func(p *C.rk_backend) status { return build(p, n.ptr(), &ptr) }); err != nil {
		return nil, err
	}
	return newLimiterHandle(ptr, b, name), nil
}

// newLimiterHandle wraps a new native limiter, with a finalizer as a safety net for a
// forgotten Close.
func newLimiterHandle(ptr *C.rk_limiter, b *Backend, name string) *Limiter {
	l := &Limiter{ptr: ptr, backend: b, name: name}
	l.kind = l.specKind()
	l.started = b != nil && b.remote && l.kind != "leased" && l.kind != "partitions"
	runtime.SetFinalizer(l, finalizeLimiter)
	return l
}

// finalizedLimiters counts limiters freed by their finalizer (a forgotten Close); the tests
// read it.
var finalizedLimiters atomic.Int64

// finalizeLimiter is the safety net for a limiter nobody closed.
func finalizeLimiter(l *Limiter) {
	finalizedLimiters.Add(1)
	l.Close()
}

// Window is an exact sliding window: never more than limit admissions in any span of
// interval (Sidekiq's window).
func (b *Backend) Window(name string, limit uint64, interval time.Duration) (*Limiter, error) {
	return b.newLimiter(name, func(p *C.rk_backend, n *C.char, out **C.rk_limiter) status {
		return C.rk_limiter_new_window(p, n, C.uint64_t(limit), seconds(interval), out)
	})
}

// WindowLimit is one window of a multi-window limiter.
type WindowLimit struct {
	// Limit is the admissions allowed in any span of Interval.
	Limit uint64
	// Interval is the span.
	Interval time.Duration
}

// Windows is several exact sliding windows (e.g. 25 per 5s and 300 per minute) checked and
// recorded together; the decision reports the window with the least remaining.
func (b *Backend) Windows(name string, windows ...WindowLimit) (*Limiter, error) {
	cw := make([]C.rk_window_limit, len(windows))
	for i, w := range windows {
		cw[i] = C.rk_window_limit{limit: C.uint64_t(w.Limit), interval_secs: seconds(w.Interval)}
	}
	return b.newLimiter(name, func(p *C.rk_backend, n *C.char, out **C.rk_limiter) status {
		return C.rk_limiter_new_windows(p, n, firstOf(cw), C.size_t(len(cw)), out)
	})
}

// SlidingLimit is one limit of a sliding-window limiter.
type SlidingLimit struct {
	// Duration is the span the limit covers.
	Duration time.Duration
	// Limit is the units allowed per span.
	Limit uint64
	// Precision is the sub-bucket size; 0 for none (a fixed window aligned to the epoch).
	Precision time.Duration
}

// SlidingWindow is several (duration, limit, precision) limits over sub-buckets, checked
// atomically; only admitted calls count (Carlson's).
func (b *Backend) SlidingWindow(name string, limits ...SlidingLimit) (*Limiter, error) {
	cl := make([]C.rk_sliding_limit, len(limits))
	for i, l := range limits {
		cl[i] = C.rk_sliding_limit{duration_secs: seconds(l.Duration), limit: C.uint64_t(l.Limit), precision_secs: seconds(l.Precision)}
	}
	return b.newLimiter(name, func(p *C.rk_backend, n *C.char, out **C.rk_limiter) status {
		return C.rk_limiter_new_sliding_window(p, n, firstOf(cl), C.size_t(len(cl)), out)
	})
}

// Bucket is limit per fixed window of interval, windows aligned to multiples of the interval
// since the Unix epoch (Sidekiq's bucket).
func (b *Backend) Bucket(name string, limit uint64, interval time.Duration) (*Limiter, error) {
	return b.newLimiter(name, func(p *C.rk_backend, n *C.char, out **C.rk_limiter) status {
		return C.rk_limiter_new_bucket(p, n, C.uint64_t(limit), seconds(interval), out)
	})
}

// TokenBucket refills rate tokens per second up to capacity; a call asks for its cost in
// tokens (Stripe's request rate limiter).
func (b *Backend) TokenBucket(name string, rate float64, capacity uint64) (*Limiter, error) {
	return b.newLimiter(name, func(p *C.rk_backend, n *C.char, out **C.rk_limiter) status {
		return C.rk_limiter_new_token_bucket(p, n, C.double(rate), C.uint64_t(capacity), out)
	})
}

// Leased is a token bucket shared by every process on the backend, from which this process
// takes tokens in leases of up to chunk (0: capacity/16) that lapse after leaseTTL (0: 1s),
// spending them without a round trip. Close gives unspent tokens back.
func (b *Backend) Leased(name string, rate float64, capacity, chunk uint64, leaseTTL time.Duration) (*Limiter, error) {
	return b.newLimiter(name, func(p *C.rk_backend, n *C.char, out **C.rk_limiter) status {
		return C.rk_limiter_new_leased(p, n, C.double(rate), C.uint64_t(capacity), C.uint64_t(chunk), seconds(leaseTTL), out)
	})
}

// Leaky is a leaky bucket: a burst of size, then one call per drain/size; after drain idle
// the full burst is back (Sidekiq's leaky).
func (b *Backend) Leaky(name string, size uint64, drain time.Duration) (*Limiter, error) {
	return b.newLimiter(name, func(p *C.rk_backend, n *C.char, out **C.rk_limiter) status {
		return C.rk_limiter_new_leaky(p, n, C.uint64_t(size), seconds(drain), out)
	})
}

// Points is a leaky bucket of capacity points refilled completely in refill; a call gives an
// estimate that PointsUsed or Settle corrects (Sidekiq's points, e.g. GraphQL query cost).
func (b *Backend) Points(name string, capacity uint64, refill time.Duration) (*Limiter, error) {
	return b.newLimiter(name, func(p *C.rk_backend, n *C.char, out **C.rk_limiter) status {
		return C.rk_limiter_new_points(p, n, C.uint64_t(capacity), seconds(refill), out)
	})
}

// Concurrent allows at most limit holders at once (limit 1 is a distributed mutex): Acquire
// (or an admitted Check) grants a Lease to Release. A lease held longer than lockTimeout may
// be reclaimed by a waiter.
func (b *Backend) Concurrent(name string, limit uint64, lockTimeout time.Duration) (*Limiter, error) {
	return b.newLimiter(name, func(p *C.rk_backend, n *C.char, out **C.rk_limiter) status {
		return C.rk_limiter_new_concurrent(p, n, C.uint64_t(limit), seconds(lockTimeout), 0, out)
	})
}

// CalendarOption sets a calendar quota's time zone or anchor.
type CalendarOption func(map[string]any)

// InZone sets a calendar quota's IANA time zone, e.g. "Europe/Berlin" (default UTC).
func InZone(tz string) CalendarOption { return func(spec map[string]any) { spec["tz"] = tz } }

// AnchoredOn starts a monthly quota's periods on this day of the month (1-31, clamped to the
// month's last day; default 1).
func AnchoredOn(day int) CalendarOption { return func(spec map[string]any) { spec["anchor"] = day } }

// Calendar is a quota of limit per calendar period ("day", "week" from Monday, "month" or
// "year"), DST-aware: a day may last 23 or 25 hours. It is built from its spec as data, so an
// option given explicitly is checked as given (an empty zone, anchor 0).
func (b *Backend) Calendar(name string, limit uint64, period string, opts ...CalendarOption) (*Limiter, error) {
	spec := map[string]any{"kind": "calendar", "limit": limit, "period": period}
	for _, opt := range opts {
		opt(spec)
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, invalidArgument("period", err.Error())
	}
	return b.FromSpec(name, string(js))
}

// FromSpec builds a limiter from its spec as data: JSON, durations in seconds, the same in
// every language, e.g. {"kind":"token_bucket","rate":10,"capacity":20}. Every kind and option
// (shadow, block_for, colocate, wait_timeout, ...) can be said this way.
func (b *Backend) FromSpec(name, spec string) (*Limiter, error) {
	s, err := text(spec, "json")
	if err != nil {
		return nil, err
	}
	return b.newLimiter(name, func(p *C.rk_backend, n *C.char, out **C.rk_limiter) status {
		return C.rk_limiter_new_from_json(p, n, s.ptr(), out)
	})
}

// Unlimited returns a limiter that always allows and touches no backend (admins, tests).
func Unlimited() (*Limiter, error) {
	var ptr *C.rk_limiter
	if err := call(func() status { return C.rk_limiter_new_unlimited(&ptr) }); err != nil {
		return nil, err
	}
	return newLimiterHandle(ptr, nil, ""), nil
}

// firstOf is a pointer to a slice's first element for C (nil for an empty slice). The slice's
// elements hold no Go pointers, so cgo may pass it.
func firstOf[T any](s []T) *T {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}
