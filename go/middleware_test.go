package ratekeeper

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A real net/http server with the middleware on a real Redis, hit by several client processes
// (testdata/http_client.py) whose rate-limit fields are parsed by http-sfv: exact 200/429
// counts, and every field as the draft says. RK_TEST_PYTHON is a Python with http-sfv
// (scripts/test-go sets it to the workspace venv's).
func TestMiddlewareBehindARealServerWithClientProcesses(t *testing.T) {
	python := os.Getenv("RK_TEST_PYTHON")
	if python == "" {
		t.Skip("RK_TEST_PYTHON (a Python with http-sfv) is not set: scripts/test-go sets it")
	}
	b := redisBackend(t)
	lim := must[*Limiter](t)(b.Window("api", 30, time.Hour))
	server := httptest.NewServer(Middleware(lim, MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})))
	defer server.Close()

	type response struct {
		Status      int                 `json:"status"`
		ContentType string              `json:"content_type"`
		RetryAfter  string              `json:"retry_after"`
		RateLimit   [][]json.RawMessage `json:"RateLimit"`
		Policy      [][]json.RawMessage `json:"RateLimit-Policy"`
		Body        map[string]any      `json:"body"`
	}
	var mu sync.Mutex
	var responses []response
	var wg sync.WaitGroup
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := exec.Command(python, "testdata/http_client.py", server.URL, "15").Output()
			if err != nil {
				t.Errorf("client process: %v", err)
				return
			}
			scanner := bufio.NewScanner(bytes.NewReader(out))
			for scanner.Scan() {
				var r response
				if err := json.Unmarshal(scanner.Bytes(), &r); err != nil {
					t.Errorf("client output %q: %v", scanner.Text(), err)
					return
				}
				mu.Lock()
				responses = append(responses, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(responses) != 60 {
		t.Fatalf("%d responses, want 60", len(responses))
	}
	type params struct {
		Q, W, R, T *int64
	}
	parse := func(field [][]json.RawMessage) (string, params) {
		if len(field) != 1 || len(field[0]) != 2 {
			t.Fatalf("want one list member, got %s", field)
		}
		var name string
		var p params
		json.Unmarshal(field[0][0], &name)
		var raw map[string]int64
		json.Unmarshal(field[0][1], &raw)
		get := func(k string) *int64 {
			if v, ok := raw[k]; ok {
				return &v
			}
			return nil
		}
		p.Q, p.W, p.R, p.T = get("q"), get("w"), get("r"), get("t")
		return name, p
	}
	var remaining []int
	refused := 0
	for _, r := range responses {
		name, pol := parse(r.Policy)
		if name != "api" || pol.Q == nil || *pol.Q != 30 || pol.W == nil || *pol.W != 3600 {
			t.Fatalf("RateLimit-Policy: %s", r.Policy)
		}
		name, state := parse(r.RateLimit)
		if name != "api" || state.R == nil || state.T == nil || *state.T < 1 || *state.T > 3600 {
			t.Fatalf("RateLimit: %s", r.RateLimit)
		}
		switch r.Status {
		case 200:
			remaining = append(remaining, int(*state.R))
		case 429:
			refused++
			retry, err := strconv.Atoi(r.RetryAfter)
			if err != nil || retry < 1 || retry > 3600 || *state.R != 0 {
				t.Fatalf("a 429 with Retry-After %q and r=%d", r.RetryAfter, *state.R)
			}
			if r.ContentType != "application/problem+json" || r.Body["type"] != QuotaExceeded || fmt.Sprint(r.Body["violated-policies"]) != "[api]" {
				t.Fatalf("a 429's body: %s %v", r.ContentType, r.Body)
			}
		default:
			t.Fatalf("status %d", r.Status)
		}
	}
	sort.Ints(remaining)
	for i, r := range remaining {
		if r != i {
			t.Fatalf("the admitted requests' remaining values %v: want each of 0..29 once", remaining)
		}
	}
	if len(remaining) != 30 || refused != 30 {
		t.Fatalf("%d admitted and %d refused, want exactly 30 and 30", len(remaining), refused)
	}
}

func TestMiddlewareAnswers503WhenTheBackendFailsClosed(t *testing.T) {
	b := must[*Backend](t)(NewRedis(unreachableRedis(t), WithDeadline(200*time.Millisecond)))
	defer b.Close()
	lim := must[*Limiter](t)(b.Window("api", 30, time.Hour))
	var handled atomic.Bool
	resp, raw := getOnce(t, Middleware(lim, MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Store(true)
	})))
	var body map[string]any
	json.Unmarshal(raw, &body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("Content-Type") != "application/problem+json" || body["status"] != 503.0 || handled.Load() {
		t.Fatalf("status %d, Retry-After %q, %s, body %v, handler ran: %v", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), body, handled.Load())
	}
}

