package ratekeeper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"time"
)

// The net/http middleware. The rules every language's middleware shares (tests/http/cases.json:
// the client key, the rate-limit header fields, the partition key, and the limiter's capacity,
// refundability and window) are the library's (http_rules.go; Limiter.Capacity, Refundable,
// Window). What is here is net/http's glue: the options, the order of the calls, what Count
// charges and refunds after the response, and the refusal's response.

// HeaderForm is which rate-limit header fields the middleware sends.
type HeaderForm string

const (
	// Draft11 sends RateLimit-Policy and RateLimit as Structured Field Lists
	// (draft-ietf-httpapi-ratelimit-headers-11), the default.
	Draft11 HeaderForm = "draft-11"
	// Draft7 sends RateLimit: limit=, remaining=, reset= and RateLimit-Policy.
	Draft7 HeaderForm = "draft-7"
	// Draft6 sends RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset and RateLimit-Policy.
	Draft6 HeaderForm = "draft-6"
	// Legacy sends X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (seconds).
	Legacy HeaderForm = "legacy"
	// NoHeaders sends no rate-limit fields (Retry-After still goes on refusals).
	NoHeaders HeaderForm = "none"
)

// Which responses a request is charged for (MiddlewareOptions.Count).
const (
	// CountAll charges every request, before the handler runs (the default).
	CountAll = "all"
	// CountFailures charges requests answered with a status of 400 or more (a login route).
	CountFailures = "failures"
	// CountSuccesses charges requests answered with a status below 400.
	CountSuccesses = "successes"
)

// The RFC 9457 problem types of refusals (draft-ietf-httpapi-ratelimit-headers).
const (
	// QuotaExceeded is the problem type of a 429.
	QuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// ReducedCapacity is the problem type of a 503 by a load shedder.
	ReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// backendFailureRetryAfter is the Retry-After (seconds) of a 503 answered because the backend
// failed closed: short, since it does not say when the backend comes back.
const backendFailureRetryAfter = 1

// MiddlewareOptions configures Middleware; the zero value of each field is its default. The
// names follow express-rate-limit where the meaning is the same (keyGenerator is Key, handler
// is Handler, standardHeaders is Headers).
type MiddlewareOptions struct {
	// Key is the key a request is counted under; default: the client address (IPv6 grouped by
	// /56, proxy headers read only from TrustedProxies).
	Key func(*http.Request) string
	// Cost is what a request consumes (default 1).
	Cost uint64
	// Skip lets a request through untouched when it returns true.
	Skip func(*http.Request) bool
	// Count is which responses are charged: CountAll (default, before the handler),
	// CountFailures (status >= 400) or CountSuccesses, decided after the response.
	Count string
	// Headers is the header form (default Draft11).
	Headers HeaderForm
	// Handler answers a refused request instead of the default 429/503 problem response.
	Handler func(http.ResponseWriter, *http.Request, *Refusal)
	// Shadow lets every request through, logging the ones a limit refused.
	Shadow bool
	// TrustedProxies are the addresses or CIDR ranges of proxies whose ProxyHeader is believed.
	TrustedProxies []string
	// ProxyHeader is the one header naming the client behind a trusted proxy, and the only one
	// read: "X-Forwarded-For" (the default: nginx, AWS ALB, HAProxy, Cloudflare) or "Forwarded"
	// (RFC 7239's for= values), matched without regard to case; every line of it is read, in
	// order. The client is the right-most address of its chain that is not a trusted proxy.
	ProxyHeader string
	// PartitionKeySecret, at least 16 bytes, makes draft-11's RateLimit carry pk, the first 16
	// bytes of HMAC-SHA256(secret, key) (never the key itself, which the client would see).
	PartitionKeySecret []byte
}

// Refusal is why a request is refused and the response the middleware would answer with; a
// Handler receives it.
type Refusal struct {
	// Status is 429 (quota exceeded), or 503 (the backend failed closed, or a shedder shed).
	Status int
	// Reason is "quota-exceeded", "shed" or "backend-failure".
	Reason string
	// RetryAfter is the Retry-After, in whole seconds, rounded up.
	RetryAfter int
	// ViolatedPolicies names the limiters that refused.
	ViolatedPolicies []string
	// Header holds Retry-After and the rate-limit fields.
	Header http.Header
	// Body is the RFC 9457 application/problem+json document.
	Body []byte
}

// policy is a middleware's validated options and what it asks of its limiter once.
type policy struct {
	MiddlewareOptions
	lim    *Limiter
	mode   string        // "check", "refund" or "peek"
	window time.Duration // the limiter's (draft-11's w); 0: none
	rules  *httpRules    // the client key and the header fields, from the library
}

// Middleware returns net/http middleware limiting every request with lim; it panics when the
// options are invalid (NewMiddleware returns the error instead).
func Middleware(lim *Limiter, opts MiddlewareOptions) func(http.Handler) http.Handler {
	mw, err := NewMiddleware(lim, opts)
	if err != nil {
		panic(err)
	}
	return mw
}

// NewMiddleware returns net/http middleware limiting every request with lim: an admitted
// request gets the rate-limit header fields; a refused one a 429 with Retry-After and an
// application/problem+json body; a backend failing closed a 503. Invalid options are
// ErrInvalidArgument naming the field.
func NewMiddleware(lim *Limiter, opts MiddlewareOptions) (func(http.Handler) http.Handler, error) {
	p, err := newPolicy(lim, opts)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serve(next, w, r) })
	}, nil
}

