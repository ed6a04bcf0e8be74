// The Go module's throughput beside its peers (run by bench/go/run.py, which builds it in GOPATH
// mode against Debian's golang-golang-x-time-dev and golang-github-gomodule-redigo-dev, offline):
//
//   - memory: ratekeeper's token-bucket Check (one key, one goroutine) against
//     golang.org/x/time/rate's Allow (one mutex, no keys), and a bare cgo call (Version) to say
//     how much of a Check is the crossing into C;
//   - redis: ratekeeper's Check on a token bucket against a redigo client running a GCRA script
//     by EVALSHA on the same redis-server (the client floor for Go), sequential and with 64
//     goroutines in flight; during the 64-goroutine runs a goroutine sleeping 1 ms at a time
//     records how late it wakes, and the OS threads each contender's rounds created are
//     counted (runtime/pprof's threadcreate), to show what the calls in flight hold.
//
// Rounds alternate between ratekeeper and its peer; the output is one `name<TAB>value` line per
// figure (medians of the rounds, checks per second).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
	ratekeeper "github.com/ratekeeper/ratekeeper/go"
	"golang.org/x/time/rate"
)

// gcra is go-redis/redis_rate's GCRA (allow one), the script a Go service would run itself.
const gcra = `
local key = KEYS[1]
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local emission_interval = period / rate
local increment = emission_interval * cost
local burst_offset = emission_interval * burst
local now = redis.call("TIME")
now = (now[1] - 1700000000) + now[2] / 1000000
local tat = redis.call("GET", key)
if not tat then tat = now else tat = tonumber(tat) end
tat = math.max(tat, now)
local new_tat = tat + increment
local allow_at = new_tat - burst_offset
local diff = now - allow_at
if diff < 0 then return {0, 0} end
local reset_after = new_tat - now
if reset_after > 0 then redis.call("SET", key, new_tat, "EX", math.ceil(reset_after)) end
return {cost, 1}
`

var (
	seconds = flag.Float64("seconds", 2, "length of one round")
	rounds  = flag.Int("rounds", 5, "rounds per contender")
	url     = flag.String("redis", "", "redis:// URL (empty: memory only)")
)

// measure runs op from `workers` goroutines for one round and returns operations per second.
func measure(workers int, op func()) float64 {
	var n atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := int64(0)
			for !stop.Load() {
				for i := 0; i < 64; i++ {
					op()
				}
				local += 64
			}
			n.Add(local)
		}()
	}
	time.Sleep(time.Duration(*seconds * float64(time.Second)))
	stop.Store(true)
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds()
}

func median(xs []float64) float64 {
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

// alternate runs the contenders' rounds in turn and prints each median.
func alternate(workers int, contenders map[string]func()) {
	names := make([]string, 0, len(contenders))
	for name := range contenders {
		names = append(names, name)
	}
	sort.Strings(names)
	results := map[string][]float64{}
	threads := map[string]int{}
	for r := 0; r < *rounds; r++ {
		for _, name := range names {
			before := threadsCreated()
			results[name] = append(results[name], measure(workers, contenders[name]))
			threads[name] += threadsCreated() - before
		}
	}
	for _, name := range names {
		fmt.Printf("%s\t%.0f\nthreads_%s\t%d\n", name, median(results[name]), name, threads[name])
	}
}

// threadsCreated is the number of OS threads the process has created so far (Go keeps them,
// so what a contender's rounds add is what its calls needed beyond what was there).
func threadsCreated() int { return pprof.Lookup("threadcreate").Count() }

// lateness records how late a goroutine sleeping 1 ms at a time wakes, until stop.
func lateness(stop <-chan struct{}) (p99, worst time.Duration) {
	var late []time.Duration
	for {
		select {
		case <-stop:
			sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
			if len(late) == 0 {
				return 0, 0
			}
			return late[len(late)*99/100], late[len(late)-1]
		default:
		}
		t := time.Now()
		time.Sleep(time.Millisecond)
		late = append(late, time.Since(t)-time.Millisecond)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return v
}

func main() {
	flag.Parse()
	ctx := context.Background()
	fmt.Printf("rounds\t%d\nseconds\t%g\n", *rounds, *seconds)

	mem := must(ratekeeper.NewMemory())
	tb := must(mem.TokenBucket("bench", 1e6, 1<<50))
	xrate := rate.NewLimiter(rate.Limit(1e9), 1<<30) // finite: Allow takes its mutex and does its arithmetic
	alternate(1, map[string]func(){
		"memory_check":     func() { tb.Check(ctx, "k") },
		"memory_cgo_floor": func() { ratekeeper.Version() },
		"xrate_allow":      func() { xrate.Allow() },
	})
	if *url == "" {
		return
	}

	backend := must(ratekeeper.NewRedis(*url, ratekeeper.WithPrefix("bench-go"), ratekeeper.WithDeadline(2*time.Second)))
	rtb := must(backend.TokenBucket("bench", 1e6, 1<<50))
	pool := &redis.Pool{MaxIdle: 64, MaxActive: 64, Wait: true, Dial: func() (redis.Conn, error) { return redis.DialURL(*url) }}
	script := redis.NewScript(1, gcra)
	floor := func() {
		c := pool.Get()
		if _, err := script.Do(c, "bench-go-floor:k", 1<<50, 1e6, 1, 1); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c.Close()
	}
	check := func() {
		if _, err := rtb.Check(ctx, "k"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	alternate(1, map[string]func(){"redis_seq_ratekeeper": check, "redis_seq_redigo": floor})
	stop := make(chan struct{})
	done := make(chan [2]time.Duration)
	go func() {
		p99, worst := lateness(stop)
		done <- [2]time.Duration{p99, worst}
	}()
	alternate(64, map[string]func(){"redis_64_ratekeeper": check, "redis_64_redigo": floor})
	close(stop)
	late := <-done
	fmt.Printf("sleep_1ms_late_p99_us\t%d\nsleep_1ms_late_worst_us\t%d\n", late[0].Microseconds(), late[1].Microseconds())
}
