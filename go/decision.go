package ratekeeper

/*
#include "ratekeeper.h"
*/
import "C"

import "time"

// Decision is the result of a check, peek or wait: one shape for every kind of limiter.
// Durations are exact to the microsecond and never negative. A refused call consumed nothing.
type Decision struct {
	// Allowed says whether the call was admitted (for Peek: whether a call of cost 1 would be).
	Allowed bool
	// Limit is the limit that binds: for multi-limit limiters, the one with the least remaining.
	Limit uint64
	// Remaining is what is left of Limit after this call.
	Remaining uint64
	// RetryAfter is 0 when allowed, else the time until the same call could succeed. An HTTP
	// Retry-After header should round it up to whole seconds.
	RetryAfter time.Duration
	// ResetAfter is the time until the limiter is back to full for this key.
	ResetAfter time.Duration
	// DecidedAt is when the decision was made, by the deciding clock (the Redis server's for
	// Redis backends; the zero time for the unlimited limiter).
	DecidedAt time.Time
	// ShadowRefused says a limiter in shadow mode would have refused this call and admitted it
	// (Allowed is true, nothing was consumed; Remaining and RetryAfter say what enforcement
	// would have said).
	ShadowRefused bool
	// Lease is the slot a concurrent limiter granted with this admission (nil otherwise): give
	// it back with Lease.Release.
	Lease *Lease

	// What Settle passes back to the library (with the fields above), and the key the call was
	// checked with. Not the whole C decision: a Decision is copied on every return, and the
	// smaller it is the faster a Check (half the cost of a memory Check was copying before).
	ticket C.rk_settle_ticket
	key    string
}

// Settleable says whether Limiter.Settle can correct this decision's charge (admitted calls of
// counting limiters).
func (d Decision) Settleable() bool { return bool(d.ticket.settleable) }

// native is the C decision Settle passes back: what the library reads of it (the outcome and
// the settle ticket; durations are whole microseconds, so they convert back exactly).
func (d *Decision) native() C.rk_decision {
	return C.rk_decision{
		allowed:        C.bool(d.Allowed),
		limit:          C.uint64_t(d.Limit),
		remaining:      C.uint64_t(d.Remaining),
		retry_after_us: C.uint64_t(d.RetryAfter / time.Microsecond),
		reset_after_us: C.uint64_t(d.ResetAfter / time.Microsecond),
		settle:         d.ticket,
	}
}

// decisionOf converts a C decision for the call made with key on lim.
func decisionOf(lim *Limiter, key string, raw *C.rk_decision) Decision {
	d := Decision{
		Allowed:       bool(raw.allowed),
		Limit:         uint64(raw.limit),
		Remaining:     uint64(raw.remaining),
		RetryAfter:    micros(raw.retry_after_us),
		ResetAfter:    micros(raw.reset_after_us),
		ShadowRefused: bool(raw.shadow_refused),
		ticket:        raw.settle,
		key:           key,
	}
	if raw.decided_at_us != 0 {
		d.DecidedAt = time.UnixMicro(int64(raw.decided_at_us))
	}
	if raw.has_lease {
		d.Lease = &Lease{limiter: lim, key: key, raw: raw.lease}
	}
	return d
}
