package ratekeeper

/*
#include "ratekeeper.h"
*/
import "C"

import (
	"runtime"
	"time"
)

// ManualClock is a clock that moves only when Advance is called, for tests: a memory backend
// built with WithClock reads time from it, and a Redis backend sends its time with every call
// instead of the server's (every process sharing the keys must then use it too). Safe for
// concurrent use.
type ManualClock struct {
	ptr    *C.rk_manual_clock
	handle closer
}

// NewManualClock returns a clock reading start (not before the Unix epoch).
func NewManualClock(start time.Time) (*ManualClock, error) {
	if start.UnixMicro() < 0 {
		return nil, invalidArgument("start", "must not be before the Unix epoch, got "+start.String())
	}
	c := &ManualClock{}
	err := call(func() status { return C.rk_manual_clock_new(C.uint64_t(start.UnixMicro()), &c.ptr) })
	if err != nil {
		return nil, err
	}
	runtime.SetFinalizer(c, (*ManualClock).Close)
	return c, nil
}

// Advance moves the clock forward by (rounded down to whole microseconds; a clock never goes
// back, so a negative duration is ErrInvalidArgument).
func (c *ManualClock) Advance(by time.Duration) error {
	if by < 0 {
		return invalidArgument("by", "must not be negative, got "+by.String())
	}
	return c.AdvanceMicros(uint64(by / time.Microsecond))
}

// AdvanceMicros moves the clock forward by us microseconds.
func (c *ManualClock) AdvanceMicros(us uint64) error {
	if !c.handle.enter() {
		return closedError()
	}
	defer c.handle.leave()
	return call(func() status { return C.rk_manual_clock_advance(c.ptr, C.uint64_t(us)) })
}

// Now reads the clock.
func (c *ManualClock) Now() (time.Time, error) {
	if !c.handle.enter() {
		return time.Time{}, closedError()
	}
	defer c.handle.leave()
	var us C.uint64_t
	err := call(func() status { return C.rk_manual_clock_now_us(c.ptr, &us) })
	return time.UnixMicro(int64(us)), err
}

// Close frees the clock; backends built on it keep working. Safe to call more than once.
func (c *ManualClock) Close() error {
	c.handle.close(func() { C.rk_manual_clock_free(c.ptr) })
	return nil
}

// closedError is the error of a call on a closed handle.
func closedError() error {
	return &Error{Kind: ErrClosed, Message: "the handle is closed"}
}
