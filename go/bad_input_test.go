package ratekeeper

// The shared bad-input table (tests/bad_input/cases.json) through the module: each case makes
// one call with one bad argument, which must fail with ErrInvalidArgument naming the table's Go
// parameter (its `go` column), and write nothing (a refused limiter call leaves the shared key
// and key "k" as they were; a refused set_limit leaves no override).
//
// What Go's types cannot say (a string where the signature takes a uint64 or a time.Duration,
// -1 for a uint64, NaN for a duration, nil for a string, an option the module does not have:
// Go waits by context, not by a wait_timeout) is skipped, saying why, never guessed; the
// number skipped is bounded below so that a new case Go could say is not skipped silently.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

type badCase struct {
	Name      string            `json:"name"`
	Call      string            `json:"call"`
	Args      map[string]any    `json:"args"`
	Limiter   map[string]any    `json:"limiter"`
	Error     string            `json:"error"`
	Parameter map[string]string `json:"parameter"`
	Skip      map[string]string `json:"skip"`
}

// skipError says why Go cannot express a case.
type skipError string

func (s skipError) Error() string { return string(s) }

func cannot(format string, args ...any) error { return skipError(fmt.Sprintf(format, args...)) }

// str is a table value as a Go string: {"lone_surrogate": S} is S followed by the bytes
// ED A0 80 (no UTF-8 string holds a lone surrogate; the library reports the bytes).
func str(v any, param string) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case map[string]any:
		if s, ok := x["lone_surrogate"].(string); ok {
			return s + "\xed\xa0\x80", nil
		}
		if s, ok := x["repeat"].(string); ok {
			n, _ := count(x["times"])
			return strings.Repeat(s, int(n)), nil
		}
	}
	return "", cannot("Go's %s is a string: %v cannot be passed", param, v)
}

// u64 is a table value as a uint64.
// strs is a []string parameter (seeds, sentinels), or why Go cannot pass v as one.
func strs(v any, param string) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, cannot("Go's %s are a []string: %v cannot be passed", param, v)
	}
	out := []string{}
	for _, item := range list {
		s, err := str(item, param+"[i]")
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func u64(v any, param string) (uint64, error) {
	n, err := count(v)
	if err != nil {
		return 0, cannot("Go's %s is a uint64: %v cannot be passed", param, v)
	}
	return n, nil
}

// special is the table's {"number": "NaN"} spelling, as a vector's "NaN".
func special(v any) any {
	if m, ok := v.(map[string]any); ok {
		if n, ok := m["number"]; ok {
			return n
		}
	}
	return v
}

// dur is a table value (seconds) as a time.Duration.
func dur(v any, param string) (time.Duration, error) {
	d, err := duration(special(v))
	if err != nil {
		return 0, cannot("Go's %s is a time.Duration: %v cannot be passed", param, v)
	}
	return d, nil
}

// backendOptions turns a redis / cluster case's options into Options.
func backendOptions(a map[string]any) ([]Option, error) {
	var opts []Option
	if p, ok := a["fallback_divisor"]; ok {
		if a["failure_policy"] != "fallback" {
			return nil, cannot("Go's divisor is part of the policy (WithFallback): it cannot be given without it")
		}
		n, err := u64(p, "divisor")
		if err != nil || n > math.MaxUint32 {
			return nil, cannot("Go's divisor is a uint32: %v cannot be passed", p)
		}
		opts = append(opts, WithFallback(uint32(n)))
	} else if p, ok := a["failure_policy"]; ok {
		s, err := str(p, "policy")
		if err != nil {
			return nil, err
		}
		opts = append(opts, WithFailurePolicy(FailurePolicy(s)))
	}
	for field, v := range a {
		var opt Option
		var err error
		switch field {
		case "url", "seeds", "sentinels", "service", "failure_policy", "fallback_divisor":
			continue
		case "replica_acks":
			var n uint64
			n, err = u64(v, field)
			if err == nil && n > math.MaxUint32 {
				err = cannot("Go's replica_acks is a uint32: %v cannot be passed", v)
			}
			opt = WithReplicaAcks(uint32(n))
		case "prefix", "tls_ca_file", "tls_ca_data":
			var s string
			s, err = str(v, field)
			opt = map[string]func(string) Option{"prefix": WithPrefix, "tls_ca_file": WithTLSCAFile, "tls_ca_data": WithTLSCAData}[field](s)
		case "tls_cert_file":
			var s string
			s, err = str(v, field)
			key, _ := a["tls_key_file"].(string)
			opt = WithTLSClientCert(s, key)
		case "deadline", "connect_timeout":
			var d time.Duration
			d, err = dur(v, field)
			opt = map[string]func(time.Duration) Option{"deadline": WithDeadline, "connect_timeout": WithConnectTimeout}[field](d)
		case "deny_cache":
			on, ok := v.(bool)
			if !ok {
				return nil, cannot("Go's deny cache is a bool: %v cannot be passed", v)
			}
			opt = WithDenyCache(on)
		case "deny_cache_max_entries":
			var n uint64
			n, err = u64(v, field)
			opt = WithDenyCacheMaxEntries(n)
		default:
			return nil, cannot("the module has no option %s", field)
		}
		if err != nil {
			return nil, err
		}
		opts = append(opts, opt)
	}
	return opts, nil
}

// specText is a table spec (an object, or JSON text as it is) as JSON text.
func specText(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	if v == nil {
		return "", cannot("Go's spec is a string: nil cannot be passed")
	}
	js, err := json.Marshal(fixNumbers(v))
	return string(js), err
}

// fixNumbers turns the table's {"number": ...} spellings back into JSON's (specs carry them
// as strings, which the library refuses naming the field).
func fixNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if n, ok := x["number"]; ok && len(x) == 1 {
			return n
		}
		out := map[string]any{}
		for k, e := range x {
			out[k] = fixNumbers(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = fixNumbers(e)
		}
		return out
	}
	return v
}

