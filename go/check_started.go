package ratekeeper

// Checks that wait in Go's scheduler, not in an OS thread: rk_limiter_check_start submits the
// check to the library's runtime (on Redis, pipelined with every other call over one
// multiplexed connection) and returns at once. The library's callback, rkgo_on_complete below,
// is C: it writes the result, whole, into a pipe, and one goroutine reads the pipe through Go's
// network poller and hands each result to the goroutine waiting for it, on a channel named by a
// cgo.Handle. (A Go callback, //export-ed, was measured first: a goroutine it readied waited for
// sysmon to retake the processor the callback's thread left in a system call, about 100 µs, as
// long as ten Redis round trips.)

/*
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ratekeeper.h"

// One result as it travels through the pipe. Smaller than PIPE_BUF, so a write of one is never
// interleaved with another thread's.
typedef struct {
	uintptr_t handle;     // the cgo.Handle of the waiting goroutine's channel
	rk_decision decision; // on RK_OK
	char *message;        // on failure: a malloc'd copy, freed by the reader; else NULL
	int32_t status;
} rkgo_completion;

// The pipe's write end (blocking: when the reader falls behind, the library's thread waits
// rather than lose a result); set once, before the first check starts.
static int rkgo_completion_fd = -1;

// The library's callback, on one of its threads: copies the result into the pipe.
static void rkgo_on_complete(void *user_data, enum rk_status status, const rk_decision *decision, const char *message) {
	rkgo_completion c;
	memset(&c, 0, sizeof c);
	c.handle = (uintptr_t)user_data;
	c.status = (int32_t)status;
	if (decision != NULL) c.decision = *decision;
	if (status != RK_OK) c.message = strdup(message);
	const char *p = (const char *)&c;
	size_t left = sizeof c;
	while (left > 0) {
		ssize_t n = write(rkgo_completion_fd, p, left);
		if (n < 0) {
			if (errno == EINTR) continue;
			return; // cannot happen with a pipe whose read end is never closed
		}
		p += n;
		left -= (size_t)n;
	}
}

static void rkgo_set_completion_fd(int fd) { rkgo_completion_fd = fd; }

// Starts a check whose result goes to rkgo_on_complete with the cgo.Handle h as its user data.
static enum rk_status rkgo_check_start(const rk_limiter *limiter, const char *key, uint64_t cost, uintptr_t h) {
	return rk_limiter_check_start(limiter, key, cost, rkgo_on_complete, (void *)h);
}
*/
import "C"

import (
	"context"
	"os"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// completion is a started check's result: a decision, or a failure's status and message (the
// library's thread-local message is on its own thread, so the message comes with the result).
type completion struct {
	st      status
	raw     C.rk_decision
	message string
}

// lone is held by the one Redis check of the process that is made on its caller's thread, by
// the blocking rk_limiter_check: alone, that is the fastest way (a started check adds hand-overs
// between threads: measured 2.5 times slower alone); every check made while it is held is
// started and waits in Go's scheduler (measured twice as fast with 64 goroutines), so at most
// one OS thread of the process is held in the library by checks.
var lone atomic.Bool

var completions struct {
	once sync.Once
	err  error
}

// startCompletions makes the pipe and starts its reader, once per process.
func startCompletions() error {
	completions.once.Do(func() {
		var fds [2]int
		if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
			completions.err = &Error{Kind: ErrInternal, Message: "the completion pipe: " + err.Error()}
			return
		}
		// Room for thousands of results in flight (F_SETPIPE_SZ; the default 64 KiB is about
		// 400); the default will do if the system refuses.
		_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, uintptr(fds[1]), 1031, 1<<20)
		// Non-blocking, the read end is served by Go's network poller: the reader parks in it.
		if err := syscall.SetNonblock(fds[0], true); err != nil {
			completions.err = &Error{Kind: ErrInternal, Message: "the completion pipe: " + err.Error()}
			return
		}
		C.rkgo_set_completion_fd(C.int(fds[1]))
		go readCompletions(os.NewFile(uintptr(fds[0]), "ratekeeper-completions"))
	})
	return completions.err
}

// readCompletions hands every result written into the pipe to the goroutine waiting for it; one
// read takes as many as have come.
func readCompletions(pipe *os.File) {
	size := int(C.sizeof_rkgo_completion)
	buf := make([]byte, 256*size)
	have := 0
	for {
		n, err := pipe.Read(buf[have:])
		if err != nil {
			panic("ratekeeper: reading the completion pipe: " + err.Error()) // its ends are never closed
		}
		have += n
		whole := have / size * size
		for off := 0; off < whole; off += size {
			deliver((*C.rkgo_completion)(unsafe.Pointer(&buf[off])))
		}
		have = copy(buf, buf[whole:have])
	}
}

// deliver sends one result to its channel (never blocking: the channel has room for it) and
// frees the handle, exactly once.
func deliver(r *C.rkgo_completion) {
	h := cgo.Handle(r.handle)
	done := h.Value().(chan completion)
	h.Delete()
	c := completion{st: status(r.status), raw: r.decision}
	if r.message != nil {
		c.message = C.GoString(r.message)
		C.free(unsafe.Pointer(r.message))
	}
	done <- c
}

// checkStarted runs a check through rk_limiter_check_start: the goroutine waits on a channel
// (parked in Go's scheduler, holding no OS thread) until the result comes or ctx is done. A
// cancelled wait returns ctx.Err(); the check itself was sent and may still be counted, and a
// lease it grants is released when it comes.
func (l *Limiter) checkStarted(ctx context.Context, key string, k cText, cost uint64) (Decision, error) {
	if err := startCompletions(); err != nil {
		return Decision{}, err
	}
	done := make(chan completion, 1)
	h := cgo.NewHandle(done)
	err := l.use(func(p *C.rk_limiter) status {
		return C.rkgo_check_start(p, k.ptr(), C.uint64_t(cost), C.uintptr_t(h))
	})
	if err != nil {
		h.Delete() // not submitted: no result will come
		return Decision{}, err
	}
	select {
	case c := <-done:
		return l.completed(key, c)
	case <-ctx.Done():
		go func() {
			if d, err := l.completed(key, <-done); err == nil && d.Lease != nil {
				_ = d.Lease.Release()
			}
		}()
		return Decision{}, ctx.Err()
	}
}

// completed turns a started check's result into its decision or error.
func (l *Limiter) completed(key string, c completion) (Decision, error) {
	if c.st != C.RK_OK {
		return Decision{}, errorFor(c.st, c.message)
	}
	return decisionOf(l, key, &c.raw), nil
}