// A handler behind the middleware can still stream (http.Flusher) and upgrade (http.Hijacker).
func TestMiddlewareKeepsFlushAndHijack(t *testing.T) {
	lim := must[*Limiter](t)(memory(t).Window("api", 30, time.Hour))
	_, body := getOnce(t, Middleware(lim, MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, flusher := w.(http.Flusher)
		_, hijacker := w.(http.Hijacker)
		fmt.Fprintf(w, "%v %v", flusher, hijacker)
		w.(http.Flusher).Flush()
	})))
	if string(body) != "true true" {
		t.Fatalf("the handler saw Flusher, Hijacker: %s", body)
	}
}

// Count: CountFailures on a refundable kind (charged before, refunded after a success) and on
// a window (peeked before, charged after a failure).
func TestMiddlewareCountsFailuresOnly(t *testing.T) {
	b := memory(t)
	for _, lim := range []*Limiter{must[*Limiter](t)(b.TokenBucket("login", 0.001, 2)), must[*Limiter](t)(b.Window("login-w", 2, time.Hour))} {
		t.Run(lim.Kind(), func(t *testing.T) {
			var fail atomic.Bool
			server := httptest.NewServer(Middleware(lim, MiddlewareOptions{Count: CountFailures})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if fail.Load() {
					w.WriteHeader(401)
				}
			})))
			defer server.Close()
			status := func() int {
				resp, err := http.Get(server.URL)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			for i := 0; i < 5; i++ {
				if s := status(); s != 200 {
					t.Fatalf("a success was limited: %d", s)
				}
			}
			fail.Store(true)
			got := []int{status(), status(), status()}
			if fmt.Sprint(got) != "[401 401 429]" {
				t.Fatalf("failures after successes: %v, want [401 401 429]", got)
			}
		})
	}
}

