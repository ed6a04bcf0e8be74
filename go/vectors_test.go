package ratekeeper

// The shared conformance vectors (tests/vectors/*.json and tests/vectors/check_all/) through the
// module, so through the C ABI: every case builds its limiters with the typed constructors on a
// fresh backend driven by a ManualClock and compares each decision and error with the one every
// other language gets, on memory, on a real redis-server and on a real 3-master Redis Cluster
// (each case with its own key prefix).
//
// Go's types cannot say some of the vectors' bad values: a limit of -1 or 1.5 where the
// constructor takes a uint64, an interval of NaN or "fortnight" where it takes a time.Duration.
// A limiter whose spec holds one is built from the same spec as data (FromSpec), which is where
// a Go program gets such a value (configuration); a step whose cost or estimate Go cannot say is
// skipped (it expects an error and writes nothing). Both are counted and bounded below.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

type vectorCase struct {
	Name         string                    `json:"name"`
	StartUs      int64                     `json:"start_us"`
	Limiters     map[string]map[string]any `json:"limiters"`
	LimiterError map[string]any            `json:"limiter_error"`
	Steps        []map[string]any          `json:"steps"`
}

// notExpressible is a value Go's types cannot carry.
var errNotExpressible = errors.New("not expressible in Go's types")

// count is a vector number as a uint64, if it is one.
func count(v any) (uint64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, errNotExpressible
	}
	u, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil {
		return 0, errNotExpressible
	}
	return u, nil
}

// number is a vector number (or "NaN", "Infinity", "-Infinity") as a float64.
func number(v any) (float64, error) {
	switch x := v.(type) {
	case json.Number:
		return strconv.ParseFloat(string(x), 64)
	case string:
		switch x {
		case "NaN":
			return math.NaN(), nil
		case "Infinity":
			return math.Inf(1), nil
		case "-Infinity":
			return math.Inf(-1), nil
		}
	}
	return 0, errNotExpressible
}

