package ratekeeper

/*
#include "ratekeeper.h"
*/
import "C"

import (
	"math"
	"runtime"
	"time"
)

// Backoff says when to run an over-limit job again, and when to give up: Sidekiq's reschedule
// policy, the one the Python, Node and Ruby worker integrations use (the library's). Reschedule
// n (1 for the first, counted apart from the job's own retries) waits max(retryAfter, base * n)
// plus a random [0, jitter); after maxReschedules reschedules the job should fail with the
// over-limit error instead. Safe for concurrent use; Close it when done (a finalizer frees a
// forgotten one).
type Backoff struct {
	ptr            *C.rk_backoff
	handle         closer
	base, jitter   time.Duration
	maxReschedules int
}

// backoffConfig is what NewBackoff's options set.
type backoffConfig struct {
	base, jitter   time.Duration
	maxReschedules int
	seed           uint64
}

// BackoffOption sets one field of NewBackoff's policy.
type BackoffOption func(*backoffConfig)

// BackoffBase sets the step per reschedule: attempt n waits at least base * n (default 5
// minutes, as Sidekiq; 0 allowed).
func BackoffBase(d time.Duration) BackoffOption { return func(c *backoffConfig) { c.base = d } }

// BackoffJitter sets the largest random spread added to each delay, so jobs refused together do
// not all come back at once (default 5 minutes; 0 allowed).
func BackoffJitter(d time.Duration) BackoffOption { return func(c *backoffConfig) { c.jitter = d } }

// BackoffMaxReschedules sets how many times a job is rescheduled before it fails (default 20).
func BackoffMaxReschedules(n int) BackoffOption {
	return func(c *backoffConfig) { c.maxReschedules = n }
}

// BackoffSeed makes the jitter reproducible (tests); 0, the default, seeds it at random.
func BackoffSeed(seed uint64) BackoffOption { return func(c *backoffConfig) { c.seed = seed } }

// NewBackoff returns Sidekiq's policy (base 5 minutes, jitter 5 minutes, 20 reschedules: about
// a day in all), or the one the options describe. ErrInvalidArgument names a bad option
// (`base`, `jitter`, `max_reschedules`).
func NewBackoff(opts ...BackoffOption) (*Backoff, error) {
	c := backoffConfig{base: 5 * time.Minute, jitter: 5 * time.Minute, maxReschedules: 20}
	for _, opt := range opts {
		opt(&c)
	}
	if c.maxReschedules < 0 || c.maxReschedules > math.MaxUint32 {
		return nil, invalidArgument("max_reschedules", "must be between 0 and 4294967295")
	}
	b := &Backoff{base: c.base, jitter: c.jitter, maxReschedules: c.maxReschedules}
	err := call(func() status {
		return C.rk_backoff_new(seconds(c.base), seconds(c.jitter), C.uint32_t(c.maxReschedules), C.uint64_t(c.seed), &b.ptr)
	})
	if err != nil {
		return nil, err
	}
	runtime.SetFinalizer(b, (*Backoff).Close)
	return b, nil
}

// Base is the step per reschedule.
func (b *Backoff) Base() time.Duration { return b.base }

// Jitter is the largest random spread added to each delay.
func (b *Backoff) Jitter() time.Duration { return b.jitter }

// MaxReschedules is how many times a job is rescheduled before it fails.
func (b *Backoff) MaxReschedules() int { return b.maxReschedules }

// RescheduleIn says how long to wait before running the job again for its reschedule attempt
// (1 for the first), when the limiter asked for retryAfter (an *OverLimitError's or a refused
// Decision's RetryAfter; 0 when unknown): the delay is never shorter. reschedule is false once
// attempt > MaxReschedules: the job should fail with the over-limit error. ErrInvalidArgument
// names `attempt` (below 1) or `retry_after` (negative, or above 100 years).
func (b *Backoff) RescheduleIn(attempt int, retryAfter time.Duration) (delay time.Duration, reschedule bool, err error) {
	// The library names attempt 0 itself; below 0 or beyond a uint32 cannot reach it.
	if attempt < 0 || attempt > math.MaxUint32 {
		return 0, false, invalidArgument("attempt", "must be between 1 and 4294967295")
	}
	if retryAfter < 0 {
		return 0, false, invalidArgument("retry_after", "must not be negative")
	}
	if !b.handle.enter() {
		return 0, false, closedError()
	}
	defer b.handle.leave()
	var again C.bool
	var us C.uint64_t
	err = call(func() status {
		return C.rk_backoff_reschedule_in(b.ptr, C.uint32_t(attempt), C.uint64_t(retryAfter/time.Microsecond), &again, &us)
	})
	if err != nil {
		return 0, false, err
	}
	return micros(us), bool(again), nil
}

// Close frees the policy; later calls fail with ErrClosed. Safe to call more than once.
func (b *Backoff) Close() error {
	b.handle.close(func() { C.rk_backoff_free(b.ptr) })
	return nil
}
