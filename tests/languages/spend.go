// A Go process spending the cross-language limits of ruby/test/languages_test.rb through the Go
// module: waits until START (Unix seconds) so every language starts at once, then makes
// ATTEMPTS checks on each of two limiters and prints how many each admitted.
// Usage: spend REDIS_URL PREFIX START ATTEMPTS (scripts/test-ruby builds it from go/).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	ratekeeper "github.com/ratekeeper/ratekeeper/go"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "go spend:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("usage: spend REDIS_URL PREFIX START ATTEMPTS")
	}
	backend, err := ratekeeper.NewRedis(args[0], ratekeeper.WithPrefix(args[1]), ratekeeper.WithDeadline(5*time.Second))
	if err != nil {
		return err
	}
	defer backend.Close()
	scarce, err := backend.Window("scarce", 200, time.Hour)
	if err != nil {
		return err
	}
	plenty, err := backend.Bucket("plenty", 100_000, 24*time.Hour)
	if err != nil {
		return err
	}
	start, err := strconv.ParseFloat(args[2], 64)
	if err != nil {
		return err
	}
	attempts, err := strconv.Atoi(args[3])
	if err != nil {
		return err
	}
	time.Sleep(time.Until(time.UnixMicro(int64(start * 1e6))))
	ctx := context.Background()
	counts := map[string]any{"language": "go", "scarce": 0, "plenty": 0}
	for i := 0; i < attempts; i++ {
		for name, lim := range map[string]*ratekeeper.Limiter{"scarce": scarce, "plenty": plenty} {
			d, err := lim.Check(ctx, "shared")
			if err != nil {
				return err
			}
			if d.Allowed {
				counts[name] = counts[name].(int) + 1
			}
		}
	}
	return json.NewEncoder(os.Stdout).Encode(counts)
}