// constructor makes a limiter-constructor case's call.
func constructor(b *Backend, call string, a map[string]any) error {
	name, err := str(a["name"], "name")
	if call == "unlimited" {
		return cannot("Unlimited takes no name")
	}
	if err != nil {
		return err
	}
	var first error
	keep := func(e error) {
		if first == nil {
			first = e
		}
	}
	u := func(field string) uint64 {
		n, e := u64(a[field], field)
		keep(e)
		return n
	}
	d := func(field string) time.Duration {
		x, e := dur(a[field], field)
		keep(e)
		return x
	}
	var build func() error
	switch call {
	case "bucket", "window":
		limit, interval := u("limit"), d("interval")
		build = func() error {
			if call == "bucket" {
				_, err := b.Bucket(name, limit, interval)
				return err
			}
			_, err := b.Window(name, limit, interval)
			return err
		}
	case "windows":
		list, ok := a["windows"].([]any)
		if !ok {
			return cannot("Go's windows are WindowLimit values: %v cannot be passed", a["windows"])
		}
		var ws []WindowLimit
		for _, w := range list {
			pair, ok := w.([]any)
			if !ok || len(pair) != 2 {
				return cannot("a WindowLimit has two fields, the table gives %v", w)
			}
			limit, e := u64(pair[0], "limit")
			keep(e)
			interval, e := dur(pair[1], "interval")
			keep(e)
			ws = append(ws, WindowLimit{limit, interval})
		}
		build = func() error { _, err := b.Windows(name, ws...); return err }
	case "sliding_window":
		list, ok := a["limits"].([]any)
		if !ok {
			return cannot("Go's limits are SlidingLimit values: %v cannot be passed", a["limits"])
		}
		var ls []SlidingLimit
		for _, l := range list {
			t, ok := l.([]any)
			if !ok || len(t) < 2 || len(t) > 3 {
				return cannot("a SlidingLimit has three fields, the table gives %v", l)
			}
			var s SlidingLimit
			var e error
			s.Duration, e = dur(t[0], "duration")
			keep(e)
			s.Limit, e = u64(t[1], "limit")
			keep(e)
			if len(t) == 3 {
				s.Precision, e = dur(t[2], "precision")
				keep(e)
			}
			ls = append(ls, s)
		}
		build = func() error { _, err := b.SlidingWindow(name, ls...); return err }
	case "token_bucket":
		rate, e := number(special(a["rate"]))
		if e != nil {
			return cannot("Go's rate is a float64: %v cannot be passed", a["rate"])
		}
		capacity := u("capacity")
		build = func() error { _, err := b.TokenBucket(name, rate, capacity); return err }
	case "leaky":
		size, drain := u("size"), d("drain")
		build = func() error { _, err := b.Leaky(name, size, drain); return err }
	case "points":
		capacity, refill := u("capacity"), d("refill")
		build = func() error { _, err := b.Points(name, capacity, refill); return err }
	case "concurrent":
		for _, f := range []string{"wait_timeout", "allow_fallback"} {
			if _, ok := a[f]; ok {
				return cannot("Concurrent has no %s (Go waits by context; WithAllowFallback takes a bool)", f)
			}
		}
		lock := 30 * time.Second
		if _, ok := a["lock_timeout"]; ok {
			lock = d("lock_timeout")
		}
		limit := u("limit")
		build = func() error { _, err := b.Concurrent(name, limit, lock); return err }
	case "calendar":
		period, e := str(a["period"], "period")
		keep(e)
		var opts []CalendarOption
		if tz, ok := a["tz"]; ok {
			s, e := str(tz, "tz")
			keep(e)
			opts = append(opts, InZone(s))
		}
		if an, ok := a["anchor"]; ok {
			n, e := u64(an, "anchor")
			keep(e)
			opts = append(opts, AnchoredOn(int(n)))
		}
		limit := u("limit")
		build = func() error { _, err := b.Calendar(name, limit, period, opts...); return err }
	case "limiter":
		spec, e := specText(a["spec"])
		if e != nil {
			return e
		}
		build = func() error { _, err := b.FromSpec(name, spec); return err }
	default:
		return cannot("unknown constructor %s", call)
	}
	if first != nil {
		return first
	}
	return build()
}

