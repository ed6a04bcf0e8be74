package ratekeeper

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

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

// policy is a middleware's validated options and what it knows of its limiter.
type policy struct {
	MiddlewareOptions
	lim     *Limiter
	mode    string // "check", "refund" or "peek"
	window  float64
	trusted []netip.Prefix
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

// refundable kinds can give a charge back (PointsUsed(cost, 0)): Count charges them before the
// handler and refunds after; the others are peeked before and charged after.
var refundable = map[string]bool{"token_bucket": true, "leaky": true, "points": true}

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
	switch strings.ToLower(strings.TrimSpace(p.ProxyHeader)) {
	case "", "x-forwarded-for":
		p.ProxyHeader = "X-Forwarded-For"
	case "forwarded":
		p.ProxyHeader = "Forwarded"
	default:
		return nil, invalidArgument("ProxyHeader", fmt.Sprintf(`must be "X-Forwarded-For" or "Forwarded" (the header your proxy sets), got %q`, p.ProxyHeader))
	}
	switch p.Headers {
	case Draft11, Draft7, Draft6, Legacy, NoHeaders:
	default:
		return nil, invalidArgument("Headers", fmt.Sprintf(`must be "draft-11", "draft-7", "draft-6", "legacy" or "none", got %q`, p.Headers))
	}
	switch p.Count {
	case CountAll, CountFailures, CountSuccesses:
	default:
		return nil, invalidArgument("Count", fmt.Sprintf(`must be "all", "failures" or "successes", got %q`, p.Count))
	}
	var spec map[string]any
	_ = json.Unmarshal([]byte(lim.Spec()), &spec)
	if capacity, ok := specCapacity(spec); ok && p.Cost > capacity {
		return nil, invalidArgument("Cost", fmt.Sprintf("%d exceeds the capacity of %q (%d); no request could ever be admitted", p.Cost, lim.name, capacity))
	}
	if p.Cost > MaxCount {
		return nil, invalidArgument("Cost", fmt.Sprintf("must be at most 2^53, got %d", p.Cost))
	}
	switch {
	case lim.kind == "concurrent" && p.Count != CountAll:
		return nil, invalidArgument("Count", fmt.Sprintf(`the concurrent limiter %q counts requests in flight; use CountAll`, lim.name))
	case p.Count == CountAll:
		p.mode = "check"
	case refundable[lim.kind]:
		p.mode = "refund"
	default:
		p.mode = "peek"
	}
	p.window = specWindow(spec)
	for _, t := range p.TrustedProxies {
		prefix, err := parsePrefix(strings.TrimSpace(t))
		if err != nil {
			return nil, invalidArgument("TrustedProxies", fmt.Sprintf("must be IP addresses or CIDR ranges (%v)", err))
		}
		p.trusted = append(p.trusted, prefix)
	}
	if p.PartitionKeySecret != nil {
		if len(p.PartitionKeySecret) < 16 {
			return nil, invalidArgument("PartitionKeySecret", fmt.Sprintf("must be at least 16 bytes, got %d", len(p.PartitionKeySecret)))
		}
		if p.Headers != Draft11 {
			return nil, invalidArgument("PartitionKeySecret", "applies only to Headers Draft11 (pk is a draft-11 parameter)")
		}
	}
	return p, nil
}

// MaxCount is the largest count, cost, limit or capacity the library accepts: 2^53.
const MaxCount = 1 << 53

// parsePrefix reads an address or a CIDR range.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// specCapacity is the most one call can cost on a limiter of this spec, where known.
func specCapacity(spec map[string]any) (uint64, bool) {
	for _, field := range []string{"capacity", "size", "limit"} {
		if f, ok := spec[field].(float64); ok {
			return uint64(f), true
		}
	}
	least := math.Inf(1)
	if ws, ok := spec["windows"].([]any); ok {
		for _, w := range ws {
			if m, ok := w.(map[string]any); ok {
				least = math.Min(least, asFloat(m["limit"]))
			} else if t, ok := w.([]any); ok && len(t) > 0 {
				least = math.Min(least, asFloat(t[0]))
			}
		}
	}
	if ls, ok := spec["limits"].([]any); ok {
		for _, l := range ls {
			if t, ok := l.([]any); ok && len(t) > 1 {
				least = math.Min(least, asFloat(t[1]))
			}
		}
	}
	if math.IsInf(least, 1) || math.IsNaN(least) {
		return 0, false
	}
	return uint64(least), true
}

func asFloat(v any) float64 {
	if f, ok := v.(float64); ok {
		return f
	}
	return math.NaN()
}

// specWindow is a single-limit limiter's window (draft-11's w), in seconds; 0 when its kind has
// none.
func specWindow(spec map[string]any) float64 {
	f := func(field string) float64 {
		v, _ := spec[field].(float64)
		return v
	}
	switch spec["kind"] {
	case "bucket", "window":
		return f("interval")
	case "token_bucket":
		if rate := f("rate"); rate > 0 {
			return f("capacity") / rate
		}
	case "leaky":
		return f("drain")
	case "points":
		return f("refill")
	}
	return 0
}

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