var namedIntervals = map[string]time.Duration{"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour}

// duration is a vector's seconds (or "second", "minute", ...) as a time.Duration, if Go can
// say it (no NaN, no infinity, within ±292 years).
func duration(v any) (time.Duration, error) {
	if s, ok := v.(string); ok {
		if d, ok := namedIntervals[s]; ok {
			return d, nil
		}
		return 0, errNotExpressible
	}
	f, err := number(v)
	if err != nil || math.IsNaN(f) || math.Abs(f) > float64(math.MaxInt64)/1e9 {
		return 0, errNotExpressible
	}
	return time.Duration(math.Round(f * 1e9)), nil
}

// typedFields are the spec fields each typed constructor takes (besides kind and name).
var typedFields = map[string][]string{
	"concurrent": {"limit", "lock_timeout"}, "bucket": {"limit", "interval"}, "window": {"limit", "interval", "windows"},
	"sliding_window": {"limits"}, "token_bucket": {"rate", "capacity"}, "leaky": {"size", "drain"},
	"points": {"capacity", "refill"}, "calendar": {"limit", "period", "tz", "anchor"}, "unlimited": {},
}

// buildTyped builds a limiter with its kind's typed constructor, or fails with
// errNotExpressible when the spec says something the constructor's types cannot.
func buildTyped(b *Backend, spec map[string]any) (*Limiter, error) {
	kind, _ := spec["kind"].(string)
	name, nameOK := spec["name"].(string)
	fields, known := typedFields[kind]
	if kind == "unlimited" && len(spec) == 1 {
		return Unlimited()
	}
	if !known || !nameOK {
		return nil, errNotExpressible
	}
	for field := range spec {
		if field != "kind" && field != "name" && field != "shadow" && !contains(fields, field) {
			return nil, errNotExpressible
		}
	}
	var firstErr error
	u := func(field string) uint64 {
		v, err := count(spec[field])
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return v
	}
	d := func(v any) time.Duration {
		x, err := duration(v)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return x
	}
	var build func() (*Limiter, error)
	switch kind {
	case "concurrent":
		limit, lock := u("limit"), d(spec["lock_timeout"])
		build = func() (*Limiter, error) { return b.Concurrent(name, limit, lock) }
	case "bucket":
		limit, interval := u("limit"), d(spec["interval"])
		build = func() (*Limiter, error) { return b.Bucket(name, limit, interval) }
	case "window":
		if ws, ok := spec["windows"].([]any); ok {
			var windows []WindowLimit
			for _, w := range ws {
				m, ok := w.(map[string]any)
				if !ok {
					return nil, errNotExpressible
				}
				limit, err := count(m["limit"])
				if err != nil {
					return nil, err
				}
				windows = append(windows, WindowLimit{Limit: limit, Interval: d(m["interval"])})
			}
			build = func() (*Limiter, error) { return b.Windows(name, windows...) }
		} else {
			limit, interval := u("limit"), d(spec["interval"])
			build = func() (*Limiter, error) { return b.Window(name, limit, interval) }
		}
	case "sliding_window":
		ls, ok := spec["limits"].([]any)
		if !ok {
			return nil, errNotExpressible
		}
		var limits []SlidingLimit
		for _, l := range ls {
			t, ok := l.([]any)
			if !ok || len(t) < 2 || len(t) > 3 {
				return nil, errNotExpressible
			}
			limit, err := count(t[1])
			if err != nil {
				return nil, err
			}
			s := SlidingLimit{Duration: d(t[0]), Limit: limit}
			if len(t) == 3 {
				// Go's zero Precision means none (as C's 0 does): an explicit 0, which
				// the spec refuses, can only be said as data.
				if s.Precision = d(t[2]); s.Precision == 0 {
					return nil, errNotExpressible
				}
			}
			limits = append(limits, s)
		}
		build = func() (*Limiter, error) { return b.SlidingWindow(name, limits...) }
	case "token_bucket":
		rate, err := number(spec["rate"])
		if err != nil {
			return nil, err
		}
		capacity := u("capacity")
		build = func() (*Limiter, error) { return b.TokenBucket(name, rate, capacity) }
	case "leaky":
		size, drain := u("size"), d(spec["drain"])
		build = func() (*Limiter, error) { return b.Leaky(name, size, drain) }
	case "points":
		capacity, refill := u("capacity"), d(spec["refill"])
		build = func() (*Limiter, error) { return b.Points(name, capacity, refill) }
	case "calendar":
		period, ok := spec["period"].(string)
		tz, tzOK := spec["tz"].(string)
		if !ok || (!tzOK && spec["tz"] != nil) {
			return nil, errNotExpressible
		}
		var opts []CalendarOption
		if tzOK {
			opts = append(opts, InZone(tz))
		}
		if spec["anchor"] != nil {
			anchor := u("anchor")
			if anchor > math.MaxInt32 {
				return nil, errNotExpressible
			}
			opts = append(opts, AnchoredOn(int(anchor)))
		}
		limit := u("limit")
		build = func() (*Limiter, error) { return b.Calendar(name, limit, period, opts...) }
	case "unlimited":
		build = Unlimited
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return build()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// buildLimiter builds one of a case's limiters: typed when Go can say the spec, else from the
// spec as data; shadow mode through WithShadow.
func buildLimiter(b *Backend, spec map[string]any) (lim *Limiter, asData bool, err error) {
	lim, err = buildTyped(b, spec)
	if errors.Is(err, errNotExpressible) {
		asData = true
		name, _ := spec["name"].(string)
		data := map[string]any{}
		for k, v := range spec {
			if k != "name" {
				data[k] = v
			}
		}
		js, _ := json.Marshal(data)
		lim, err = b.FromSpec(name, string(js))
		return lim, asData, err
	}
	if err == nil && spec["shadow"] == true {
		lim, err = lim.WithShadow(true)
	}
	return lim, asData, err
}

// keyOf is a step's key: a string, absent (the shared key) or {"repeat": S, "times": N}.
func keyOf(step map[string]any) string {
	switch k := step["key"].(type) {
	case string:
		return k
	case map[string]any:
		times, _ := count(k["times"])
		return strings.Repeat(k["repeat"].(string), int(times))
	}
	return ""
}

// errorKind is the vectors' name of an error's kind.
func errorKind(err error) string {
	for _, k := range []struct {
		sentinel error
		name     string
	}{{ErrOverLimit, "over_limit"}, {ErrShed, "shed"}, {ErrLeaseLost, "lease_lost"}, {ErrInvalidArgument, "invalid_argument"},
		{ErrTimeout, "timeout"}, {ErrUnavailable, "backend_unavailable"}} {
		if errors.Is(err, k.sentinel) {
			return k.name
		}
	}
	return err.Error()
}

// A spec as data names a field by its path (`limits[1][1]`, `windows[1].limit`); the typed
// constructors by its name.
var (
	slidingPath = regexp.MustCompile(`^limits\[\d+\]\[(\d)\]$`)
	fieldPath   = regexp.MustCompile(`^\w+\[\d+\]\.(\w+)$`)
)

func fieldName(parameter string) string {
	if m := slidingPath.FindStringSubmatch(parameter); m != nil {
		return []string{"duration", "limit", "precision"}[m[1][0]-'0']
	}
	if m := fieldPath.FindStringSubmatch(parameter); m != nil {
		return m[1]
	}
	return parameter
}

func checkError(t *testing.T, where string, want map[string]any, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: expected error %v, got success", where, want)
	}
	if got := errorKind(err); got != want["kind"] {
		t.Fatalf("%s: expected a %v error, got %s (%v)", where, want["kind"], got, err)
	}
	var e *Error
	if want["kind"] == "invalid_argument" && errors.As(err, &e) && e.Parameter != want["parameter"] && fieldName(e.Parameter) != want["parameter"] {
		t.Fatalf("%s: expected the error to name %v, it names %q (%v)", where, want["parameter"], e.Parameter, err)
	}
}

// decisionMap is a decision in the vectors' form, with the fields expect asks about.
func decisionMap(d Decision, expect map[string]any) map[string]any {
	m := map[string]any{
		"allowed": d.Allowed, "limit": json.Number(strconv.FormatUint(d.Limit, 10)),
		"remaining":      json.Number(strconv.FormatUint(d.Remaining, 10)),
		"retry_after_us": json.Number(strconv.FormatInt(d.RetryAfter.Microseconds(), 10)),
		"reset_after_us": json.Number(strconv.FormatInt(d.ResetAfter.Microseconds(), 10)),
	}
	if _, ok := expect["fencing_token"]; ok && d.Lease != nil {
		m["fencing_token"] = json.Number(strconv.FormatUint(d.Lease.FencingToken(), 10))
	}
	if d.ShadowRefused {
		m["shadow_refused"] = true
	}
	return m
}

func checkDecision(t *testing.T, where string, expect map[string]any, d Decision) {
	t.Helper()
	want := map[string]any{}
	for k, v := range expect {
		if k != "limits" { // per-limit details: the C ABI's decision has none
			want[k] = v
		}
	}
	if got := decisionMap(d, want); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %v\n want %v", where, got, want)
	}
}

// vectorStats counts what the runner could not say with Go's types.
type vectorStats struct{ cases, asData, skippedSteps int }

func runCase(t *testing.T, c vectorCase, backendKind string, stats *vectorStats) {
	clock, err := NewManualClock(time.UnixMicro(c.StartUs))
	if err != nil {
		t.Fatal(err)
	}
	defer clock.Close()
	b := backendOf(t, backendKind, WithClock(clock))
	defer b.Close() // before the clock's
	stats.cases++

	ids := make([]string, 0, len(c.Limiters))
	for id := range c.Limiters {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	built := map[string]*Limiter{}
	var buildErr error
	var buildID string
	for _, id := range ids {
		lim, asData, err := buildLimiter(b, c.Limiters[id])
		if asData {
			stats.asData++
		}
		if err != nil {
			if buildErr == nil {
				buildErr, buildID = err, id
			}
			continue
		}
		defer lim.Close()
		built[id] = lim
	}
	if c.LimiterError != nil {
		checkError(t, "building "+buildID, c.LimiterError, buildErr)
		return
	}
	if buildErr != nil {
		t.Fatalf("building %s: %v", buildID, buildErr)
	}

	ctx := context.Background()
	leases := map[string]*Lease{}
	decisions := map[string]Decision{}
	for i, step := range c.Steps {
		op := step["op"].(string)
		where := fmt.Sprintf("step %d: %s on %v", i, op, step["limiter"])
		if op == "advance" {
			us, _ := count(step["us"])
			if err := clock.AdvanceMicros(us); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if op == "check_all" {
			if !checkAllStep(t, ctx, b, built, step, where, leases) {
				stats.skippedSteps++
			}
			continue
		}
		lim := built[step["limiter"].(string)]
		key := keyOf(step)
		var d Decision
		var err error
		expressible := true
		u := func(field string, dflt uint64) uint64 {
			if _, ok := step[field]; !ok {
				return dflt
			}
			v, e := count(step[field])
			if e != nil {
				expressible = false
			}
			return v
		}
		switch op {
		case "check":
			cost := u("cost", 1)
			if expressible {
				d, err = lim.CheckN(ctx, key, cost)
			}
		case "peek":
			d, err = lim.Peek(ctx, key)
		case "reset":
			err = lim.Reset(ctx, key)
		case "points_used":
			estimate, actual := u("estimate", 0), u("actual", 0)
			if expressible {
				d, err = lim.PointsUsed(ctx, key, estimate, actual)
			}
		case "release":
			err = lim.release(key, leases[step["lease"].(string)])
		case "block":
			dur, e := duration(step["seconds"])
			if expressible = e == nil; expressible {
				_, err = lim.Block(ctx, key, dur)
			}
		case "unblock":
			_, err = lim.Unblock(ctx, key)
		case "settle":
			actual := u("actual", 0)
			if expressible {
				d, err = lim.Settle(ctx, decisions[step["decision"].(string)], actual)
			}
		default:
			t.Fatalf("%s: unknown op", where)
		}
		if !expressible {
			if _, ok := step["error"]; !ok {
				t.Fatalf("%s: Go cannot say this step's values, and it expects success", where)
			}
			stats.skippedSteps++
			continue
		}
		if want, ok := step["error"].(map[string]any); ok {
			checkError(t, where, want, err)
			continue
		}
		if err != nil {
			t.Fatalf("%s: expected success, got %v", where, err)
		}
		expect, ok := step["expect"].(map[string]any)
		if !ok {
			continue
		}
		checkDecision(t, where, expect, d)
		if name, ok := step["save_decision"].(string); ok {
			decisions[name] = d
		}
		if name, ok := step["save_lease"].(string); ok {
			if d.Lease == nil {
				t.Fatalf("%s: expected a lease to save", where)
			}
			leases[name] = d.Lease
		}
	}
}

// checkAllStep runs a check_all step; false when Go cannot say its values (it then expects an
// error and is skipped).
func checkAllStep(t *testing.T, ctx context.Context, b *Backend, built map[string]*Limiter, step map[string]any, where string, leases map[string]*Lease) bool {
	t.Helper()
	var parts []Part
	for _, p := range step["parts"].([]any) {
		pm := p.(map[string]any)
		cost := uint64(1)
		if _, ok := pm["cost"]; ok {
			c, err := count(pm["cost"])
			if err != nil {
				if _, ok := step["error"]; !ok {
					t.Fatalf("%s: Go cannot say a part's cost, and the step expects success", where)
				}
				return false
			}
			cost = c
		}
		parts = append(parts, Part{Limiter: built[pm["limiter"].(string)], Key: keyOf(pm), Cost: cost})
	}
	all, err := b.CheckAll(ctx, parts...)
	if want, ok := step["error"].(map[string]any); ok {
		checkError(t, where, want, err)
		return true
	}
	if err != nil {
		t.Fatalf("%s: expected success, got %v", where, err)
	}
	expect := step["expect"].(map[string]any)
	got := map[string]any{"allowed": all.Allowed, "retry_after_us": json.Number(strconv.FormatInt(all.RetryAfter.Microseconds(), 10))}
	want := map[string]any{"allowed": expect["allowed"], "retry_after_us": expect["retry_after_us"]}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: got %v, want %v", where, got, want)
	}
	wantParts := expect["parts"].([]any)
	if len(wantParts) != len(all.Parts) {
		t.Fatalf("%s: %d decisions for %d parts", where, len(all.Parts), len(wantParts))
	}
	var saved []*Lease
	for i, wp := range wantParts {
		d := all.Parts[i]
		wantsLease := all.Allowed && parts[i].Limiter.Kind() == "concurrent"
		if wantsLease != (d.Lease != nil) {
			t.Fatalf("%s: parts[%d]: lease present %v, want %v", where, i, d.Lease != nil, wantsLease)
		}
		checkDecision(t, fmt.Sprintf("%s: parts[%d]", where, i), wp.(map[string]any), d)
		if d.Lease != nil {
			saved = append(saved, d.Lease)
		}
	}
	if names, ok := step["save_leases"].([]any); ok {
		if len(names) != len(saved) {
			t.Fatalf("%s: %d leases to save, %d granted", where, len(names), len(saved))
		}
		for i, n := range names {
			leases[n.(string)] = saved[i]
		}
	}
	return true
}

// loadVectors reads every case, with its file's name.
func loadVectors(t *testing.T) (names []string, cases []vectorCase) {
	files, _ := filepath.Glob("../tests/vectors/*.json")
	more, _ := filepath.Glob("../tests/vectors/check_all/*.json")
	for _, path := range append(files, more...) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(f)
		dec.UseNumber()
		var file struct{ Cases []vectorCase }
		if err := dec.Decode(&file); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		f.Close()
		base := strings.TrimSuffix(filepath.Base(path), ".json")
		for _, c := range file.Cases {
			names = append(names, base)
			cases = append(cases, c)
		}
	}
	return names, cases
}

var nonWord = regexp.MustCompile(`[^A-Za-z0-9]+`)

func TestVectors(t *testing.T) {
	names, cases := loadVectors(t)
	if len(cases) < 120 {
		t.Fatalf("the vectors directory holds too few cases: %d", len(cases))
	}
	backends := []string{"memory", "redis", "cluster"}
	if os.Getenv("RK_GO_SKIP_CLUSTER") == "1" {
		backends = backends[:2]
	}
	for _, backend := range backends {
		backend := backend
		t.Run(backend, func(t *testing.T) {
			var stats vectorStats
			for i, c := range cases {
				c := c
				t.Run(fmt.Sprintf("%s_%d_%s", names[i], i, nonWord.ReplaceAllString(c.Name, "_")), func(t *testing.T) {
					runCase(t, c, backend, &stats)
				})
			}
			t.Logf("%s: %d cases; %d limiters built from their spec as data (values Go's types cannot say), %d steps skipped",
				backend, stats.cases, stats.asData, stats.skippedSteps)
			// The bound: what the vectors hold today (bad_input.json's limits of -1 or 1.5,
			// NaN and named-but-unknown intervals; costs of -1 or 1.5). More means a new
			// vector Go cannot say: look at it.
			if stats.asData > 40 || stats.skippedSteps > 21 {
				t.Errorf("too many vectors Go's types cannot say: %d limiters as data, %d steps skipped", stats.asData, stats.skippedSteps)
			}
		})
	}
}
