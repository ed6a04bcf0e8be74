package ratekeeper

/*
#include "rkgo.h"
*/
import "C"

import (
	"context"
	"time"
)

// Waiting for a limit: with Go timers and Go's scheduler, never an OS thread blocked in the
// library. A counting limiter's refusal says exactly when the same call could succeed
// (RetryAfter), so Wait checks, sleeps on a timer until then (or until ctx is done) and checks
// again. A concurrent limiter's slot frees when a holder releases it, which no refusal can
// predict: Acquire tries once without waiting, then starts the library's waiting acquire
// (rk_limiter_acquire_start: it wakes within milliseconds of a release, on the library's
// runtime) and parks until it answers or ctx is done, in slices of at most acquireSlice.

// acquireSlice is the longest wait one started acquire is given. ctx is honoured at once
// whatever the slice; the slice bounds how long an acquire whose caller left (ctx done) stays
// queued in the library, after which a slot it was granted is released.
const acquireSlice = time.Second

// Wait consumes one unit for key, waiting until the limit allows it or ctx is done. When ctx
// has a deadline that the wait would pass, it fails at once with an *OverLimitError (as
// golang.org/x/time/rate's Wait does) rather than sleeping in vain.
func (l *Limiter) Wait(ctx context.Context, key string) (Decision, error) {
	return l.WaitN(ctx, key, 1)
}

// WaitN consumes cost for key, waiting until the limit allows it or ctx is done (see Wait). On
// a concurrent limiter it waits for a slot, as Acquire does, and the decision holds the lease.
func (l *Limiter) WaitN(ctx context.Context, key string, cost uint64) (Decision, error) {
	if l.kind == "concurrent" {
		return l.acquire(ctx, key, cost)
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		d, err := l.CheckN(ctx, key, cost)
		if err != nil || d.Allowed {
			return d, err
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d.RetryAfter {
			return Decision{}, &OverLimitError{RetryAfter: d.RetryAfter}
		}
		sleep := d.RetryAfter
		if sleep < time.Millisecond {
			sleep = time.Millisecond // a refusal always says when; never spin if one does not
		}
		if timer == nil {
			timer = time.NewTimer(sleep)
		} else {
			timer.Reset(sleep)
		}
		select {
		case <-ctx.Done():
			return Decision{}, ctx.Err()
		case <-timer.C:
		}
	}
}

// Acquire takes a slot of a concurrent limiter for key, waiting until one is free or ctx is
// done; give it back with Lease.Release (defer lease.Release()). On other kinds it waits as
// Wait does and the lease holds nothing.
func (l *Limiter) Acquire(ctx context.Context, key string) (*Lease, error) {
	d, err := l.WaitN(ctx, key, 1)
	if err != nil {
		return nil, err
	}
	if d.Lease == nil {
		return &Lease{limiter: l, key: key, decision: d}, nil
	}
	d.Lease.decision = d
	return d.Lease, nil
}

// acquire takes a concurrent limiter's slot: a try that does not wait (in-process on memory,
// no hand-over), then started acquires that wait in the library, one slice at a time.
func (l *Limiter) acquire(ctx context.Context, key string, cost uint64) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	if err := checkKey(key); err != nil {
		return Decision{}, err
	}
	c, err := l.run(ctx, key, func(p C.uintptr_t) C.rkgo_result { return C.rkgo_acquire(p, key, C.uint64_t(cost), 0) },
		func(p *C.rk_limiter, h C.uintptr_t) status { return startAcquire(p, key, cost, 0, h) },
		releaseOrphan)
	for err == nil && c.st == C.RK_OVER_LIMIT {
		slice := acquireSlice
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < slice {
			if slice = time.Until(deadline); slice <= 0 { // the deadline came first
				if err := ctx.Err(); err != nil {
					return Decision{}, err
				}
				return Decision{}, &OverLimitError{RetryAfter: micros(c.raw.retry_after_us)}
			}
		}
		c, err = l.start(ctx, key, func(p *C.rk_limiter, h C.uintptr_t) status {
			return startAcquire(p, key, cost, slice, h)
		}, releaseOrphan)
	}
	return l.decided(key, &c, err)
}

// Lease is a slot held in a concurrent limiter, or (from Acquire on another kind) an
// admission with nothing to give back. Release it when the work is done.
type Lease struct {
	limiter  *Limiter
	key      string
	raw      C.rk_lease
	decision Decision
}

// FencingToken strictly increases with every grant of the same limiter and key: a resource the
// limiter guards can refuse writes carrying a token lower than one it has seen. 0 for a lease
// granted while failing open, which guards nothing.
func (s *Lease) FencingToken() uint64 { return uint64(s.raw.fencing_token) }

// GrantedAt is when the lease was granted, by the deciding clock.
func (s *Lease) GrantedAt() time.Time { return time.UnixMicro(int64(s.raw.granted_at_us)) }

// Decision is the admission that granted the lease (for Acquire).
func (s *Lease) Decision() Decision { return s.decision }

// held says whether the lease holds a slot to give back.
func (s *Lease) held() bool { return s.raw.id_hi != 0 || s.raw.id_lo != 0 }

// Release gives the slot back, waking one waiter. ErrLeaseLost when it outlived the lock
// timeout and was reclaimed, or the limiter was reset. Nothing to do for a lease that holds no
// slot.
func (s *Lease) Release() error {
	if !s.held() {
		return nil
	}
	return s.limiter.release(s.key, s)
}

// release gives lease back to l under key (the conformance vectors also release under other
// keys and on other limiters, which the library refuses).
func (l *Limiter) release(key string, lease *Lease) error {
	if err := checkKey(key); err != nil {
		return err
	}
	c, err := l.run(context.Background(), key, func(p C.uintptr_t) C.rkgo_result { return C.rkgo_release(p, key, lease.raw) },
		func(p *C.rk_limiter, h C.uintptr_t) status { return startRelease(p, key, lease.raw, h) }, nil)
	if err != nil {
		return err
	}
	return c.err()
}

// Extend renews the lease for another lock timeout from now, so a long task keeps its slot.
func (s *Lease) Extend(ctx context.Context) error {
	if !s.held() {
		return nil
	}
	return s.limiter.keyCall(ctx, s.key, func(p *C.rk_limiter, k *C.char) status {
		return C.rk_limiter_extend(p, k, &s.raw)
	})
}
