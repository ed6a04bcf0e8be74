// One real check against the Redis at $REDIS_URL through the Go module as the package archive
// ships it (scripts/test-packages builds this program in a fresh module that requires
// github.com/ratekeeper/ratekeeper/go, replaced by the unpacked archive, with no Rust on PATH).
package main

import (
	"context"
	"fmt"
	"os"

	ratekeeper "github.com/ratekeeper/ratekeeper/go"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "go:", err)
		os.Exit(1)
	}
}

func run() error {
	backend, err := ratekeeper.NewRedis(os.Getenv("REDIS_URL"), ratekeeper.WithPrefix("packages-go"))
	if err != nil {
		return err
	}
	defer backend.Close()
	limiter, err := backend.TokenBucket("installed", 1, 1)
	if err != nil {
		return err
	}
	defer limiter.Close()
	ctx := context.Background()
	key := fmt.Sprintf("run-%d", os.Getpid()) // one key per run: a full bucket
	first, err := limiter.Check(ctx, key)
	if err != nil {
		return err
	}
	second, err := limiter.Check(ctx, key)
	if err != nil {
		return err
	}
	// A bucket of one: the first check is allowed, the second refused.
	fmt.Printf("go: ratekeeper %s: allowed=%v then allowed=%v retry_after=%v\n", ratekeeper.Version(), first.Allowed, second.Allowed, second.RetryAfter)
	if !first.Allowed || second.Allowed || second.RetryAfter <= 0 {
		return fmt.Errorf("want allowed then refused")
	}
	// In the registry before the process ends: the installed CLI's `limits` lists it next.
	return backend.Flush()
}
