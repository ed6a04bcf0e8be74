package ratekeeper

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pauseWrites pauses the writes (and every script) of all clients of the Redis at url for ms
// milliseconds with CLIENT PAUSE WRITE, sent on a connection of its own; the returned function
// ends the pause (CLIENT UNPAUSE is not a write, so it goes through).
func pauseWrites(t *testing.T, url string, ms int) (unpause func()) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "redis://"))
	if err != nil {
		t.Fatal(err)
	}
	replies := bufio.NewReader(conn)
	send := func(command string) {
		t.Helper()
		if _, err := conn.Write([]byte(command + "\r\n")); err != nil {
			t.Fatal(err)
		}
		if line, err := replies.ReadString('\n'); err != nil || line != "+OK\r\n" {
			t.Fatalf("%s: %q, %v", command, line, err)
		}
	}
	send("CLIENT PAUSE " + strconv.Itoa(ms) + " WRITE")
	return func() {
		send("CLIENT UNPAUSE")
		conn.Close()
	}
}

// A check on Redis made while another is in flight waits in Go's scheduler, not in the library:
// while Redis holds it (paused), cancelling the context returns context.Canceled at once; the
// blocking call would have run to its deadline (20 s) and failed with ErrTimeout. The check was
// sent, so it still counts once Redis answers, and a lease it was granted is given back.
func TestACheckInFlightOnRedisReturnsWhenTheContextIsCancelled(t *testing.T) {
	url := redisURL(t)
	b := backendOf(t, "redis", WithDeadline(20*time.Second))
	window := must[*Limiter](t)(b.Window("cancel", 10, time.Hour))
	pool := must[*Limiter](t)(b.Concurrent("cancel", 2, time.Hour))
	// Connected, scripts loaded: the checks below are in flight at Redis.
	must[Decision](t)(window.Peek(context.Background(), "warm"))
	for _, lim := range []*Limiter{window, pool} {
		unpause := pauseWrites(t, url, 60000)
		// The process's one check on the calling thread, held by Redis until the pause ends.
		first := make(chan Decision, 1)
		go func() { first <- must[Decision](t)(lim.Check(context.Background(), "k")) }()
		for !lone.Load() {
			time.Sleep(time.Millisecond)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(50 * time.Millisecond)
			cancel()
		}()
		_, err := lim.Check(ctx, "k")
		unpause()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: a check cancelled while Redis held it returned %v, want context.Canceled", lim.Kind(), err)
		}
		if d := <-first; !d.Allowed {
			t.Fatalf("%s: the first check was refused", lim.Kind())
		} else if d.Lease != nil {
			must[struct{}](t)(struct{}{}, d.Lease.Release())
		}
	}
	// The window's cancelled check was sent: it counts (a peek is a round trip after it on the
	// same connection, so it sees it).
	if d := must[Decision](t)(window.Peek(context.Background(), "k")); d.Remaining != 8 {
		t.Fatalf("after the first and the cancelled check %d remain, want 8", d.Remaining)
	}
	// The pool's cancelled check was granted a slot: its lease is released when the result
	// comes (else the slot would be held for the lock timeout, an hour), so both slots free up.
	deadline := time.Now().Add(20 * time.Second)
	for {
		a := must[Decision](t)(pool.Check(context.Background(), "k"))
		b := must[Decision](t)(pool.Check(context.Background(), "k"))
		for _, d := range []Decision{a, b} {
			if d.Lease != nil {
				must[struct{}](t)(struct{}{}, d.Lease.Release())
			}
		}
		if a.Allowed && b.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease granted to the cancelled check was never released")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Checks on Redis go through rk_limiter_check_start; on memory (and the unlimited limiter)
// through the blocking call, which answers in-process faster than a hand-over.
func TestWhichChecksWaitInTheScheduler(t *testing.T) {
	r := redisBackend(t)
	m := memory(t)
	for _, c := range []struct {
		lim     *Limiter
		started bool
	}{
		{must[*Limiter](t)(r.Window("w", 1, time.Second)), true},
		{must[*Limiter](t)(r.Concurrent("c", 1, time.Second)), true},
		{must[*Limiter](t)(r.Leased("l", 10, 10, 0, 0)), false},
		{must[*Limiter](t)(m.Window("w", 1, time.Second)), false},
		{must[*Limiter](t)(Unlimited()), false},
	} {
		if c.lim.started != c.started {
			t.Errorf("%s limiter: started %v, want %v", c.lim.Kind(), c.lim.started, c.started)
		}
		if _, err := c.lim.Check(context.Background(), "k"); err != nil {
			t.Errorf("%s limiter: %v", c.lim.Kind(), err)
		}
	}
}

// Bad input through the started check is the same typed error, naming the parameter.
func TestAStartedCheckNamesABadParameter(t *testing.T) {
	lim := must[*Limiter](t)(redisBackend(t).Window("bad", 1, time.Second))
	lone.Store(true) // as if another check were on its thread: these are started
	defer lone.Store(false)
	var e *Error
	_, err := lim.CheckN(context.Background(), strings.Repeat("k", 2000), 1)
	if !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &e) || e.Parameter != "key" {
		t.Fatalf("a 2000-byte key: %v, want ErrInvalidArgument naming key", err)
	}
	_, err = lim.CheckN(context.Background(), "k", 1<<53+1)
	if !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &e) || e.Parameter != "cost" {
		t.Fatalf("cost 2^53+1: %v, want ErrInvalidArgument naming cost", err)
	}
}

