package ratekeeper

/*
#include "rkgo.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"time"
	"unsafe"
)

// Limiter is a rate limiter bound to a backend, made by one of Backend's constructors. Keys
// are the identities limited (a user id, an IP; up to 1 KiB of UTF-8); the empty key is the
// limiter's single shared key. Safe for concurrent use by many goroutines; Close it when done.
//
// On a Redis backend, Check, Peek, Settle, Acquire and Lease.Release made while another call is
// in flight wait in Go's scheduler, holding no OS thread, and return ctx.Err() as soon as ctx
// is done; the lone one is made on its caller's thread (faster alone) and runs to at most the
// backend's deadline. An Acquire that waits for a slot always waits in Go's scheduler. Other
// calls on a Redis backend (Reset, Pause, Block, Observe, Extend, ...) block their goroutine
// (and the OS thread under it, which Go's scheduler replaces while the call lasts) for at most
// the deadline; the context is checked before each.
type Limiter struct {
	ptr     *C.rk_limiter
	backend *Backend
	name    string
	kind    string
	handle  closer
	// started: calls may go through the library's started forms (rk_limiter_check_start, ...)
	// and wait in Go's scheduler (limiters whose every check is a Redis round trip; see lone for
	// which do); otherwise the blocking forms, which answer in-process calls (memory; a leased or
	// partitions limiter's local tokens) without a hand-over to another thread.
	started bool
}

// use runs f with the limiter's handle held open.
func (l *Limiter) use(f func(*C.rk_limiter) status) error {
	if !l.handle.enter() {
		return closedError()
	}
	defer l.handle.leave()
	return call(func() status { return f(l.ptr) })
}

// Kind is the limiter's kind as its spec says it ("window", "concurrent", ...).
func (l *Limiter) Kind() string { return l.kind }

// Spec is the limiter's spec as canonical JSON, the same in every language.
func (l *Limiter) Spec() string {
	var out string
	_ = l.use(func(p *C.rk_limiter) status {
		var n C.size_t
		if st := C.rk_limiter_spec_json(p, nil, 0, &n); st != C.RK_OK {
			return st
		}
		buf := make([]byte, int(n)+1)
		st := C.rk_limiter_spec_json(p, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n)
		out = string(buf[:n])
		return st
	})
	return out
}

// specKind reads the kind from the spec, once, at construction.
func (l *Limiter) specKind() string {
	var spec struct {
		Kind string `json:"kind"`
	}
	_ = json.Unmarshal([]byte(l.Spec()), &spec)
	return spec.Kind
}

// Check consumes one unit for key if the limit allows, never waiting. A refused call is not
// an error: test Decision.Allowed.
func (l *Limiter) Check(ctx context.Context, key string) (Decision, error) {
	return l.CheckN(ctx, key, 1)
}

// CheckN consumes cost for key if the limit allows, never waiting (cost 0 is always admitted
// and consumes nothing; concurrent limiters take 1). On a concurrent limiter an admitted call
// holds Decision.Lease: release it.
func (l *Limiter) CheckN(ctx context.Context, key string, cost uint64) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	if err := checkKey(key); err != nil {
		return Decision{}, err
	}
	if !l.started {
		// In-process (memory; a leased or partitions limiter's local tokens): the call on this
		// thread, written out rather than through run, which copies the result twice more.
		if !l.handle.enter() {
			return Decision{}, closedError()
		}
		r := C.rkgo_check(addr(l.ptr), key, C.uint64_t(cost))
		l.handle.leave()
		if r.status != C.RK_OK {
			c := resultOf(r)
			return Decision{}, c.err()
		}
		return decisionOf(l, key, &r.decision), nil
	}
	c, err := l.run(ctx, key, func(p C.uintptr_t) C.rkgo_result { return C.rkgo_check(p, key, C.uint64_t(cost)) },
		func(p *C.rk_limiter, h C.uintptr_t) status { return startCheck(p, key, cost, h) },
		releaseOrphan)
	return l.decided(key, &c, err)
}

// decided turns a call's completion into its decision or error.
func (l *Limiter) decided(key string, c *completion, err error) (Decision, error) {
	if err == nil {
		err = c.err()
	}
	if err != nil {
		return Decision{}, err
	}
	return decisionOf(l, key, &c.raw), nil
}

// Peek reports what a call of cost 1 would get, consuming nothing.
func (l *Limiter) Peek(ctx context.Context, key string) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	if err := checkKey(key); err != nil {
		return Decision{}, err
	}
	c, err := l.run(ctx, key, func(p C.uintptr_t) C.rkgo_result { return C.rkgo_peek(p, key) },
		func(p *C.rk_limiter, h C.uintptr_t) status { return startPeek(p, key, h) }, nil)
	return l.decided(key, &c, err)
}

// Reset forgets all state of key: the next call starts from a full limit. A concurrent
// limiter's waiters wake to check again; its outstanding leases are lost.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	return l.keyCall(ctx, key, func(p *C.rk_limiter, k *C.char) status { return C.rk_limiter_reset(p, k) })
}

// PointsUsed corrects an admitted call's charge from estimate to actual (points, token bucket
// and leaky limiters): the difference is charged or refunded.
func (l *Limiter) PointsUsed(ctx context.Context, key string, estimate, actual uint64) (Decision, error) {
	return l.decisionCall(ctx, key, func(p *C.rk_limiter, k *C.char, out *C.rk_decision) status {
		return C.rk_limiter_points_used(p, k, C.uint64_t(estimate), C.uint64_t(actual), out)
	})
}

// Settle corrects an admitted call, checked with an estimated cost, to its actual cost: the
// difference is charged or refunded exactly once however often the same decision is settled
// (a retry after ErrTimeout, or after ctx ended the wait, is safe). d is the decision Check or
// Wait returned, with its key.
func (l *Limiter) Settle(ctx context.Context, d Decision, actual uint64) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	if err := checkKey(d.key); err != nil {
		return Decision{}, err
	}
	raw := d.native()
	c, err := l.run(ctx, d.key, func(p C.uintptr_t) C.rkgo_result { return C.rkgo_settle(p, d.key, raw, C.uint64_t(actual)) },
		func(p *C.rk_limiter, h C.uintptr_t) status { return startSettle(p, d.key, raw, actual, h) }, nil)
	return l.decided(d.key, &c, err)
}

// Pause refuses every check of key, in every process sharing the backend, for d (at most the
// limiter's max pause); a longer pause extends one in effect. Returns the pause in effect.
func (l *Limiter) Pause(ctx context.Context, key string, d time.Duration) (time.Duration, error) {
	return l.durationCall(ctx, key, func(p *C.rk_limiter, k *C.char, out *C.uint64_t) status {
		return C.rk_limiter_pause(p, k, seconds(d), out)
	})
}

// Resume ends the pause of key now; reports whether one was in effect.
func (l *Limiter) Resume(ctx context.Context, key string) (bool, error) {
	return l.flagCall(ctx, key, func(p *C.rk_limiter, k *C.char, out *C.bool) status { return C.rk_limiter_resume(p, k, out) })
}

// Block refuses every check of key, in every process sharing the backend, for d from now
// (replacing a block in effect). Returns the block in effect.
func (l *Limiter) Block(ctx context.Context, key string, d time.Duration) (time.Duration, error) {
	return l.durationCall(ctx, key, func(p *C.rk_limiter, k *C.char, out *C.uint64_t) status {
		return C.rk_limiter_block(p, k, seconds(d), out)
	})
}

// Unblock ends the block of key now; reports whether one was in effect.
func (l *Limiter) Unblock(ctx context.Context, key string) (bool, error) {
	return l.flagCall(ctx, key, func(p *C.rk_limiter, k *C.char, out *C.bool) status { return C.rk_limiter_unblock(p, k, out) })
}

// durationCall runs a call on a key that returns a duration in microseconds (a pause, a block).
func (l *Limiter) durationCall(ctx context.Context, key string, f func(*C.rk_limiter, *C.char, *C.uint64_t) status) (time.Duration, error) {
	var us C.uint64_t
	err := l.keyCall(ctx, key, func(p *C.rk_limiter, k *C.char) status { return f(p, k, &us) })
	return micros(us), err
}

// flagCall runs a call on a key that reports whether something was in effect.
func (l *Limiter) flagCall(ctx context.Context, key string, f func(*C.rk_limiter, *C.char, *C.bool) status) (bool, error) {
	var was C.bool
	err := l.keyCall(ctx, key, func(p *C.rk_limiter, k *C.char) status { return f(p, k, &was) })
	return bool(was), err
}

// Observe reads an upstream response's status and headers and pauses key for as long as a 429
// or 503 asks (Retry-After, RateLimit-Reset, X-RateLimit-Reset), up to the limiter's max
// pause. Returns the pause in effect, 0 when the response asks for none.
func (l *Limiter) Observe(ctx context.Context, key string, statusCode int, header http.Header) (time.Duration, error) {
	var names, values []string
	for name, vs := range header {
		for _, v := range vs {
			if strings.IndexByte(name, 0) < 0 && strings.IndexByte(v, 0) < 0 {
				names, values = append(names, name), append(values, v) // else ignored, as malformed values are
			}
		}
	}
	if statusCode < 0 || statusCode > math.MaxInt32 {
		statusCode = 0 // out of range either way: the library names `status`
	}
	var us C.uint64_t
	err := l.keyCall(ctx, key, func(p *C.rk_limiter, k *C.char) status {
		// The arrays of pointers live in C memory: cgo forbids passing Go memory that holds Go
		// pointers.
		cn, cv := cStrings(names), cStrings(values)
		defer freeCStrings(cn)
		defer freeCStrings(cv)
		return C.rk_limiter_observe(p, k, C.uint32_t(statusCode), firstOf(cn), firstOf(cv), C.size_t(len(names)), &us)
	})
	return micros(us), err
}

// keyCall runs a call taking the limiter and a key.
func (l *Limiter) keyCall(ctx context.Context, key string, f func(*C.rk_limiter, *C.char) status) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k, err := keyText(key)
	if err != nil {
		return err
	}
	return l.use(func(p *C.rk_limiter) status { return f(p, k.ptr()) })
}

// decisionCall runs a call taking the limiter and a key and returning a decision.
func (l *Limiter) decisionCall(ctx context.Context, key string, f func(*C.rk_limiter, *C.char, *C.rk_decision) status) (Decision, error) {
	var raw C.rk_decision
	if err := l.keyCall(ctx, key, func(p *C.rk_limiter, k *C.char) status { return f(p, k, &raw) }); err != nil {
		return Decision{}, err
	}
	return decisionOf(l, key, &raw), nil
}

// derive makes a copy of the limiter (same state and metrics) with one option changed.
func (l *Limiter) derive(f func(*C.rk_limiter, **C.rk_limiter) status) (*Limiter, error) {
	var ptr *C.rk_limiter
	if err := l.use(func(p *C.rk_limiter) status { return f(p, &ptr) }); err != nil {
		return nil, err
	}
	return newLimiterHandle(ptr, l.backend, l.name), nil
}

// WithShadow returns a copy in shadow mode (true) or enforcing (false): in shadow mode a call
// the limit would refuse is admitted with Decision.ShadowRefused set, consuming nothing.
func (l *Limiter) WithShadow(shadow bool) (*Limiter, error) {
	return l.derive(func(p *C.rk_limiter, out **C.rk_limiter) status {
		return C.rk_limiter_with_shadow(p, C.bool(shadow), out)
	})
}

// WithBlockFor returns a copy whose refusals block the key for d (see Block).
func (l *Limiter) WithBlockFor(d time.Duration) (*Limiter, error) {
	return l.derive(func(p *C.rk_limiter, out **C.rk_limiter) status {
		return C.rk_limiter_with_block_for(p, seconds(d), out)
	})
}

// WithDenyCache returns a copy that remembers refusals in this process until their
// RetryAfter (on) or never (off), whatever the backend's WithDenyCache.
func (l *Limiter) WithDenyCache(on bool) (*Limiter, error) {
	return l.derive(func(p *C.rk_limiter, out **C.rk_limiter) status {
		return C.rk_limiter_with_deny_cache(p, C.bool(on), out)
	})
}

// WithAllowFallback returns a copy to which the backend's FailOpen / Fallback policy applies
// (true) or not (false). Concurrent limiters fail closed unless they opt in.
func (l *Limiter) WithAllowFallback(allow bool) (*Limiter, error) {
	return l.derive(func(p *C.rk_limiter, out **C.rk_limiter) status {
		return C.rk_limiter_with_allow_fallback(p, C.bool(allow), out)
	})
}

// WithMaxPause returns a copy whose pauses (Pause, Observe) last at most d (default an hour).
func (l *Limiter) WithMaxPause(d time.Duration) (*Limiter, error) {
	return l.derive(func(p *C.rk_limiter, out **C.rk_limiter) status {
		return C.rk_limiter_with_max_pause(p, seconds(d), out)
	})
}

// Metrics returns this limiter's counters in this process (zero before its first check).
func (l *Limiter) Metrics() (Metrics, error) {
	if l.backend == nil {
		return Metrics{Kind: l.kind}, nil
	}
	all, err := l.backend.Metrics()
	if err != nil {
		return Metrics{}, err
	}
	for _, m := range all {
		if m.Kind == l.kind && m.Name == l.name {
			return m, nil
		}
	}
	return Metrics{Name: l.name, Kind: l.kind}, nil
}

// Close gives back what this process holds (a partitions limiter's partitions, a leased
// limiter's unspent tokens) and frees the native limiter. It waits for calls in flight; later
// calls fail with ErrClosed. Leases it granted are not released. Safe to call more than once.
func (l *Limiter) Close() error {
	var err error
	l.handle.close(func() {
		err = call(func() status { return C.rk_limiter_close(l.ptr) })
		C.rk_limiter_free(l.ptr)
	})
	return err
}
