package ratekeeper

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"testing"
	"time"
)

// The shared HTTP rules (tests/http/cases.json) through the Go middleware: the key a request
// is counted under (net/http's RemoteAddr and header), the rate-limit header fields (the
// library's rules the middleware asks), what Count charges and refunds, and the limiter facts
// the middleware asks (Capacity, Refundable, Window). The core (core/tests/http.rs), Python
// (py/tests/http/test_cases.py), Node (node/__test__/http-cases.test.js) and Ruby
// (ruby/test/rack_cases_test.rb) run the same table.

// httpTable is tests/http/cases.json.
type httpTable struct {
	ClientKey []struct {
		Name           string
		Peer           *string
		Headers        map[string]string
		TrustedProxies []string `json:"trusted_proxies"`
		ProxyHeader    string   `json:"proxy_header"`
		Key            string
	} `json:"client_key"`
	Fields []struct {
		Name               string
		Headers            *string
		Key                string
		PartitionKeySecret *string `json:"partition_key_secret"`
		Reports            []struct {
			Name             string
			Limit, Remaining uint64
			ResetAfter       float64 `json:"reset_after"`
			RetryAfter       float64 `json:"retry_after"`
			Allowed          bool
			Window           *float64
			Limits           []struct {
				Window           float64
				ResetAfter       float64 `json:"reset_after"`
				RetryAfter       float64 `json:"retry_after"`
				Limit, Remaining uint64
			}
		}
		Fields [][2]string
	}
	Count []struct {
		Name            string
		Limiter         map[string]any
		Count           string
		Status          int
		Cost, Remaining uint64
	}
	Limiters []struct {
		Limiter    map[string]any
		Capacity   uint64
		Refundable bool
		Window     *float64
	}
}

// secondsOf is a table's seconds as a duration (to the microsecond, as the library reads them).
func secondsOf(s float64) time.Duration {
	return time.Duration(math.Round(s*1e6)) * time.Microsecond
}

func TestHTTPCases(t *testing.T) {
	raw, err := os.ReadFile("../tests/http/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var table httpTable
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	// A case Go cannot express is skipped, saying why, and counted against the bound below.
	ran, skipped := 0, 0
	run := func(kind, name string, f func(t *testing.T) string) {
		t.Run(kind+"/"+nonWord.ReplaceAllString(name, "_"), func(t *testing.T) {
			ran++ // a case that fails ran
			if why := f(t); why != "" {
				ran, skipped = ran-1, skipped+1
				t.Skip(why)
			}
		})
	}
	ctx := context.Background()

	for _, c := range table.ClientKey {
		c := c
		run("client_key", c.Name, func(t *testing.T) string {
			lim := must[*Limiter](t)(memory(t).Window("keys", 5, time.Minute))
			h := Middleware(lim, MiddlewareOptions{TrustedProxies: c.TrustedProxies, ProxyHeader: c.ProxyHeader})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = ""
			if c.Peer != nil {
				r.RemoteAddr = *c.Peer
			}
			for name, value := range c.Headers {
				r.Header.Set(name, value)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != 200 {
				t.Fatalf("status %d", w.Code)
			}
			if d := must[Decision](t)(lim.Peek(ctx, c.Key)); d.Remaining != 4 {
				t.Fatalf("not counted under %q (remaining %d there)", c.Key, d.Remaining)
			}
			return ""
		})
	}

	for _, c := range table.Fields {
		c := c
		run("fields", c.Name, func(t *testing.T) string {
			o := httpOptions{headers: c.Headers}
			if c.PartitionKeySecret != nil {
				o.secret = []byte(*c.PartitionKeySecret)
			}
			rules, err := newHTTPRules(o)
			if err != nil {
				t.Fatal(err)
			}
			reports := []fieldReport{}
			for _, r := range c.Reports {
				f := fieldReport{name: r.Name, allowed: r.Allowed, limit: r.Limit, remaining: r.Remaining,
					resetAfter: secondsOf(r.ResetAfter), retryAfter: secondsOf(r.RetryAfter)}
				if r.Window != nil {
					f.window = secondsOf(*r.Window)
				}
				for _, l := range r.Limits {
					f.limits = append(f.limits, fieldLimit{window: secondsOf(l.Window), limit: l.Limit, remaining: l.Remaining,
						resetAfter: secondsOf(l.ResetAfter), retryAfter: secondsOf(l.RetryAfter)})
				}
				reports = append(reports, f)
			}
			got, err := rules.fields(reports, c.Key)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 && len(c.Fields) == 0 {
				return ""
			}
			if !reflect.DeepEqual(got, c.Fields) {
				t.Fatalf("fields %q, want %q", got, c.Fields)
			}
			return ""
		})
	}

	for _, c := range table.Count {
		c := c
		run("count", c.Name, func(t *testing.T) string {
			clock := must[*ManualClock](t)(NewManualClock(time.Unix(1700000000, 0)))
			defer clock.Close()
			b := must[*Backend](t)(NewMemory(WithClock(clock)))
			defer b.Close()
			lim := must[*Limiter](t)(b.FromSpec("count", mustSpec(c.Limiter)))
			h := Middleware(lim, MiddlewareOptions{Count: c.Count, Cost: c.Cost})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(c.Status)
			}))
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "203.0.113.7:4711"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.Status {
				t.Fatalf("status %d, want %d", w.Code, c.Status)
			}
			if d := must[Decision](t)(lim.Peek(ctx, "203.0.113.7")); d.Remaining != c.Remaining {
				t.Fatalf("remaining %d after the response, want %d", d.Remaining, c.Remaining)
			}
			return ""
		})
	}

	for _, c := range table.Limiters {
		c := c
		run("limiters", fmt.Sprint(c.Limiter), func(t *testing.T) string {
			lim := must[*Limiter](t)(memory(t).FromSpec("facts", mustSpec(c.Limiter)))
			var window time.Duration
			if c.Window != nil {
				window = secondsOf(*c.Window)
			}
			if lim.Capacity() != c.Capacity || lim.Refundable() != c.Refundable || lim.Window() != window {
				t.Fatalf("capacity %d, refundable %v, window %v; want %d, %v, %v", lim.Capacity(), lim.Refundable(), lim.Window(), c.Capacity, c.Refundable, window)
			}
			return ""
		})
	}

	t.Logf("%d cases ran, %d skipped (Go cannot say them)", ran, skipped)
	if total := len(table.ClientKey) + len(table.Fields) + len(table.Count) + len(table.Limiters); ran+skipped != total {
		t.Errorf("%d of the table's %d cases were run or skipped", ran+skipped, total)
	}
	// Today every case is said in Go.
	if skipped > 0 {
		t.Errorf("%d cases skipped: more than the bound, 0", skipped)
	}
}
