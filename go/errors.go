package ratekeeper

/*
#include "ratekeeper.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// The kinds of failure, for errors.Is. Every error this package returns matches exactly one of
// them (ErrTimeout also matches ErrUnavailable: either way the backend did not answer), except
// context errors from waiting calls, which are the context's own.
var (
	// ErrOverLimit: the limit is reached and waiting did not help. The error is an
	// *OverLimitError carrying RetryAfter.
	ErrOverLimit = errors.New("ratekeeper: over limit")
	// ErrShed: a load shedder dropped the call (HTTP 503, not 429).
	ErrShed = errors.New("ratekeeper: shed")
	// ErrLeaseLost: a lease was released or extended after it had been reclaimed (it outlived
	// its lock timeout) or the limiter was reset.
	ErrLeaseLost = errors.New("ratekeeper: lease lost")
	// ErrInvalidArgument: a parameter is out of range or malformed; nothing was written. The
	// error is an *Error whose Parameter names it.
	ErrInvalidArgument = errors.New("ratekeeper: invalid argument")
	// ErrUnavailable: the backend could not answer (Redis down, memory backend full, a deadline
	// passed).
	ErrUnavailable = errors.New("ratekeeper: backend unavailable")
	// ErrTimeout: a backend call did not finish within its deadline (also matches
	// ErrUnavailable).
	ErrTimeout = errors.New("ratekeeper: timeout")
	// ErrRejected: Redis answered, refusing the call for a reason an operator must fix (NOPERM,
	// WRONGPASS, OOM, a script error). No failure policy turns it into an admission.
	ErrRejected = errors.New("ratekeeper: backend rejected the call")
	// ErrClosed: the backend or limiter was closed.
	ErrClosed = errors.New("ratekeeper: closed")
	// ErrInternal: a bug inside the library (a caught panic) or a status this module does not
	// know yet.
	ErrInternal = errors.New("ratekeeper: internal error")
)

// Error is a failure reported by the library (or by this module before calling it).
// errors.Is(err, ErrInvalidArgument) and the other sentinels tell its kind.
type Error struct {
	// Kind is the sentinel the error matches (ErrInvalidArgument, ErrUnavailable, ...).
	Kind error
	// Status is the C library's status name ("RK_INVALID_ARGUMENT", ...), empty for errors
	// raised by this module.
	Status string
	// Parameter names the bad parameter of an ErrInvalidArgument ("limit", "key", ...).
	Parameter string
	// Message is the library's message, naming what went wrong.
	Message string
}

// Error returns the status and message.
func (e *Error) Error() string {
	if e.Status == "" {
		return "ratekeeper: " + e.Message
	}
	return fmt.Sprintf("ratekeeper: %s: %s", e.Status, e.Message)
}

// Is matches the error's kind (and ErrUnavailable for a timeout).
func (e *Error) Is(target error) bool {
	return target == e.Kind || (e.Kind == ErrTimeout && target == ErrUnavailable)
}

// Unwrap returns the error's kind.
func (e *Error) Unwrap() error { return e.Kind }

// OverLimitError is returned when the limit is reached and waiting did not help (HTTP 429).
// errors.Is(err, ErrOverLimit) matches it.
type OverLimitError struct {
	// RetryAfter is the exact time until the same call could succeed.
	RetryAfter time.Duration
}

// Error says how long to wait.
func (e *OverLimitError) Error() string {
	return fmt.Sprintf("ratekeeper: over limit, retry after %v", e.RetryAfter)
}

// Is matches ErrOverLimit.
func (e *OverLimitError) Is(target error) bool { return target == ErrOverLimit }

// kinds maps each C status to the sentinel it stands for.
var kinds = map[status]error{
	C.RK_OVER_LIMIT:          ErrOverLimit,
	C.RK_SHED:                ErrShed,
	C.RK_LEASE_LOST:          ErrLeaseLost,
	C.RK_INVALID_ARGUMENT:    ErrInvalidArgument,
	C.RK_NULL_PARAMETER:      ErrInvalidArgument,
	C.RK_INVALID_UTF8:        ErrInvalidArgument,
	C.RK_BACKEND_UNAVAILABLE: ErrUnavailable,
	C.RK_TIMEOUT:             ErrTimeout,
	C.RK_BACKEND_REJECTED:    ErrRejected,
}

// The library's messages name the parameter first, in backquotes: "`limit` must be ...".
var parameterName = regexp.MustCompile("`([^`]+)`")

// errorFor is the error a failed status stands for, with the library's message.
func errorFor(st status, message string) error {
	kind, ok := kinds[st]
	if !ok {
		kind = ErrInternal
	}
	e := &Error{Kind: kind, Status: C.GoString(C.rk_status_name(C.uint32_t(st))), Message: message}
	if kind == ErrInvalidArgument {
		if m := parameterName.FindStringSubmatch(message); m != nil {
			e.Parameter = m[1]
		}
	}
	return e
}

// invalidArgument is an ErrInvalidArgument raised by this module, worded as the library words
// its own.
func invalidArgument(parameter, message string) error {
	return &Error{Kind: ErrInvalidArgument, Parameter: parameter, Message: fmt.Sprintf("`%s` %s", parameter, message)}
}