// limiterCall makes a call on a limiter built from the case's spec; it returns the error and
// the limiter (to check that nothing was written).
func limiterCall(t *testing.T, b *Backend, c badCase) (*Limiter, error) {
	spec, _ := specText(c.Limiter)
	lim, err := b.FromSpec("bad", spec)
	if err != nil {
		t.Fatalf("building the case's limiter: %v", err)
	}
	a := c.Args
	ctx := context.Background()
	key := ""
	if k, ok := a["key"]; ok && k != nil {
		if key, err = str(k, "key"); err != nil {
			return lim, err
		}
	}
	switch c.Call {
	case "check", "acquire":
		cost := uint64(1)
		if v, ok := a["cost"]; ok {
			if cost, err = u64(v, "cost"); err != nil {
				return lim, err
			}
		}
		if c.Call == "acquire" {
			if w, ok := a["wait_timeout"]; ok && w != json.Number("0") {
				return lim, cannot("Go waits until the context is done: a wait_timeout of %v cannot be passed", w)
			}
		}
		_, err = lim.CheckN(ctx, key, cost)
	case "peek":
		_, err = lim.Peek(ctx, key)
	case "reset":
		err = lim.Reset(ctx, key)
	case "resume":
		_, err = lim.Resume(ctx, key)
	case "unblock":
		_, err = lim.Unblock(ctx, key)
	case "points_used":
		estimate, e1 := u64(a["estimate"], "estimate")
		actual, e2 := u64(a["actual"], "actual")
		if e1 != nil {
			return lim, e1
		}
		if e2 != nil {
			return lim, e2
		}
		_, err = lim.PointsUsed(ctx, key, estimate, actual)
	case "pause", "block":
		d, e := dur(a["duration"], "duration")
		if e != nil {
			return lim, e
		}
		if c.Call == "pause" {
			_, err = lim.Pause(ctx, key, d)
		} else {
			_, err = lim.Block(ctx, key, d)
		}
	case "with_max_pause", "with_block_for":
		field := map[string]string{"with_max_pause": "max_pause", "with_block_for": "block_for"}[c.Call]
		d, e := dur(a[field], field)
		if e != nil {
			return lim, e
		}
		if c.Call == "with_max_pause" {
			_, err = lim.WithMaxPause(d)
		} else {
			_, err = lim.WithBlockFor(d)
		}
	case "with_deny_cache", "with_shadow":
		return lim, cannot("Go's %s takes a bool: %v cannot be passed", c.Call, a)
	case "observe":
		if _, ok := a["max_pause"]; ok {
			return lim, cannot("Go bounds pauses per limiter (WithMaxPause); Observe has no max_pause")
		}
		status, e := count(a["status"])
		if e != nil {
			if s := string(a["status"].(json.Number)); strings.HasPrefix(s, "-") && !strings.Contains(s, ".") {
				var n int
				fmt.Sscan(s, &n)
				_, err = lim.Observe(ctx, key, n, nil)
				break
			}
			return lim, cannot("Go's status is an int: %v cannot be passed", a["status"])
		}
		list, ok := a["headers"].([]any)
		if !ok {
			return lim, cannot("Go's headers are an http.Header: %v cannot be passed", a["headers"])
		}
		h := http.Header{}
		for _, p := range list {
			pair := p.([]any)
			h.Add(pair[0].(string), pair[1].(string))
		}
		_, err = lim.Observe(ctx, key, int(status), h)
	case "settle":
		actual, e := u64(a["actual"], "actual")
		if e != nil {
			return lim, e
		}
		var d Decision
		switch which := a["decision"]; which {
		case "check":
			d, err = lim.CheckN(ctx, "", 0)
		case "peek":
			d, err = lim.Peek(ctx, "")
		case "other_limiter":
			other, e := b.FromSpec("other", spec)
			if e != nil {
				t.Fatal(e)
			}
			d, err = other.CheckN(ctx, "", 0)
		default:
			return lim, cannot("Go's decision is a Decision: %v cannot be passed", which)
		}
		if err != nil {
			t.Fatalf("making the decision to settle: %v", err)
		}
		_, err = lim.Settle(ctx, d, actual)
	case "within_limit", "with_wait_timeout":
		return lim, cannot("the module has no %s (Go waits by context: Wait, Acquire)", c.Call)
	default:
		t.Fatalf("unknown call %s", c.Call)
	}
	return lim, err
}

