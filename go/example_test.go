package ratekeeper_test

// The examples the documentation includes (docs/src/getting-started/go.md): go test runs each
// and compares its output.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	ratekeeper "github.com/ratekeeper/ratekeeper/go"
)

func Example_quickstart() {
	// --8<-- [start:quickstart]
	ctx := context.Background()
	// In-process state; ratekeeper.NewRedis("redis://localhost:6379") shares it with every
	// process, in every language, that uses the same Redis.
	backend, err := ratekeeper.NewMemory()
	if err != nil {
		panic(err)
	}
	defer backend.Close()

	limiter, err := backend.Window("api", 2, time.Minute) // 2 per minute, per key
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	for i := 0; i < 3; i++ {
		decision, err := limiter.Check(ctx, "user-42")
		if err != nil {
			panic(err) // ErrUnavailable when Redis cannot answer (fail closed)
		}
		fmt.Println(decision.Allowed, decision.Remaining, decision.RetryAfter > 50*time.Second)
	}
	// --8<-- [end:quickstart]

	// Output:
	// true 1 false
	// true 0 false
	// false 0 true
}

func Example_waitAndLeases() {
	backend, _ := ratekeeper.NewMemory()
	defer backend.Close()
	// --8<-- [start:wait]
	// Wait sleeps on a Go timer until the limit allows the call, or the context ends.
	paced, _ := backend.TokenBucket("upstream", 100, 1) // 100 per second, no burst
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		if _, err := paced.Wait(ctx, "partner-a"); err != nil {
			panic(err) // ctx.Err(), or an *ratekeeper.OverLimitError when the deadline is too near
		}
	}

	// A concurrent limiter: at most 2 holders at once; Acquire waits for a slot.
	workers, _ := backend.Concurrent("render", 2, 30*time.Second)
	lease, err := workers.Acquire(ctx, "tenant-7")
	if err != nil {
		panic(err)
	}
	defer lease.Release()
	fmt.Println("fencing token above 0:", lease.FencingToken() > 0)
	// --8<-- [end:wait]

	// Output:
	// fencing token above 0: true
}

func Example_errors() {
	backend, _ := ratekeeper.NewMemory()
	defer backend.Close()
	// --8<-- [start:errors]
	_, err := backend.Window("api", 0, time.Minute)
	var e *ratekeeper.Error
	if errors.Is(err, ratekeeper.ErrInvalidArgument) && errors.As(err, &e) {
		fmt.Println("bad parameter:", e.Parameter)
	}

	once, _ := backend.Window("once", 1, time.Hour)
	once.Check(context.Background(), "k")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = once.Wait(ctx, "k") // the hour will not pass within the second
	var over *ratekeeper.OverLimitError
	if errors.As(err, &over) {
		fmt.Println("over limit, retry within the hour:", over.RetryAfter <= time.Hour)
	}
	// --8<-- [end:errors]

	// Output:
	// bad parameter: limit
	// over limit, retry within the hour: true
}

func Example_middleware() {
	backend, _ := ratekeeper.NewMemory()
	defer backend.Close()
	// --8<-- [start:middleware]
	limiter, err := backend.Window("api", 2, time.Minute) // 2 per minute per client address
	if err != nil {
		panic(err)
	}
	limit := ratekeeper.Middleware(limiter, ratekeeper.MiddlewareOptions{
		TrustedProxies: []string{"10.0.0.0/8"}, // read X-Forwarded-For only from these
	})
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	server := httptest.NewServer(limit(mux)) // http.ListenAndServe(":8080", limit(mux))
	defer server.Close()

	for i := 0; i < 3; i++ {
		resp, err := http.Get(server.URL)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Printf("%d RateLimit: %s Retry-After: %q\n", resp.StatusCode, resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"))
	}
	// --8<-- [end:middleware]

	// Output:
	// 200 RateLimit: "api";r=1;t=60 Retry-After: ""
	// 200 RateLimit: "api";r=0;t=60 Retry-After: ""
	// 429 RateLimit: "api";r=0;t=60 Retry-After: "60"
}

func Example_acquireAllAndBackoff() {
	backend, _ := ratekeeper.NewMemory()
	defer backend.Close()
	// --8<-- [start:acquire-all]
	// A tenant's job takes one of its 2 worker slots and one of its 100 calls per hour, both or
	// neither, waiting for a slot (or a call) to free up.
	slots, _ := backend.Concurrent("tenant-slots", 2, time.Minute)
	calls, _ := backend.Window("tenant-calls", 100, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	all, err := backend.AcquireAll(ctx,
		ratekeeper.Part{Limiter: slots, Key: "tenant-7", Cost: 1},
		ratekeeper.Part{Limiter: calls, Key: "tenant-7", Cost: 1})
	if err != nil {
		panic(err) // ctx.Err(), or an *OverLimitError when the deadline cannot be met
	}
	defer all.Parts[0].Lease.Release()
	fmt.Println(all.Allowed, all.Parts[1].Remaining)

	// A job refused by a limit is rescheduled as Sidekiq does: max(RetryAfter, 5 min × n) plus
	// up to 5 min of jitter, and fails after 20 reschedules.
	backoff, _ := ratekeeper.NewBackoff(ratekeeper.BackoffJitter(0))
	defer backoff.Close()
	delay, reschedule, _ := backoff.RescheduleIn(2, 30*time.Second)
	fmt.Println(delay, reschedule)
	// --8<-- [end:acquire-all]

	// Output:
	// true 99
	// 10m0s true
}