// keyOf is the key a request is counted under.
func (p *policy) keyOf(r *http.Request) string {
	if p.Key != nil {
		return p.Key(r)
	}
	return p.clientKey(r)
}

// clientKey is the client address, IPv6 grouped by /56. ProxyHeader is read only when the peer
// is a trusted proxy; the client is then the right-most address of its chain that is not one.
func (p *policy) clientKey(r *http.Request) string {
	addr, ok := parseHost(r.RemoteAddr)
	if !ok {
		if r.RemoteAddr == "" {
			return "unknown"
		}
		return r.RemoteAddr
	}
	if p.isTrusted(addr) {
		var chain []string
		value := strings.Join(r.Header.Values(p.ProxyHeader), ",")
		if p.ProxyHeader == "Forwarded" {
			chain = forwardedFor(value)
		} else {
			for _, hop := range strings.Split(value, ",") {
				if strings.TrimSpace(hop) != "" {
					chain = append(chain, hop)
				}
			}
		}
		for i := len(chain) - 1; i >= 0; i-- {
			hop, ok := parseHost(chain[i])
			if !ok {
				break // an obfuscated or unknown hop: the last address known stands
			}
			addr = hop
			if !p.isTrusted(hop) {
				break
			}
		}
	}
	if addr.Is6() {
		prefix, _ := addr.Prefix(56)
		return prefix.String()
	}
	return addr.String()
}

func (p *policy) isTrusted(a netip.Addr) bool {
	for _, t := range p.trusted {
		if t.Contains(a) {
			return true
		}
	}
	return false
}

// parseHost reads an address with or without a port: v4, v4:port, v6, [v6], [v6]:port.
func parseHost(text string) (netip.Addr, bool) {
	text = strings.Trim(strings.TrimSpace(text), `"`)
	if strings.HasPrefix(text, "[") {
		if end := strings.Index(text, "]"); end > 0 {
			text = text[1:end]
		} else {
			text = text[1:]
		}
	} else if strings.Count(text, ":") == 1 {
		text = text[:strings.Index(text, ":")]
	}
	a, err := netip.ParseAddr(text)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// forwardedFor is the for= values of a Forwarded field (RFC 7239), first hop first.
func forwardedFor(value string) []string {
	var out []string
	for _, element := range strings.Split(value, ",") {
		for _, pair := range strings.Split(element, ";") {
			name, val, _ := strings.Cut(strings.TrimSpace(pair), "=")
			if strings.EqualFold(strings.TrimSpace(name), "for") {
				out = append(out, strings.TrimSpace(val))
			}
		}
	}
	return out
}

// ceilSeconds rounds a duration up to whole seconds.
func ceilSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}

// sfString is an RFC 9651 sf-string (printable ASCII; anything else becomes '?').
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteRune(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteRune(c)
		default:
			b.WriteByte('?')
		}
	}
	b.WriteByte('"')
	return b.String()
}

// rateHeaders are the rate-limit fields of a decision, in the policy's form.
func (p *policy) rateHeaders(key string, d Decision) http.Header {
	h := http.Header{}
	reset := ceilSeconds(d.ResetAfter)
	policyField := strconv.FormatUint(d.Limit, 10)
	w := ""
	if p.window > 0 {
		w = ";w=" + strconv.Itoa(int(math.Max(1, math.Ceil(p.window-1e-9))))
	}
	policyField += w
	switch p.Headers {
	case Draft11:
		name := sfString(p.lim.name)
		pk := ""
		if p.PartitionKeySecret != nil {
			mac := hmac.New(sha256.New, p.PartitionKeySecret)
			mac.Write([]byte(key))
			pk = ";pk=:" + base64.StdEncoding.EncodeToString(mac.Sum(nil)[:16]) + ":"
		}
		h.Set("RateLimit-Policy", fmt.Sprintf("%s;q=%d%s", name, d.Limit, w))
		h.Set("RateLimit", fmt.Sprintf("%s;r=%d;t=%d%s", name, d.Remaining, reset, pk))
	case Draft7:
		h.Set("RateLimit-Policy", policyField)
		h.Set("RateLimit", fmt.Sprintf("limit=%d, remaining=%d, reset=%d", d.Limit, d.Remaining, reset))
	case Draft6:
		h.Set("RateLimit-Policy", policyField)
		h.Set("RateLimit-Limit", strconv.FormatUint(d.Limit, 10))
		h.Set("RateLimit-Remaining", strconv.FormatUint(d.Remaining, 10))
		h.Set("RateLimit-Reset", strconv.Itoa(reset))
	case Legacy:
		h.Set("X-RateLimit-Limit", strconv.FormatUint(d.Limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatUint(d.Remaining, 10))
		h.Set("X-RateLimit-Reset", strconv.Itoa(reset))
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
