package ratekeeper

import (
	"context"
	"errors"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func memory(t *testing.T) *Backend { return backendOf(t, "memory") }

func redisBackend(t *testing.T) *Backend { return backendOf(t, "redis") }

// backendOf is a new backend of kind "memory", "redis" (the shared standalone server) or
// "cluster" (the shared 3-master Cluster), the Redis ones under a prefix no other test uses,
// with opts; closed when the test ends.
func backendOf(t testing.TB, kind string, opts ...Option) *Backend {
	t.Helper()
	var b *Backend
	var err error
	remote := append([]Option{WithPrefix(uniquePrefix()), WithDeadline(5 * time.Second), WithConnectTimeout(5 * time.Second)}, opts...)
	switch kind {
	case "memory":
		b, err = NewMemory(opts...)
	case "redis":
		b, err = NewRedis(redisURL(t), remote...)
	case "cluster":
		b, err = NewCluster(clusterSeeds(t), remote...)
	default:
		t.Fatalf("no backend of kind %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// Many goroutines on one limit admit exactly the limit, on memory, a real Redis and a Cluster
// (on Redis most of these checks are started, see lone: on a Cluster too).
func TestManyGoroutinesAdmitExactlyTheLimit(t *testing.T) {
	for _, kind := range []string{"memory", "redis", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			lim := must[*Limiter](t)(backendOf(t, kind).Window("exact", 500, time.Hour))
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 50; i++ {
						d, err := lim.Check(context.Background(), "k")
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							allowed.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if allowed.Load() != 500 {
				t.Fatalf("%d of 800 checks admitted, want exactly 500", allowed.Load())
			}
		})
	}
}

func TestWaitReturnsWhenTheContextIsCancelled(t *testing.T) {
	lim := must[*Limiter](t)(memory(t).Window("w", 1, time.Hour))
	if d := must[Decision](t)(lim.Check(context.Background(), "k")); !d.Allowed {
		t.Fatal("the first check was refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(20 * time.Millisecond)
		cancel()
	}()
	_, err := lim.Wait(ctx, "k")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait returned %v, want context.Canceled", err)
	}
}

func TestWaitFailsAtOnceWhenTheDeadlineIsTooNear(t *testing.T) {
	lim := must[*Limiter](t)(memory(t).Window("w", 1, time.Hour))
	must[Decision](t)(lim.Check(context.Background(), "k"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := lim.Wait(ctx, "k")
	var over *OverLimitError
	if !errors.As(err, &over) || !errors.Is(err, ErrOverLimit) {
		t.Fatalf("Wait returned %v, want an *OverLimitError", err)
	}
	if over.RetryAfter <= time.Minute || over.RetryAfter > time.Hour {
		t.Fatalf("RetryAfter %v, want the rest of the hour", over.RetryAfter)
	}
	if ctx.Err() != nil {
		t.Fatal("Wait slept until the deadline instead of failing at once")
	}
}

func TestWaitWaitsForTheLimit(t *testing.T) {
	lim := must[*Limiter](t)(memory(t).Window("w", 1, 100*time.Millisecond))
	first := must[Decision](t)(lim.Check(context.Background(), "k"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := must[Decision](t)(lim.Wait(ctx, "k"))
	if !d.Allowed {
		t.Fatal("Wait returned a refusal")
	}
	// The window admits one per 100 ms: the second admission is at least 100 ms after the first
	// (the decisions' own clock, not a timer of the test).
	if gap := d.DecidedAt.Sub(first.DecidedAt); gap < 100*time.Millisecond {
		t.Fatalf("admitted %v after the first, inside its window", gap)
	}
}

// An Acquire waiting for a held slot (a started acquire, rk_limiter_acquire_start, on every
// backend) takes it when the holder releases it, with a higher fencing token.
func TestAcquireWaitsForARelease(t *testing.T) {
	for _, kind := range []string{"memory", "redis", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			mutex := must[*Limiter](t)(backendOf(t, kind).Concurrent("mutex", 1, 30*time.Second))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			first := must[*Lease](t)(mutex.Acquire(ctx, "k"))
			got := make(chan *Lease)
			go func() {
				lease, err := mutex.Acquire(ctx, "k")
				if err != nil {
					t.Error(err)
				}
				got <- lease
			}()
			// While the first is held, a check is refused.
			if d := must[Decision](t)(mutex.Check(ctx, "k")); d.Allowed {
				t.Fatal("a second holder was admitted")
			}
			if err := first.Release(); err != nil {
				t.Fatal(err)
			}
			second := <-got
			if second == nil || second.FencingToken() <= first.FencingToken() {
				t.Fatalf("fencing tokens %d then %v: want a higher one", first.FencingToken(), second)
			}
			if err := second.Release(); err != nil {
				t.Fatal(err)
			}
			if err := second.Release(); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("a second Release returned %v, want ErrLeaseLost", err)
			}
		})
	}
}

func TestAcquireHonoursTheContext(t *testing.T) {
	mutex := must[*Limiter](t)(memory(t).Concurrent("mutex", 1, 30*time.Second))
	held := must[*Lease](t)(mutex.Acquire(context.Background(), "k"))
	defer held.Release()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(20 * time.Millisecond)
		cancel()
	}()
	if _, err := mutex.Acquire(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire returned %v, want context.Canceled", err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	if _, err := mutex.Acquire(short, "k"); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrOverLimit) {
		t.Fatalf("Acquire returned %v, want the deadline or an over-limit error", err)
	}
}

func TestInvalidArgumentsNameTheParameter(t *testing.T) {
	b := memory(t)
	cases := []struct {
		parameter string
		call      func() error
	}{
		{"limit", func() error { _, err := b.Window("w", 0, time.Second); return err }},
		{"interval", func() error { _, err := b.Window("w", 1, -time.Second); return err }},
		{"name", func() error { _, err := b.Window("no!", 1, time.Second); return err }},
		{"key", func() error {
			lim := must[*Limiter](t)(b.Window("w", 1, time.Second))
			_, err := lim.Check(context.Background(), "a\x00b")
			return err
		}},
		{"tz", func() error { _, err := b.Calendar("c", 1, "day", InZone("Mars/Olympus")); return err }},
	}
	for _, c := range cases {
		err := c.call()
		var e *Error
		if !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &e) || e.Parameter != c.parameter {
			t.Errorf("want ErrInvalidArgument naming %s, got %v", c.parameter, err)
		}
	}
}

// unreachableRedis is a Redis URL of a loopback port nobody listens on.
func unreachableRedis(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "redis://" + l.Addr().String()
}

func TestAnUnreachableRedisIsUnavailable(t *testing.T) {
	url := unreachableRedis(t)
	b := must[*Backend](t)(NewRedis(url, WithDeadline(200*time.Millisecond)))
	defer b.Close()
	lim := must[*Limiter](t)(b.TokenBucket("tb", 10, 10))
	_, err := lim.Check(context.Background(), "k")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Check returned %v, want ErrUnavailable", err)
	}
	open := must[*Backend](t)(NewRedis(url, WithFailurePolicy(FailOpen), WithDeadline(200*time.Millisecond)))
	defer open.Close()
	lim = must[*Limiter](t)(open.TokenBucket("tb", 10, 10))
	if d := must[Decision](t)(lim.Check(context.Background(), "k")); !d.Allowed {
		t.Fatal("FailOpen refused a call while Redis was down")
	}
}

// Close waits for calls in flight, frees once, and later calls fail with ErrClosed: many
// goroutines check while another closes (go test -race).
func TestCloseWhileInUse(t *testing.T) {
	b := memory(t)
	lim := must[*Limiter](t)(b.TokenBucket("tb", 1000, 1000))
	var wg sync.WaitGroup
	var closedSeen atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				_, err := lim.Check(context.Background(), "k")
				if errors.Is(err, ErrClosed) {
					closedSeen.Add(1)
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	time.Sleep(time.Millisecond)
	for i := 0; i < 3; i++ {
		if err := lim.Close(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if _, err := lim.Check(context.Background(), "k"); !errors.Is(err, ErrClosed) {
		t.Fatalf("a check after Close returned %v, want ErrClosed", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Window("w", 1, time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("a constructor after Close returned %v, want ErrClosed", err)
	}
}

// Limiters nobody closed are freed by their finalizer (which closes them: never twice, a
// finalizer only runs once nothing refers to the limiter).
func TestFinalizersFreeForgottenLimiters(t *testing.T) {
	before := finalizedLimiters.Load()
	func() {
		b := must[*Backend](t)(NewMemory())
		for i := 0; i < 10; i++ {
			must[*Limiter](t)(b.Window("w", 1, time.Second))
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && finalizedLimiters.Load()-before < 10 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := finalizedLimiters.Load() - before; n < 10 {
		t.Fatalf("%d of 10 unreachable limiters were finalized", n)
	}
}

func TestSettleAndShadowAndBlock(t *testing.T) {
	ctx := context.Background()
	b := memory(t)
	tb := must[*Limiter](t)(b.TokenBucket("tb", 1, 10))
	d := must[Decision](t)(tb.CheckN(ctx, "k", 5))
	if !d.Settleable() {
		t.Fatal("an admitted token-bucket decision is not settleable")
	}
	after := must[Decision](t)(tb.Settle(ctx, d, 2))
	again := must[Decision](t)(tb.Settle(ctx, d, 2))
	if after.Remaining < 8 || again.Remaining != after.Remaining {
		t.Fatalf("settled to 2 of 5: remaining %d then %d, want 8 or more, once", after.Remaining, again.Remaining)
	}
	shadow := must[*Limiter](t)(must[*Limiter](t)(b.Window("sw", 1, time.Hour)).WithShadow(true))
	must[Decision](t)(shadow.Check(ctx, "k"))
	if d := must[Decision](t)(shadow.Check(ctx, "k")); !d.Allowed || !d.ShadowRefused {
		t.Fatalf("shadow mode: %+v, want allowed and shadow-refused", d)
	}
	w := must[*Limiter](t)(b.Window("bw", 100, time.Hour))
	must[time.Duration](t)(w.Block(ctx, "k", time.Minute))
	if d := must[Decision](t)(w.Check(ctx, "k")); d.Allowed || d.RetryAfter <= 59*time.Second {
		t.Fatalf("a blocked key: %+v, want refused for the minute", d)
	}
	if !must[bool](t)(w.Unblock(ctx, "k")) {
		t.Fatal("Unblock saw no block")
	}
}

func TestObservePausesForAnUpstreams429(t *testing.T) {
	ctx := context.Background()
	lim := must[*Limiter](t)(memory(t).TokenBucket("upstream", 10, 10))
	h := http.Header{}
	h.Set("Retry-After", "10")
	pause := must[time.Duration](t)(lim.Observe(ctx, "partner", 429, h))
	if pause < 10*time.Second || pause > 11*time.Second {
		t.Fatalf("paused %v for Retry-After: 10", pause)
	}
	if d := must[Decision](t)(lim.Check(ctx, "partner")); d.Allowed || d.RetryAfter < 9*time.Second {
		t.Fatalf("a check during the pause: %+v", d)
	}
	if none := must[time.Duration](t)(lim.Observe(ctx, "other", 200, h)); none != 0 {
		t.Fatalf("a 200 paused for %v", none)
	}
}

func TestCheckAllWithOneLimiterTwice(t *testing.T) {
	b := memory(t)
	w := must[*Limiter](t)(b.Window("w", 3, time.Hour))
	all := must[AllDecision](t)(b.CheckAll(context.Background(), Part{w, "a", 2}, Part{w, "b", 2}))
	if !all.Allowed || all.Parts[0].Remaining != 1 || all.Parts[1].Remaining != 1 {
		t.Fatalf("%+v", all)
	}
	all = must[AllDecision](t)(b.CheckAll(context.Background(), Part{w, "a", 2}, Part{w, "b", 1}))
	if all.Allowed || all.RetryAfter <= 0 {
		t.Fatalf("a part over its limit let the combination through: %+v", all)
	}
	if d := must[Decision](t)(w.Peek(context.Background(), "b")); d.Remaining != 1 {
		t.Fatalf("a refused combination consumed: b has %d left, want 1", d.Remaining)
	}
}

func TestLiveLimitsAndMetrics(t *testing.T) {
	ctx := context.Background()
	b := redisBackend(t)
	w := must[*Limiter](t)(b.Window("live", 1, time.Hour))
	if d := must[Decision](t)(w.Check(ctx, "k")); !d.Allowed || d.Limit != 1 {
		t.Fatalf("%+v", d)
	}
	if err := b.SetLimit("live", `{"kind":"window","limit":5,"interval":3600}`, ""); err != nil {
		t.Fatal(err)
	}
	if d := must[Decision](t)(w.Check(ctx, "k")); !d.Allowed || d.Limit != 5 {
		t.Fatalf("after SetLimit to 5: %+v", d)
	}
	if err := b.ClearLimit("live", ""); err != nil {
		t.Fatal(err)
	}
	if d := must[Decision](t)(w.Check(ctx, "k")); d.Allowed || d.Limit != 1 {
		t.Fatalf("after ClearLimit: %+v", d)
	}
	m := must[Metrics](t)(w.Metrics())
	if m.Name != "live" || m.Allowed != 2 || m.Refused != 1 {
		t.Fatalf("metrics %+v, want 2 allowed and 1 refused", m)
	}
	resp, body := getOnce(t, b.PrometheusHandler())
	if resp.StatusCode != 200 || !strings.Contains(string(body), `ratekeeper_checks_total{limiter="live",kind="window",outcome="refused"} 1`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// AcquireAll waits for every part at once: for a concurrent part's slot (released by another
// goroutine) and then takes the window's unit with it, exactly once; a cancelled ctx ends the
// wait; a wait the deadline cannot cover fails at once with an *OverLimitError.
func TestAcquireAllWaitsForEveryPart(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			b := backendOf(t, kind)
			mutex := must[*Limiter](t)(b.Concurrent("mutex", 1, time.Minute))
			window := must[*Limiter](t)(b.Window("window", 10, time.Hour))
			held := must[*Lease](t)(mutex.Acquire(context.Background(), "k"))

			cancelled, cancel := context.WithCancel(context.Background())
			go func() {
				time.Sleep(20 * time.Millisecond)
				cancel()
			}()
			if _, err := b.AcquireAll(cancelled, Part{mutex, "k", 1}, Part{window, "k", 1}); !errors.Is(err, context.Canceled) {
				t.Fatalf("AcquireAll while the slot was held, cancelled: %v, want context.Canceled", err)
			}

			got := make(chan AllDecision, 1)
			go func() {
				all, err := b.AcquireAll(context.Background(), Part{mutex, "k", 1}, Part{window, "k", 1})
				if err != nil {
					t.Error(err)
				}
				got <- all
			}()
			must[struct{}](t)(struct{}{}, held.Release())
			all := <-got
			if !all.Allowed || all.Parts[0].Lease == nil || all.Parts[0].Lease.FencingToken() <= held.FencingToken() {
				t.Fatalf("after the release: %+v", all)
			}
			must[struct{}](t)(struct{}{}, all.Parts[0].Lease.Release())
			if d := must[Decision](t)(window.Peek(context.Background(), "k")); d.Remaining != 9 {
				t.Fatalf("the window has %d left, want 9: one admission, nothing for the cancelled wait", d.Remaining)
			}

			spent := must[*Limiter](t)(b.Window("spent", 1, time.Hour))
			must[Decision](t)(spent.Check(context.Background(), "k"))
			short, cancel2 := context.WithTimeout(context.Background(), time.Minute)
			defer cancel2()
			_, err := b.AcquireAll(short, Part{spent, "k", 1})
			var over *OverLimitError
			if !errors.As(err, &over) || over.RetryAfter <= time.Minute || short.Err() != nil {
				t.Fatalf("AcquireAll past its deadline: %v, want an *OverLimitError at once", err)
			}
		})
	}
}

// A counting part's RetryAfter longer than the library's slice is slept on a Go timer: the
// second admission of a window of one per 300 ms comes at least 300 ms after the first, by
// the decisions' own clock.
func TestAcquireAllWaitsForACountingPart(t *testing.T) {
	b := memory(t)
	w := must[*Limiter](t)(b.Window("w", 1, 300*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := must[AllDecision](t)(b.AcquireAll(ctx, Part{w, "k", 1}))
	second := must[AllDecision](t)(b.AcquireAll(ctx, Part{w, "k", 1}))
	if gap := second.Parts[0].DecidedAt.Sub(first.Parts[0].DecidedAt); !second.Allowed || gap < 300*time.Millisecond {
		t.Fatalf("admitted %v after the first (%+v)", gap, second)
	}
}