// The key of a request as net/http gives it (the rules themselves are tests/http/cases.json's,
// run by http_cases_test.go): every line of the proxy header, a header holding bytes that are
// not UTF-8, and the peer net/http writes.
func TestClientKey(t *testing.T) {
	lim := must[*Limiter](t)(memory(t).Window("api", 30, time.Hour))
	p, err := newPolicy(lim, MiddlewareOptions{TrustedProxies: []string{"10.0.0.0/8", "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	forwarded, err := newPolicy(lim, MiddlewareOptions{TrustedProxies: []string{"127.0.0.1"}, ProxyHeader: "forwarded"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		p      *policy
		peer   string
		header map[string]string
		want   string
	}{
		{p, "192.0.2.1:5000", map[string]string{"X-Forwarded-For": "203.0.113.7"}, "192.0.2.1"}, // untrusted peer: header ignored
		{p, "127.0.0.1:5000", map[string]string{"X-Forwarded-For": "198.51.100.2, 203.0.113.7, 10.1.2.3"}, "203.0.113.7"},
		{p, "127.0.0.1:5000", map[string]string{"X-Real-IP": "203.0.113.9"}, "127.0.0.1"}, // only the configured header
		{p, "[2001:db8:1:2ff::1]:443", nil, "2001:db8:1:200::/56"},
		{p, "[::ffff:192.0.2.5]:80", nil, "192.0.2.5"},
		{p, "127.0.0.1:1", map[string]string{"X-Forwarded-For": "garbage, 10.0.0.1"}, "10.0.0.1"},
		{forwarded, "127.0.0.1:1", map[string]string{"Forwarded": `for=198.51.100.1, for="[2001:db8::1]:80"`}, "2001:db8::/56"},
		{forwarded, "127.0.0.1:1", map[string]string{"X-Forwarded-For": "203.0.113.7"}, "127.0.0.1"},
		{p, "127.0.0.1:1", map[string]string{"Forwarded": "for=198.51.100.1"}, "127.0.0.1"}, // X-Forwarded-For's policy ignores Forwarded
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		for k, v := range c.header {
			r.Header.Set(k, v)
		}
		if got := c.p.keyOf(r); got != c.want {
			t.Errorf("peer %s, %v: key %q, want %q", c.peer, c.header, got, c.want)
		}
	}
	// Every line of the header, in order: the right-most hop is on the last line.
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "127.0.0.1:1"
	r.Header.Add("X-Forwarded-For", "198.51.100.9")
	r.Header.Add("X-Forwarded-For", "203.0.113.8, 10.0.0.2")
	if got := p.keyOf(r); got != "203.0.113.8" {
		t.Errorf("two X-Forwarded-For lines: key %q, want 203.0.113.8", got)
	}
	// A client's own writing, left of what the proxy appended, may be any bytes: it is no
	// address, and the client the proxy saw is the key.
	r.Header.Set("X-Forwarded-For", "\xff\xfe, 203.0.113.9")
	if got := p.keyOf(r); got != "203.0.113.9" {
		t.Errorf("X-Forwarded-For with bytes that are not UTF-8: key %q, want 203.0.113.9", got)
	}
	r.Header.Set("X-Forwarded-For", "203.0.113.9, \xff")
	if got := p.keyOf(r); got != "127.0.0.1" {
		t.Errorf("a right-most hop that is not UTF-8: key %q, want the peer, 127.0.0.1", got)
	}
}

func TestMiddlewareOptionsAreValidated(t *testing.T) {
	b := memory(t)
	tb := must[*Limiter](t)(b.TokenBucket("tb", 1, 5))
	conc := must[*Limiter](t)(b.Concurrent("c", 2, time.Minute))
	cases := []struct {
		parameter string
		lim       *Limiter
		opts      MiddlewareOptions
	}{
		{"limiter", nil, MiddlewareOptions{}},
		{"Cost", tb, MiddlewareOptions{Cost: 6}},
		{"Count", tb, MiddlewareOptions{Count: "sometimes"}},
		{"Count", conc, MiddlewareOptions{Count: CountFailures}},
		{"Headers", tb, MiddlewareOptions{Headers: "draft-8"}},
		{"TrustedProxies", tb, MiddlewareOptions{TrustedProxies: []string{"10.0.0.0/33"}}},
		{"TrustedProxies", tb, MiddlewareOptions{TrustedProxies: []string{"proxy.local"}}},
		{"ProxyHeader", tb, MiddlewareOptions{ProxyHeader: "X-Real-IP"}},
		{"PartitionKeySecret", tb, MiddlewareOptions{PartitionKeySecret: []byte("fifteen-bytes!!")}},
		{"PartitionKeySecret", tb, MiddlewareOptions{PartitionKeySecret: []byte{}}}, // given, and empty: not "none"
		{"PartitionKeySecret", tb, MiddlewareOptions{PartitionKeySecret: []byte("a-secret-of-at-least-16-bytes"), Headers: NoHeaders}},
		{"Headers", tb, MiddlewareOptions{Headers: "draft-11\x00"}},
		{"TrustedProxies", tb, MiddlewareOptions{TrustedProxies: []string{"10.0.0.0/8\x00"}}},
		{"PartitionKeySecret", tb, MiddlewareOptions{PartitionKeySecret: []byte("a-secret-of-at-least-16-bytes"), Headers: Draft7}},
	}
	for _, c := range cases {
		_, err := NewMiddleware(c.lim, c.opts)
		var e *Error
		if !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &e) || e.Parameter != c.parameter {
			t.Errorf("%+v: want ErrInvalidArgument naming %s, got %v", c.opts, c.parameter, err)
		}
	}
}

// What the middleware adds to a request on memory (go test -bench Middleware -benchmem): the
// default key (the peer's address through the library's rules), a check and the draft-11
// fields, with the handler and the response recorder the same in every run.
func BenchmarkMiddleware(b *testing.B) {
	backend, err := NewMemory()
	if err != nil {
		b.Fatal(err)
	}
	defer backend.Close()
	lim, err := backend.TokenBucket("api", 1e6, 1<<50)
	if err != nil {
		b.Fatal(err)
	}
	for _, opts := range []struct {
		name string
		opts MiddlewareOptions
	}{
		{"default", MiddlewareOptions{}},
		{"trusted-proxy", MiddlewareOptions{TrustedProxies: []string{"10.0.0.0/8"}}},
		{"pk", MiddlewareOptions{PartitionKeySecret: []byte("a-secret-of-at-least-16-bytes")}},
	} {
		b.Run(opts.name, func(b *testing.B) {
			h := Middleware(lim, opts.opts)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "10.1.2.3:5555"
			r.Header.Set("X-Forwarded-For", "203.0.113.7")
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != 200 {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}

// An unlimited limiter (admins) announces no policy: its limit, 2^53, is no quota a client
// should read (tests/http/cases.json; Go sent q=9007199254740992 before it used the library's
// rules).
func TestMiddlewareOnAnUnlimitedLimiterSendsNoFields(t *testing.T) {
	lim := must[*Limiter](t)(Unlimited())
	resp, _ := getOnce(t, Middleware(lim, MiddlewareOptions{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit") != "" || resp.Header.Get("RateLimit-Policy") != "" {
		t.Fatalf("status %d, RateLimit %q, RateLimit-Policy %q: want 200 and neither field", resp.StatusCode, resp.Header.Get("RateLimit"), resp.Header.Get("RateLimit-Policy"))
	}
}