func newPolicy(lim *Limiter, opts MiddlewareOptions) (*policy, error) {
	if lim == nil {
		return nil, invalidArgument("limiter", "must be a *Limiter, got nil")
	}
	p := &policy{MiddlewareOptions: opts, lim: lim}
	if p.Cost == 0 {
		p.Cost = 1
	}
	if p.Count == "" {
		p.Count = CountAll
	}
	if p.Headers == "" {
		p.Headers = Draft11
	}
	// The library validates the header form, the proxies, the header they set and the secret.
	o := httpOptions{trustedProxies: p.TrustedProxies, proxyHeader: p.ProxyHeader, secret: p.PartitionKeySecret}
	if p.Headers != NoHeaders {
		form := string(p.Headers)
		o.headers = &form
	}
	rules, err := newHTTPRules(o)
	if err != nil {
		return nil, err
	}
	p.rules = rules
	switch p.Count {
	case CountAll, CountFailures, CountSuccesses:
	default:
		return nil, invalidArgument("Count", fmt.Sprintf(`must be "all", "failures" or "successes", got %q`, p.Count))
	}
	if capacity := lim.Capacity(); p.Cost > capacity {
		return nil, invalidArgument("Cost", fmt.Sprintf("%d exceeds the capacity of %q (%d); no request could ever be admitted", p.Cost, lim.name, capacity))
	}
	switch {
	case lim.kind == "concurrent" && p.Count != CountAll:
		return nil, invalidArgument("Count", fmt.Sprintf(`the concurrent limiter %q counts requests in flight; use CountAll`, lim.name))
	case p.Count == CountAll:
		p.mode = "check"
	case lim.Refundable():
		p.mode = "refund"
	default:
		p.mode = "peek"
	}
	p.window = lim.Window()
	return p, nil
}

// MaxCount is the largest count, cost, limit or capacity the library accepts: 2^53.
const MaxCount = 1 << 53

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController (Go 1.20+) reach the writer underneath.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush passes a handler's flush (streaming, server-sent events) to the writer underneath.
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		if s.status == 0 {
			s.status = http.StatusOK
		}
		f.Flush()
	}
}

// Hijack passes a handler's hijack (WebSocket upgrades) to the writer underneath.
func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := s.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("ratekeeper: the response writer cannot be hijacked")
	}
	if s.status == 0 {
		s.status = http.StatusSwitchingProtocols
	}
	return h.Hijack()
}

// serve decides one request.
func (p *policy) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	if p.Skip != nil && p.Skip(r) {
		next.ServeHTTP(w, r)
		return
	}
	ctx := r.Context()
	key := p.keyOf(r)
	var d Decision
	var err error
	if p.mode == "peek" {
		d, err = p.lim.Peek(ctx, key)
	} else {
		d, err = p.lim.CheckN(ctx, key, p.Cost)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return // the client is gone
		}
		if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRejected) || errors.Is(err, ErrShed) {
			log.Printf("ratekeeper: %s failed closed: %v", p.lim.name, err)
			if p.Shadow {
				next.ServeHTTP(w, r)
				return
			}
			p.refuse(w, r, p.failure(err))
			return
		}
		log.Printf("ratekeeper: %s: %v", p.lim.name, err)
		http.Error(w, "rate limiter error", http.StatusInternalServerError)
		return
	}
	headers := p.rateHeaders(key, d)
	if !d.Allowed && !p.Shadow {
		p.refuse(w, r, p.quotaExceeded(d, headers))
		return
	}
	if !d.Allowed || d.ShadowRefused {
		log.Printf("ratekeeper: shadow mode let through a request refused by %s", p.lim.name)
	}
	for name, values := range headers {
		w.Header()[name] = values
	}
	sw := &statusWriter{ResponseWriter: w}
	defer p.settle(key, d, sw)
	next.ServeHTTP(sw, r)
}

