package ratekeeper

// The one place that talks to libratekeeper's conventions: statuses, the thread-local error
// message, strings and durations. Every other file calls the C functions through `call`.

/*
#cgo CFLAGS: -I${SRCDIR}/lib/include
#include <stdlib.h>
#include "ratekeeper.h"

// The message of the last failed call on this OS thread, copied into buf; returns its full
// length.
static size_t rkgo_last_error(char *buf, size_t len) {
	size_t n = 0;
	rk_last_error_message(buf, len, &n);
	return n;
}
*/
import "C"

import (
	"math"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// status is a C rk_status.
type status = C.enum_rk_status

// call runs one C call and turns its status into an error. The message of a failure is
// thread-local in the library, so the goroutine stays on its OS thread from the call until the
// message is read (LockOSThread nests, so a caller's own lock is kept).
func call(f func() status) error {
	runtime.LockOSThread()
	st := f()
	var message string
	if st != C.RK_OK {
		message = lastErrorMessage()
	}
	runtime.UnlockOSThread()
	if st == C.RK_OK {
		return nil
	}
	return errorFor(st, message)
}

// lastErrorMessage reads the calling thread's message (the caller holds its OS thread).
func lastErrorMessage() string {
	var buf [512]C.char
	n := C.rkgo_last_error(&buf[0], C.size_t(len(buf)))
	if int(n) < len(buf) {
		return C.GoStringN(&buf[0], C.int(n))
	}
	long := make([]byte, int(n)+1)
	C.rkgo_last_error((*C.char)(unsafe.Pointer(&long[0])), C.size_t(len(long)))
	return string(long[:n])
}

// cText is a NUL-terminated copy of a Go string in Go memory, passed to C for the duration of
// one call (the library only reads strings during the call).
type cText []byte

// text copies s for C. A NUL byte would cut the string short in C, so it is refused here,
// naming the parameter, as the library refuses what it cannot take.
func text(s, parameter string) (cText, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, invalidArgument(parameter, "must not contain a NUL byte")
	}
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b, nil
}

// ptr is the C view of the text (NULL for a nil text).
func (t cText) ptr() *C.char {
	if t == nil {
		return nil
	}
	return (*C.char)(unsafe.Pointer(&t[0]))
}

// checkKey refuses a key C would cut short (a NUL byte), naming it, without copying it: the
// calls of rkgo.h take the key as a Go string.
func checkKey(key string) error {
	if strings.IndexByte(key, 0) >= 0 {
		return invalidArgument("key", "must not contain a NUL byte")
	}
	return nil
}

// keyText is a key for C: "" is NULL, the limiter's single shared key (the library treats the
// empty key the same way).
func keyText(key string) (cText, error) {
	if key == "" {
		return nil, nil
	}
	return text(key, "key")
}

// seconds is a duration as the C API takes it: double seconds. Go cannot say NaN or infinity
// here, and zero or negative durations go through so that the library names them.
func seconds(d time.Duration) C.double {
	return C.double(d.Seconds())
}

// micros is a duration the C API returns, in microseconds.
func micros(us C.uint64_t) time.Duration {
	if uint64(us) > uint64(math.MaxInt64/int64(time.Microsecond)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(us) * time.Microsecond
}

// closer frees a native handle exactly once, and never while a call is using it: every call
// holds the read lock; Close takes the write lock, so it waits for calls in flight and later
// calls fail with ErrClosed.
type closer struct {
	mu     sync.RWMutex
	closed bool
	once   sync.Once
}

// enter marks a call in flight; false when the handle is closed.
func (c *closer) enter() bool {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return false
	}
	return true
}

// leave ends a call begun with enter.
func (c *closer) leave() { c.mu.RUnlock() }

// close runs free once, after every call in flight has left.
func (c *closer) close(free func()) {
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		free()
		c.mu.Unlock()
	})
}

// cStrings copies strings into C memory (for arrays of strings, which cgo cannot take from Go
// memory); free them with freeCStrings.
func cStrings(ss []string) []*C.char {
	out := make([]*C.char, len(ss))
	for i, s := range ss {
		out[i] = C.CString(s)
	}
	return out
}

// freeCStrings frees what cStrings allocated.
func freeCStrings(cs []*C.char) {
	for _, c := range cs {
		C.free(unsafe.Pointer(c))
	}
}

// Version is the version of the libratekeeper this module links, e.g. "0.1.0".
func Version() string {
	return C.GoString(C.rk_version())
}