// checkAllCall makes a check_all case's call, each part's limiter built on one backend (or, for
// `other_backend`, on another).
func checkAllCall(t *testing.T, b *Backend, a map[string]any, acquire bool) error {
	other := memory(t)
	var parts []Part
	for i, p := range a["parts"].([]any) {
		pm := p.(map[string]any)
		on := b
		if pm["other_backend"] == true {
			on = other
		}
		spec, _ := specText(pm["limiter"])
		lim, err := on.FromSpec(fmt.Sprintf("part%d", i), spec)
		if err != nil {
			t.Fatalf("parts[%d]: %v", i, err)
		}
		key, err := str(pm["key"], "key")
		if err != nil {
			return err
		}
		cost, err := u64(pm["cost"], "cost")
		if err != nil {
			return err
		}
		parts = append(parts, Part{lim, key, cost})
	}
	if acquire {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := b.AcquireAll(ctx, parts...)
		return err
	}
	_, err := b.CheckAll(context.Background(), parts...)
	return err
}

// integer is a table value as a Go int (max_reschedules, attempt), or why Go cannot pass it.
func integer(v any, param string) (int, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, cannot("Go's %s is an int: %v cannot be passed", param, v)
	}
	i, err := strconv.Atoi(string(n))
	if err != nil {
		return 0, cannot("Go's %s is an int: %v cannot be passed", param, v)
	}
	return i, nil
}