// settle charges, refunds or releases after the response, as Count says. The response is
// gone: a failure is logged, never answered.
func (p *policy) settle(key string, d Decision, sw *statusWriter) {
	status := sw.status
	if status == 0 {
		status = http.StatusOK
	}
	counted := p.Count == CountAll || (p.Count == CountFailures) == (status >= 400)
	consumed := d.Allowed && !d.ShadowRefused
	ctx := context.Background()
	var err error
	switch {
	case d.Lease != nil:
		err = d.Lease.Release()
	case p.mode == "refund" && !counted && consumed:
		_, err = p.lim.PointsUsed(ctx, key, p.Cost, 0)
	case p.mode == "peek" && counted:
		_, err = p.lim.CheckN(ctx, key, p.Cost)
	}
	if err != nil {
		log.Printf("ratekeeper: could not settle %s after the response: %v", p.lim.name, err)
	}
}

// keyOf is the key a request is counted under: Key's, else the client address by the
// library's rule (IPv6 by /56; ProxyHeader read only from TrustedProxies).
func (p *policy) keyOf(r *http.Request) string {
	if p.Key != nil {
		return p.Key(r)
	}
	return p.rules.requestKey(r)
}

// ceilSeconds rounds a duration up to whole seconds (a Retry-After).
func ceilSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}

// rateHeaders are the rate-limit fields of a decision, in the policy's form, as the library
// renders them.
func (p *policy) rateHeaders(key string, d Decision) http.Header {
	h := http.Header{}
	fields, err := p.rules.fields([]fieldReport{reportOf(p.lim.name, p.window, &d)}, key)
	if err != nil {
		log.Printf("ratekeeper: the rate-limit fields of %s: %v", p.lim.name, err)
	}
	for _, f := range fields {
		h.Set(f[0], f[1])
	}
	return h
}

// problem is an RFC 9457 document.
func problem(typ, title string, status int, detail string, policies []string) []byte {
	doc := map[string]any{"type": typ, "title": title, "status": status, "detail": detail}
	if policies != nil {
		doc["violated-policies"] = policies
	}
	b, _ := json.Marshal(doc)
	return b
}

func (p *policy) quotaExceeded(d Decision, headers http.Header) *Refusal {
	retry := ceilSeconds(d.RetryAfter)
	if retry < 1 {
		retry = 1
	}
	headers.Set("Retry-After", strconv.Itoa(retry))
	names := []string{p.lim.name}
	return &Refusal{Status: http.StatusTooManyRequests, Reason: "quota-exceeded", RetryAfter: retry, ViolatedPolicies: names, Header: headers,
		Body: problem(QuotaExceeded, "Too Many Requests", 429, fmt.Sprintf("Rate limit exceeded; retry in %d s.", retry), names)}
}

func (p *policy) failure(err error) *Refusal {
	h := http.Header{}
	h.Set("Retry-After", strconv.Itoa(backendFailureRetryAfter))
	if errors.Is(err, ErrShed) {
		names := []string{p.lim.name}
		return &Refusal{Status: http.StatusServiceUnavailable, Reason: "shed", RetryAfter: backendFailureRetryAfter, ViolatedPolicies: names, Header: h,
			Body: problem(ReducedCapacity, "Service Unavailable", 503, "The service is shedding load; retry shortly.", names)}
	}
	return &Refusal{Status: http.StatusServiceUnavailable, Reason: "backend-failure", RetryAfter: backendFailureRetryAfter, Header: h,
		Body: problem("about:blank", "Service Unavailable", 503, "The rate limiter's backend is unavailable.", nil)}
}

// refuse answers a refused request (Handler, else the problem response).
func (p *policy) refuse(w http.ResponseWriter, r *http.Request, refusal *Refusal) {
	if p.Handler != nil {
		p.Handler(w, r, refusal)
		return
	}
	for name, values := range refusal.Header {
		w.Header()[name] = values
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(refusal.Status)
	_, _ = w.Write(refusal.Body)
}