// The ways a check can wait, on memory and on Redis (go test -bench CheckPath -cpu 1,64): how
// the module chooses per backend and per call. "blocking" is rk_limiter_check on the calling
// thread; "started" is rk_limiter_check_start for every check (the benchmark holds the lone
// slot); "chosen" is what Check does.
func BenchmarkCheckPath(b *testing.B) {
	for _, backend := range []string{"memory", "redis"} {
		for _, path := range []string{"blocking", "started", "chosen"} {
			b.Run(backend+"/"+path, func(b *testing.B) {
				lim, err := backendOf(b, backend).TokenBucket("bench", 1e6, 1<<50)
				if err != nil {
					b.Fatal(err)
				}
				switch path {
				case "blocking":
					lim.started = false
				case "started":
					lim.started = true
					lone.Store(true)
					defer lone.Store(false)
				}
				ctx := context.Background()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := lim.Check(ctx, "k"); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// osThreads is the number of OS threads of this process now (/proc/self/status).
func osThreads(t *testing.T) int {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Threads:") {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "Threads:")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads: line in /proc/self/status")
	return 0
}

// Goroutines waiting for a held concurrent limit on Redis hold no OS thread: many more of them
// than GOMAXPROCS wait in Go's scheduler (rk_limiter_acquire_start) while the process's thread
// count stays near where it was, and the program goes on answering (a Redis peek, a memory
// check). Then half are cancelled, which they see at once, and the other half take the slot
// one after another as each releases it (started releases), with strictly increasing fencing
// tokens.
func TestWaitingAcquiresOnRedisHoldNoOSThread(t *testing.T) {
	const waiters = 200
	b := redisBackend(t)
	mutex := must[*Limiter](t)(b.Concurrent("held", 1, time.Minute))
	other := must[*Limiter](t)(b.Window("other", 1000, time.Hour))
	local := must[*Limiter](t)(memory(t).Window("local", 1000, time.Hour))
	held := must[*Lease](t)(mutex.Acquire(context.Background(), "k"))
	before := osThreads(t)

	type result struct {
		token uint64
		err   error
	}
	results := make(chan result, waiters)
	var entered atomic.Int64
	cancelled, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < waiters; i++ {
		ctx := context.Background()
		if i%2 == 1 {
			ctx = cancelled
		}
		go func() {
			entered.Add(1)
			lease, err := mutex.Acquire(ctx, "k")
			if err != nil {
				results <- result{err: err}
				return
			}
			token := lease.FencingToken()
			results <- result{token: token, err: lease.Release()}
		}()
	}
	// While they wait (for 2 s once all have entered Acquire), the thread count stays low. A
	// waiting goroutine blocked in a C call would hold a thread each: 200 more.
	peak := before
	var since time.Time
	for since.IsZero() || time.Since(since) < 2*time.Second {
		if since.IsZero() && entered.Load() == waiters {
			since = time.Now()
		}
		if n := osThreads(t); n > peak {
			peak = n
		}
		time.Sleep(5 * time.Millisecond)
	}
	if peak-before > waiters/4 {
		t.Fatalf("%d goroutines waiting for a slot took the process from %d to %d OS threads", waiters, before, peak)
	}
	t.Logf("%d waiting goroutines (GOMAXPROCS %d): %d OS threads before, at most %d while they waited", waiters,
		runtime.GOMAXPROCS(0), before, peak)
	// The program still answers.
	must[Decision](t)(other.Peek(context.Background(), "k"))
	if d := must[Decision](t)(local.Check(context.Background(), "k")); !d.Allowed {
		t.Fatal("a memory check was refused")
	}
	select {
	case r := <-results:
		t.Fatalf("a waiter returned while the slot was held: %+v", r)
	default:
	}

	cancel()
	for i := 0; i < waiters/2; i++ {
		if r := <-results; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("after cancelling half the waiters one returned %+v, want context.Canceled", r)
		}
	}
	must[struct{}](t)(struct{}{}, held.Release())
	seen := map[uint64]bool{held.FencingToken(): true}
	for i := 0; i < waiters/2; i++ {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.token <= held.FencingToken() || seen[r.token] {
			t.Fatalf("fencing token %d after %d (seen: %v)", r.token, held.FencingToken(), seen[r.token])
		}
		seen[r.token] = true
	}
}

// Peek, Settle, Acquire and Release go through their started forms on Redis when another call
// holds the lone slot, with the same results as the blocking forms: exact totals.
func TestStartedPeekSettleAcquireRelease(t *testing.T) {
	ctx := context.Background()
	b := redisBackend(t)
	tb := must[*Limiter](t)(b.TokenBucket("settle", 0.001, 100))
	pool := must[*Limiter](t)(b.Concurrent("pool", 3, time.Minute))
	lone.Store(true) // as if another call were on its thread: every call below is started
	defer lone.Store(false)
	var wg sync.WaitGroup
	for g := 0; g < 10; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := tb.CheckN(ctx, "k", 5)
			if err == nil {
				_, err = tb.Settle(ctx, d, 2)
			}
			if err == nil {
				_, err = tb.Settle(ctx, d, 2) // a second settle of one decision applies nothing
			}
			for i := 0; i < 5 && err == nil; i++ {
				var lease *Lease
				if lease, err = pool.Acquire(ctx, "k"); err == nil {
					err = lease.Release()
				}
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// Ten checks of 5 settled to 2: 20 of 100 spent (the refill, 0.001/s, adds nothing whole).
	if d := must[Decision](t)(tb.Peek(ctx, "k")); d.Remaining != 80 {
		t.Fatalf("%d remain after ten calls settled to 2, want 80", d.Remaining)
	}
	// Every lease was released: all three slots are free.
	for i := 0; i < 3; i++ {
		if d := must[Decision](t)(pool.Check(ctx, "k")); !d.Allowed {
			t.Fatalf("slot %d of 3 is still held", i+1)
		}
	}
	lease := must[*Lease](t)(pool.Acquire(ctx, "other"))
	must[struct{}](t)(struct{}{}, lease.Release())
	if err := lease.Release(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a second started release of a lease returned %v, want ErrLeaseLost", err)
	}
}