// backoffCall makes a backoff or reschedule_in case's call (seconds in the table are
// time.Durations here).
func backoffCall(call string, a map[string]any) error {
	var opts []BackoffOption
	if call == "backoff" {
		for field, v := range a {
			switch field {
			case "base", "jitter":
				d, err := dur(v, field)
				if err != nil {
					return err
				}
				if field == "base" {
					opts = append(opts, BackoffBase(d))
				} else {
					opts = append(opts, BackoffJitter(d))
				}
			case "max_reschedules":
				n, err := integer(v, field)
				if err != nil {
					return err
				}
				opts = append(opts, BackoffMaxReschedules(n))
			default:
				return cannot("NewBackoff has no option %s", field)
			}
		}
	}
	b, err := NewBackoff(opts...)
	if err != nil || call == "backoff" {
		return err
	}
	defer b.Close()
	attempt, err := integer(a["attempt"], "attempt")
	if err != nil {
		return err
	}
	var retryAfter time.Duration
	if v, ok := a["retry_after"]; ok {
		if retryAfter, err = dur(v, "retry_after"); err != nil {
			return err
		}
	}
	_, _, err = b.RescheduleIn(attempt, retryAfter)
	return err
}

// runBadCase makes a case's call; a skipError says why Go cannot.
func runBadCase(t *testing.T, c badCase) error {
	a := c.Args
	switch c.Call {
	case "memory":
		n, err := u64(a["max_keys"], "max_keys")
		if err != nil {
			return err
		}
		_, err = NewMemory(WithMaxKeys(n))
		return err
	case "sentinel":
		opts, err := backendOptions(a)
		if err != nil {
			return err
		}
		sentinels, err := strs(a["sentinels"], "sentinels")
		if err != nil {
			return err
		}
		service, err := str(a["service"], "service")
		if err != nil {
			return err
		}
		_, err = NewSentinel(sentinels, service, opts...)
		return err
	case "redis", "cluster":
		opts, err := backendOptions(a)
		if err != nil {
			return err
		}
		if c.Call == "redis" {
			url, err := str(a["url"], "url")
			if err != nil {
				return err
			}
			_, err = NewRedis(url, opts...)
			return err
		}
		seeds, err := strs(a["seeds"], "seeds")
		if err != nil {
			return err
		}
		_, err = NewCluster(seeds, opts...)
		return err
	case "manual_clock":
		us, ok := a["start_us"].(json.Number)
		if !ok {
			return cannot("Go's start is a time.Time")
		}
		n, _ := us.Int64()
		_, err := NewManualClock(time.UnixMicro(n))
		return err
	case "advance":
		d, err := dur(a["seconds"], "by")
		if err != nil {
			return err
		}
		clock, err := NewManualClock(time.Unix(1700000000, 0))
		if err != nil {
			t.Fatal(err)
		}
		defer clock.Close()
		return clock.Advance(d)
	case "backoff", "reschedule_in":
		return backoffCall(c.Call, a)
	case "http_middleware":
		return middlewareCase(t, a["options"].(map[string]any))
	case "set_limit", "clear_limit":
		b := memory(t)
		name, err := str(a["name"], "name")
		if err != nil {
			return err
		}
		key := ""
		if k, ok := a["key"]; ok {
			if key, err = str(k, "key"); err != nil {
				return err
			}
		}
		if c.Call == "clear_limit" {
			return b.ClearLimit(name, key)
		}
		spec, err := specText(a["spec"])
		if err != nil {
			return err
		}
		err = b.SetLimit(name, spec, key)
		if js, e := b.LimitersJSON(); e != nil || strings.Contains(string(js), `"overrides":[{`) {
			t.Errorf("a refused set_limit left an override: %s", js)
		}
		return err
	case "check_all":
		// The same parts through AcquireAll, which validates them alike, then CheckAll.
		if err := checkAllCall(t, memory(t), a, true); !errors.Is(err, ErrInvalidArgument) {
			if _, skipped := err.(skipError); !skipped {
				t.Errorf("AcquireAll took what CheckAll refuses: %v", err)
			}
		}
		return checkAllCall(t, memory(t), a, false)
	}
	if c.Limiter == nil {
		return constructor(memory(t), c.Call, a)
	}
	clock, err := NewManualClock(time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer clock.Close()
	b, err := NewMemory(WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	probe, err := b.FromSpec("bad", mustSpec(c.Limiter))
	if err != nil {
		t.Fatal(err)
	}
	before := peekBoth(t, probe)
	_, err = limiterCall(t, b, c)
	if _, skipped := err.(skipError); !skipped {
		if after := peekBoth(t, probe); !reflect.DeepEqual(before, after) {
			t.Errorf("a refused %s changed the limiter's state: %v then %v", c.Call, before, after)
		}
	}
	return err
}

// middlewareCase builds the middleware with a case's options (Node's names: the table's
// option objects are Node's and Python's); what a MiddlewareOptions field cannot hold is
// skipped.
func middlewareCase(t *testing.T, o map[string]any) error {
	var lim *Limiter
	if spec, ok := o["limiter"]; ok {
		m, ok := spec.(map[string]any)
		if !ok {
			return cannot("Go's limiter is a *Limiter: %v cannot be passed", spec)
		}
		var err error
		if lim, err = memory(t).FromSpec("api", mustSpec(m)); err != nil {
			t.Fatal(err)
		}
	}
	var opts MiddlewareOptions
	for name, v := range o {
		var ok bool
		switch name {
		case "limiter":
			ok = true
		case "cost":
			if v == json.Number("0") {
				return cannot("Go's zero Cost is the default, 1")
			}
			n, err := u64(v, "Cost")
			if err != nil {
				return err
			}
			opts.Cost, ok = n, true
		case "count":
			opts.Count, ok = v.(string)
		case "standardHeaders":
			var s string
			s, ok = v.(string)
			opts.Headers = HeaderForm(s)
		case "trustedProxies":
			var list []any
			if list, ok = v.([]any); ok {
				for _, x := range list {
					s, isStr := x.(string)
					ok = ok && isStr
					opts.TrustedProxies = append(opts.TrustedProxies, s)
				}
			}
		case "proxyHeader":
			opts.ProxyHeader, ok = v.(string)
		case "partitionKeySecret":
			var s string
			s, ok = v.(string)
			opts.PartitionKeySecret = []byte(s)
		}
		if !ok {
			return cannot("MiddlewareOptions cannot hold %s: %v", name, v)
		}
	}
	_, err := NewMiddleware(lim, opts)
	return err
}

func mustSpec(v any) string {
	s, _ := specText(v)
	return s
}

// peekBoth is what the shared key and key "k" say now.
func peekBoth(t *testing.T, lim *Limiter) [2]Decision {
	var out [2]Decision
	for i, key := range []string{"", "k"} {
		d, err := lim.Peek(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		d.ticket, d.Lease = out[i].ticket, nil
		out[i] = d
	}
	return out
}

func TestBadInput(t *testing.T) {
	raw, err := os.ReadFile("../tests/bad_input/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var table struct{ Cases []badCase }
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&table); err != nil {
		t.Fatal(err)
	}
	skipped := 0
	for _, c := range table.Cases {
		c := c
		t.Run(nonWord.ReplaceAllString(c.Name, "_"), func(t *testing.T) {
			if why, ok := c.Skip["go"]; ok {
				skipped++
				t.Skip(why)
			}
			err := runBadCase(t, c)
			var why skipError
			if errors.As(err, &why) {
				skipped++
				t.Skip(string(why))
			}
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("want ErrInvalidArgument naming %s, got %v", c.Parameter["go"], err)
			}
			var e *Error
			if !errors.As(err, &e) || e.Parameter != c.Parameter["go"] {
				t.Fatalf("want the error to name %s: %v", c.Parameter["go"], err)
			}
			if !strings.Contains(e.Error(), "`"+c.Parameter["go"]+"`") {
				t.Fatalf("the message does not name %s: %v", c.Parameter["go"], err)
			}
		})
	}
	t.Logf("%d cases, %d skipped (Go's types cannot say them)", len(table.Cases), skipped)
	// Today: 2 Backoff (a NaN jitter and attempt 1.5: a time.Duration and an int cannot say
	// them), 7 rate strings (the module takes a count and a time.Duration), the rest values of
	// another type or options Go has not.
	if skipped > 104 {
		t.Errorf("%d cases skipped: more than the bound", skipped)
	}
}
