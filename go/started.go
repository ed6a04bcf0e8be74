package ratekeeper

// Calls that wait in Go's scheduler, not in an OS thread: rk_limiter_check_start (and
// _peek_start, _acquire_start, _settle_start, _release_start) submits the call to the library's
// runtime (on Redis, pipelined with every other call over one multiplexed connection; an
// acquire's wait for a slot included) and returns at once. The library's callback, rkgo_on_complete below,
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
#include "rkgo.h"

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

// The started calls: each submits its call with the cgo.Handle h as the user data of
// rkgo_on_complete, the key copied as the blocking calls' is (rkgo.h).
static enum rk_status rkgo_check_start(const rk_limiter *l, _GoString_ key, uint64_t cost, uintptr_t h) {
	RKGO_START(key, rk_limiter_check_start(l, k, cost, rkgo_on_complete, (void *)h));
}

static enum rk_status rkgo_peek_start(const rk_limiter *l, _GoString_ key, uintptr_t h) {
	RKGO_START(key, rk_limiter_peek_start(l, k, rkgo_on_complete, (void *)h));
}

static enum rk_status rkgo_acquire_start(const rk_limiter *l, _GoString_ key, uint64_t cost, double wait, uintptr_t h) {
	RKGO_START(key, rk_limiter_acquire_start(l, k, cost, wait, rkgo_on_complete, (void *)h));
}

static enum rk_status rkgo_settle_start(const rk_limiter *l, _GoString_ key, rk_decision d, uint64_t actual, uintptr_t h) {
	RKGO_START(key, rk_limiter_settle_start(l, k, &d, actual, rkgo_on_complete, (void *)h));
}

static enum rk_status rkgo_release_start(const rk_limiter *l, _GoString_ key, rk_lease lease, uintptr_t h) {
	RKGO_START(key, rk_limiter_release_start(l, k, &lease, rkgo_on_complete, (void *)h));
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
	"time"
	"unsafe"
)

// completion is a call's result, blocking or started: a decision, or a failure's status and
// message (read on the thread that failed: the library's message is thread-local).
type completion struct {
	st      status
	raw     C.rk_decision
	message string
}

// resultOf converts a blocking call's result, freeing its message.
func resultOf(r C.rkgo_result) completion {
	c := completion{st: status(r.status), raw: r.decision}
	if r.message != nil {
		c.message = C.GoString(r.message)
		C.free(unsafe.Pointer(r.message))
	}
	return c
}

// err is the completion's error (nil on RK_OK).
func (c *completion) err() error {
	if c.st == C.RK_OK {
		return nil
	}
	return errorFor(c.st, c.message)
}

// lone is held by the one Redis call of the process that is made on its caller's thread, by
// the blocking C function: alone, that is the fastest way (a started call adds hand-overs
// between threads: measured 2.5 times slower alone); every call made while it is held is
// started and waits in Go's scheduler (measured twice as fast with 64 goroutines), so at most
// one OS thread of the process is held in the library by calls. (An acquire that waits for a
// slot is always started: it could hold the thread for as long as the slot is taken.)
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

// starter submits one started call with the handle its result goes to.
type starter func(p *C.rk_limiter, h C.uintptr_t) status

// orphan takes the result of a started call whose caller stopped waiting (its ctx was done).
type orphan func(l *Limiter, key string, c completion)

// releaseOrphan gives back the lease a started call was granted after its caller left.
func releaseOrphan(l *Limiter, key string, c completion) {
	if c.st == C.RK_OK && bool(c.raw.has_lease) {
		_ = l.release(key, &Lease{limiter: l, key: key, raw: c.raw.lease})
	}
}

// start runs a call through its started form: the goroutine waits on a channel (parked in Go's
// scheduler, holding no OS thread) until the result comes or ctx is done. A wait ended by ctx
// returns ctx.Err(); the call itself was sent and runs to its end, and its result goes to
// leftover (nil: nothing to undo). The error is ctx's, ErrClosed or a refused submission; the
// call's own failure is in the completion.
func (l *Limiter) start(ctx context.Context, key string, submit starter, leftover orphan) (completion, error) {
	if err := startCompletions(); err != nil {
		return completion{}, err
	}
	done := make(chan completion, 1)
	h := cgo.NewHandle(done)
	if err := l.use(func(p *C.rk_limiter) status { return submit(p, C.uintptr_t(h)) }); err != nil {
		h.Delete() // not submitted: no result will come
		return completion{}, err
	}
	select {
	case c := <-done:
		return c, nil
	case <-ctx.Done():
		go func() {
			c := <-done
			if leftover != nil {
				leftover(l, key, c)
			}
		}()
		return completion{}, ctx.Err()
	}
}

// addr is a limiter's address as the calls of rkgo.h take it (see there why).
func addr(p *C.rk_limiter) C.uintptr_t { return C.uintptr_t(uintptr(unsafe.Pointer(p))) }

// The started calls, for the files whose preambles cannot see this one's.
func startCheck(p *C.rk_limiter, key string, cost uint64, h C.uintptr_t) status {
	return C.rkgo_check_start(p, key, C.uint64_t(cost), h)
}

func startPeek(p *C.rk_limiter, key string, h C.uintptr_t) status {
	return C.rkgo_peek_start(p, key, h)
}

func startAcquire(p *C.rk_limiter, key string, cost uint64, wait time.Duration, h C.uintptr_t) status {
	return C.rkgo_acquire_start(p, key, C.uint64_t(cost), seconds(wait), h)
}

func startSettle(p *C.rk_limiter, key string, d C.rk_decision, actual uint64, h C.uintptr_t) status {
	return C.rkgo_settle_start(p, key, d, C.uint64_t(actual), h)
}

func startRelease(p *C.rk_limiter, key string, lease C.rk_lease, h C.uintptr_t) status {
	return C.rkgo_release_start(p, key, lease, h)
}

// blocking runs a call through its blocking form on the caller's thread.
func (l *Limiter) blocking(f func(p C.uintptr_t) C.rkgo_result) (completion, error) {
	if !l.handle.enter() {
		return completion{}, closedError()
	}
	r := f(addr(l.ptr))
	l.handle.leave()
	return resultOf(r), nil
}

// run runs a call that does not wait for a limit: on the caller's thread for limiters answered
// in-process and for the process's lone Redis call, started otherwise (see lone). The error is
// ctx's or ErrClosed; the call's own failure is in the completion.
func (l *Limiter) run(ctx context.Context, key string, f func(p C.uintptr_t) C.rkgo_result, submit starter, leftover orphan) (completion, error) {
	if l.started {
		if !lone.CompareAndSwap(false, true) {
			return l.start(ctx, key, submit, leftover)
		}
		defer lone.Store(false)
	}
	return l.blocking(f)
}
