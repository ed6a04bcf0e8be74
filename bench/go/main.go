// The Go module's throughput beside its peers (run by bench/go/run.py, which builds it in GOPATH
// mode against Debian's golang-golang-x-time-dev and golang-github-gomodule-redigo-dev, offline):
//
//   - memory: ratekeeper's token-bucket Check (one key, one goroutine) against
//     golang.org/x/time/rate's Allow (one mutex, no keys), and the floors that say where a
//     Check's time goes: an empty cgo call; a cgo call with a Check's arguments and result (the
//     limiter pointer, the key as a Go string copied onto the C stack, the cost, the result
//     struct returned by value: what the module does, without the library); the same with the
//     key marshalled the usual way (C.CString, a C-heap copy, freed after; the result through a
//     pointer to Go memory); the library's own check, rk_limiter_check called from a C loop (no
//     cgo), and called once per cgo call (cgo and the library, without the module), and once
//     per cgo call through the module's C side (go/rkgo.h's rkgo_check: the key as a Go string,
//     the result by value; without the module's Go side); and the module's Check on the
//     unlimited limiter (everything but the algorithm);
//   - redis: ratekeeper's Check on a token bucket against a redigo client running a GCRA script
//     by EVALSHA on the same redis-server (the client floor for Go), sequential and with 64
//     goroutines in flight; during the 64-goroutine runs a goroutine sleeping 1 ms at a time
//     records how late it wakes, and the OS threads each contender's rounds created are
//     counted (runtime/pprof's threadcreate), to show what the calls in flight hold.
//
// Redis rounds alternate between ratekeeper and its peer (medians of the rounds); the memory
// contenders are timed in short interleaved batches (medians of the batches; see interleave).
// The output is one `name<TAB>value` line per figure, in checks per second.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../../go -I${SRCDIR}/../../go/lib/include
#include <stdlib.h>
#include "rkgo.h"

static void bench_empty(void) {}

// A Check's arguments and result, the module's way (go/rkgo.h), without the library.
static rkgo_result bench_same_args(const rk_limiter *l, _GoString_ key, uint64_t cost) {
	rkgo_result r;
	rkgo_key_text k;
	const char *text = rkgo_key(&k, key);
	r.status = (l == NULL && text != NULL && cost > 0) ? RK_OK : RK_INVALID_ARGUMENT;
	r.decision.allowed = true;
	rkgo_key_done(&k);
	return rkgo_finish(r);
}

// The same with the key as a C string and the result written through a pointer.
static enum rk_status bench_cstring_args(const rk_limiter *l, const char *key, uint64_t cost, rk_decision *out) {
	out->allowed = l == NULL && key != NULL && cost > 0;
	return RK_OK;
}

// The library's own check: a token bucket made with the C API, checked from C.
static rk_backend *bench_backend;
static rk_limiter *bench_limiter;

static int bench_c_setup(void) {
	if (rk_backend_new_memory(&bench_backend) != RK_OK) return -1;
	return rk_limiter_new_token_bucket(bench_backend, "bench-c", 1e6, 1ULL << 50, &bench_limiter) == RK_OK ? 0 : -1;
}

static uintptr_t bench_c_limiter(void) { return (uintptr_t)bench_limiter; }

static int bench_c_checks(int n) {
	rk_decision d;
	int allowed = 0;
	for (int i = 0; i < n; i++) {
		if (rk_limiter_check(bench_limiter, "k", 1, &d) == RK_OK && d.allowed) allowed++;
	}
	return allowed;
}
*/
import "C"

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
	"unsafe"

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

// perOp is how many operations one call of a contender makes (1 unless listed).
var perOp = map[string]float64{}

// interleave measures single-goroutine contenders in short batches taken in turn (about 0.5 ms
// each, the order rotating), for as long as alternate's rounds would take, and prints each
// contender's median batch as operations per second. On a machine shared with other work the
// load comes in bursts longer than a batch, so every contender meets the same load, and the
// median drops the batches a burst hit: the ratios of one run are robust where whole rounds
// of seconds are not.
func interleave(contenders map[string]func()) {
	names := make([]string, 0, len(contenders))
	for name := range contenders {
		names = append(names, name)
	}
	sort.Strings(names)
	// Batch sizes: what takes about 0.5 ms for each, from a first timing.
	batch := map[string]int{}
	for _, name := range names {
		n, start := 0, time.Now()
		for time.Since(start) < 20*time.Millisecond {
			contenders[name]()
			n++
		}
		batch[name] = n/40 + 1
	}
	perBatch := map[string][]float64{}
	end := time.Now().Add(time.Duration(float64(*rounds) * *seconds * float64(len(names)) * float64(time.Second)))
	for turn := 0; time.Now().Before(end); turn++ {
		for i := range names {
			name := names[(turn+i)%len(names)]
			op, n := contenders[name], batch[name]
			start := time.Now()
			for j := 0; j < n; j++ {
				op()
			}
			perOp := perOp[name]
			if perOp == 0 {
				perOp = 1
			}
			perBatch[name] = append(perBatch[name], perOp*float64(n)/time.Since(start).Seconds())
		}
	}
	for _, name := range names {
		fmt.Printf("%s\t%.0f\nbatches_%s\t%d\n", name, median(perBatch[name]), name, len(perBatch[name]))
	}
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
			n := perOp[name]
			if n == 0 {
				n = 1
			}
			results[name] = append(results[name], n*measure(workers, contenders[name]))
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
	unlimited := must(ratekeeper.Unlimited())
	xrate := rate.NewLimiter(rate.Limit(1e9), 1<<30) // finite: Allow takes its mutex and does its arithmetic
	if C.bench_c_setup() != 0 {
		fmt.Fprintln(os.Stderr, "the C API's token bucket could not be made")
		os.Exit(1)
	}
	key := "k"
	cLimiter := C.bench_c_limiter()
	perOp["memory_c_check"] = 64
	interleave(map[string]func(){
		"memory_check":           func() { tb.Check(ctx, key) },
		"memory_check_unlimited": func() { unlimited.Check(ctx, key) },
		"memory_cgo_empty":       func() { C.bench_empty() },
		"memory_cgo_same_args":   func() { C.bench_same_args(nil, key, 1) },
		"memory_cgo_cstring_args": func() {
			var d C.rk_decision
			k := C.CString(key)
			C.bench_cstring_args(nil, k, 1, &d)
			C.free(unsafe.Pointer(k))
		},
		"memory_c_check":   func() { C.bench_c_checks(64) },
		"memory_cgo_check": func() { C.bench_c_checks(1) },
		"memory_rkgo_check": func() {
			if r := C.rkgo_check(cLimiter, key, 1); r.status != C.RK_OK {
				C.free(unsafe.Pointer(r.message))
			}
		},
		"xrate_allow": func() { xrate.Allow() },
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
