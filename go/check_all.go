package ratekeeper

/*
#include <stdlib.h>
#include "ratekeeper.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// Part is one part of Backend.CheckAll: a limiter of the backend, a key and what it consumes.
type Part struct {
	// Limiter is the part's limiter, built on the backend the call is made on.
	Limiter *Limiter
	// Key is the part's key ("" for the limiter's single shared key).
	Key string
	// Cost is what the part consumes, as given (set it to 1 for one call; concurrent limiters
	// take 1).
	Cost uint64
}

// AllDecision is the result of Backend.CheckAll.
type AllDecision struct {
	// Allowed says whether every part was admitted (and consumed its cost).
	Allowed bool
	// RetryAfter is 0 when allowed, else the longest RetryAfter of the parts that refused.
	RetryAfter time.Duration
	// Parts holds one decision per part, in order. In a refused combination a part may say
	// Allowed (alone it would have passed) but it consumed nothing and holds no lease.
	Parts []Decision
}

// CheckAll decides every part in one atomic step at one instant: all are admitted and consume
// their cost, or none consumes anything. Never waits. Admitted concurrent parts hold a lease in
// their decision: release each. On a Redis Cluster the parts' keys must share one slot
// (limiters whose spec says "colocate": "tenant", keys of one tenant).
func (b *Backend) CheckAll(ctx context.Context, parts ...Part) (AllDecision, error) {
	if err := ctx.Err(); err != nil {
		return AllDecision{}, err
	}
	return b.allCall(parts, func(p *C.rk_backend, cparts *C.rk_check_all_part, raws *C.rk_decision, allowed *C.bool, retry *C.uint64_t) status {
		return C.rk_backend_check_all(p, cparts, C.size_t(len(parts)), raws, allowed, retry)
	})
}

// allSlice is the longest AcquireAll waits in the library (holding its OS thread) before
// looking at its context again.
const allSlice = 50 * time.Millisecond

// AcquireAll is CheckAll waiting until a step admits every part, or ctx is done: the
// counterpart of Acquire for several limits at once (a tenant's slot and its rate, say). It
// sleeps until the combination can change (a counting part's RetryAfter, or the release of a
// concurrent part's slot). When ctx has a deadline that the wait would pass, it fails at once
// with an *OverLimitError, as Wait does. The wait is the library's, on the calling goroutine's
// OS thread, in slices of 50 ms between which ctx is looked at; a counting part's longer
// RetryAfter is slept on a Go timer. Admitted concurrent parts hold a lease: release each.
func (b *Backend) AcquireAll(ctx context.Context, parts ...Part) (AllDecision, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return AllDecision{}, err
		}
		slice := allSlice
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < slice {
			if slice = time.Until(deadline); slice < 0 {
				slice = 0
			}
		}
		began := time.Now()
		out, err := b.allCall(parts, func(p *C.rk_backend, cparts *C.rk_check_all_part, raws *C.rk_decision, allowed *C.bool, retry *C.uint64_t) status {
			return C.rk_backend_acquire_all(p, cparts, C.size_t(len(parts)), seconds(slice), raws, allowed, retry)
		})
		if !errors.Is(err, ErrOverLimit) {
			return out, err
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < out.RetryAfter {
			if err := ctx.Err(); err != nil {
				return AllDecision{}, err
			}
			return AllDecision{}, &OverLimitError{RetryAfter: out.RetryAfter}
		}
		// The library refuses at once, without waiting the slice, when a counting part's
		// RetryAfter is longer: that wait is a Go timer's.
		if time.Since(began) < slice && out.RetryAfter > 0 {
			if timer == nil {
				timer = time.NewTimer(out.RetryAfter)
			} else {
				timer.Reset(out.RetryAfter)
			}
			select {
			case <-ctx.Done():
				return AllDecision{}, ctx.Err()
			case <-timer.C:
			}
		}
	}
}

// allCall makes one call over parts: each part's key and limiter pointer go to C inside an
// array, which cgo forbids in Go memory, so the array and the keys live in C memory for the
// call. On RK_OVER_LIMIT (AcquireAll's wait ran out) the decision says RetryAfter and the error
// is ErrOverLimit.
func (b *Backend) allCall(parts []Part, f func(*C.rk_backend, *C.rk_check_all_part, *C.rk_decision, *C.bool, *C.uint64_t) status) (AllDecision, error) {
	cparts := (*C.rk_check_all_part)(C.calloc(C.size_t(len(parts)+1), C.size_t(unsafe.Sizeof(C.rk_check_all_part{}))))
	defer C.free(unsafe.Pointer(cparts))
	view := unsafe.Slice(cparts, len(parts)+1)
	var keys []*C.char
	defer func() { freeCStrings(keys) }()
	// Each limiter's handle is held open once (a read lock taken twice can deadlock against a
	// Close waiting between the two).
	entered := map[*Limiter]bool{}
	for i, p := range parts {
		if p.Limiter == nil {
			return AllDecision{}, invalidArgument(fmt.Sprintf("parts[%d].limiter", i), "must not be nil")
		}
		if !entered[p.Limiter] {
			if !p.Limiter.handle.enter() {
				return AllDecision{}, closedError()
			}
			entered[p.Limiter] = true
			defer p.Limiter.handle.leave()
		}
		view[i].limiter = p.Limiter.ptr
		view[i].cost = C.uint64_t(p.Cost)
		if p.Key != "" {
			k, err := text(p.Key, fmt.Sprintf("parts[%d].key", i))
			if err != nil {
				return AllDecision{}, err
			}
			c := C.CString(string(k[:len(k)-1]))
			keys = append(keys, c)
			view[i].key = c
		}
	}
	raws := make([]C.rk_decision, len(parts)+1)
	var allowed C.bool
	var retry C.uint64_t
	err := b.use(func(p *C.rk_backend) status { return f(p, cparts, &raws[0], &allowed, &retry) })
	if err != nil && !errors.Is(err, ErrOverLimit) {
		return AllDecision{}, err
	}
	out := AllDecision{Allowed: bool(allowed), RetryAfter: micros(retry), Parts: make([]Decision, len(parts))}
	if err != nil {
		return AllDecision{RetryAfter: out.RetryAfter}, err
	}
	for i := range parts {
		out.Parts[i] = decisionOf(parts[i].Limiter, parts[i].Key, &raws[i])
	}
	return out, nil
}
