package ratekeeper

// The HTTP rules every language's middleware applies the same way, from the library
// (rk_http_rules: core/src/http/): the key of a request from a peer (IPv6 by /56, a proxy
// header only from trusted proxies), the rate-limit header fields of a decision in each form,
// and draft-11's partition key. The middleware (middleware.go) is net/http's glue around them;
// tests/http/cases.json is what they must answer (http_cases_test.go).
//
// A request crosses into C without a C allocation: its peer address, proxy header, key and
// policy name go as Go strings (_GoString_, copied onto the C stack for the call, as rkgo.h's
// keys are), and the library's text comes back by value.

/*
#include "rkgo.h"

// Text the library wrote (snprintf's convention) returned by value: in buf when it fits, else
// in heap (malloc'd; the Go side frees it), with the status and, on failure, the message.
#define RKGO_TEXT_BUF 512
typedef struct {
	char buf[RKGO_TEXT_BUF];
	char *heap;
	size_t n;
	char *message;
	int32_t status;
} rkgo_text;

// Runs `call` (a library call writing to `buf`, `len`, `&t->n`) into t->buf, and again into a
// heap buffer of the full length when the text is longer.
#define RKGO_WRITE_TEXT(t, call)                                       \
	do {                                                               \
		char *buf = (t)->buf;                                          \
		size_t len = sizeof (t)->buf;                                  \
		(t)->heap = NULL;                                              \
		(t)->n = 0;                                                    \
		(t)->status = (call);                                          \
		if ((t)->status == RK_OK && (t)->n >= len) {                   \
			len = (t)->n + 1;                                          \
			buf = (t)->heap = malloc(len);                             \
			if (buf == NULL) abort();                                  \
			(t)->status = (call);                                      \
		}                                                              \
		(t)->message = rkgo_message((enum rk_status)(t)->status);      \
	} while (0)

// The client key of a request from `peer` ("": none) whose proxy header says `forwarded`
// ("": absent).
static inline rkgo_text rkgo_http_client_key(uintptr_t rules, _GoString_ peer, _GoString_ forwarded) {
	rkgo_key_text p, f;
	const char *pp = rkgo_key(&p, peer);
	const char *ff = rkgo_key(&f, forwarded);
	rkgo_text t;
	RKGO_WRITE_TEXT(&t, rk_http_rules_client_key((const rk_http_rules *)rules, pp, ff, buf, len, &t.n));
	rkgo_key_done(&p);
	rkgo_key_done(&f);
	return t;
}

// The fields of `n` reports (`reports`, with their names, in C memory) for `key`, as header
// lines.
static inline rkgo_text rkgo_http_fields(uintptr_t rules, uintptr_t reports, size_t n, _GoString_ key) {
	rkgo_key_text k;
	const char *kk = rkgo_key(&k, key);
	rkgo_text t;
	RKGO_WRITE_TEXT(&t, rk_http_rules_field_lines((const rk_http_rules *)rules, (const rk_http_report *)reports, n,
	                                              kk == NULL ? "" : kk, buf, len, &t.n));
	rkgo_key_done(&k);
	return t;
}

// The fields of one report, without limits, by the policy `name`: what the middleware sends on
// every request.
static inline rkgo_text rkgo_http_fields_one(uintptr_t rules, _GoString_ name, rk_http_report report, _GoString_ key) {
	rkgo_key_text nm;
	const char *nn = rkgo_key(&nm, name);
	report.name = nn == NULL ? "" : nn;
	report.limits = NULL;
	report.limits_len = 0;
	rkgo_text t = rkgo_http_fields(rules, (uintptr_t)&report, 1, key);
	rkgo_key_done(&nm);
	return t;
}
*/
import "C"

import (
	"net/http"
	"runtime"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"
)

// httpRules is one middleware's validated HTTP options in the library: the header form, the
// trusted proxies and the header they set, the partition key secret. Immutable and safe for
// concurrent use; the collector frees it with the middleware that holds it.
type httpRules struct {
	ptr *C.rk_http_rules
	// proxyHeader is the header the trusted proxies set, as http.Header keys it
	// ("X-Forwarded-For" or "Forwarded"); "" when no proxy is trusted (then none is read).
	proxyHeader string
}

// httpOptions are the middleware's options the library validates.
type httpOptions struct {
	headers        *string // nil: no rate-limit fields
	trustedProxies []string
	proxyHeader    string // "": X-Forwarded-For
	secret         []byte // nil: no pk
}

// goOptionNames are MiddlewareOptions' names of the options the library names.
var goOptionNames = map[string]string{
	"headers":              "Headers",
	"trusted_proxies":      "TrustedProxies",
	"proxy_header":         "ProxyHeader",
	"partition_key_secret": "PartitionKeySecret",
}

// newHTTPRules validates the options in the library; a bad one is ErrInvalidArgument naming
// the MiddlewareOptions field (the secret is never shown).
func newHTTPRules(o httpOptions) (*httpRules, error) {
	var headers, proxyHeader cText
	var err error
	if o.headers != nil {
		if headers, err = text(*o.headers, "Headers"); err != nil {
			return nil, err
		}
	}
	if o.proxyHeader != "" {
		if proxyHeader, err = text(o.proxyHeader, "ProxyHeader"); err != nil {
			return nil, err
		}
	}
	for _, entry := range o.trustedProxies {
		if strings.IndexByte(entry, 0) >= 0 {
			return nil, invalidArgument("TrustedProxies", "must not contain a NUL byte")
		}
	}
	// The arrays of pointers live in C memory: cgo forbids passing Go memory that holds Go
	// pointers.
	trusted := cStrings(o.trustedProxies)
	defer freeCStrings(trusted)
	var secret *C.uint8_t
	if o.secret != nil {
		secret = (*C.uint8_t)(C.CBytes(o.secret))
		defer C.free(unsafe.Pointer(secret))
	}
	r := &httpRules{}
	err = call(func() status {
		return C.rk_http_rules_new(headers.ptr(), firstOf(trusted), C.size_t(len(trusted)), proxyHeader.ptr(),
			secret, C.size_t(len(o.secret)), &r.ptr)
	})
	if err != nil {
		return nil, goOptionError(err)
	}
	runtime.SetFinalizer(r, func(r *httpRules) { C.rk_http_rules_free(r.ptr) })
	if len(o.trustedProxies) > 0 {
		r.proxyHeader = http.CanonicalHeaderKey(C.GoString(C.rk_http_rules_proxy_header(r.ptr)))
	}
	return r, nil
}

// goOptionError names a refused option as MiddlewareOptions does (`trusted_proxies` is
// TrustedProxies), in the error and its message.
func goOptionError(err error) error {
	if e, ok := err.(*Error); ok {
		if name, ok := goOptionNames[e.Parameter]; ok {
			e.Message = strings.Replace(e.Message, "`"+e.Parameter+"`", "`"+name+"`", 1)
			e.Parameter = name
		}
	}
	return err
}

// addr is the rules' address for the C helpers (see rkgo.h on why not a pointer).
func (r *httpRules) addr() C.uintptr_t { return C.uintptr_t(uintptr(unsafe.Pointer(r.ptr))) }

// clientKey is the key of a request from peer (net/http's RemoteAddr; "": none) whose proxy
// header (every line joined by commas) is forwarded: the peer's address, IPv6 by its /56; the
// proxy header is read only when the peer is a trusted proxy.
func (r *httpRules) clientKey(peer, forwarded string) string {
	// A header line may hold bytes that are not UTF-8 (a client's own writing, left of what
	// the proxies appended): such a hop is no address, as the library reads it.
	if !utf8.ValidString(forwarded) {
		forwarded = strings.ToValidUTF8(forwarded, "?")
	}
	if !utf8.ValidString(peer) {
		peer = strings.ToValidUTF8(peer, "?")
	}
	t := C.rkgo_http_client_key(r.addr(), peer, forwarded)
	runtime.KeepAlive(r)
	key, err := textOf(&t)
	if err != nil {
		// Not reached: both strings are UTF-8 now, the only thing the library refuses here.
		// Should it fail, the peer stands.
		return peer
	}
	return key
}

// requestKey is the client key of a request as net/http gives it.
func (r *httpRules) requestKey(req *http.Request) string {
	forwarded := ""
	if r.proxyHeader != "" {
		if lines := req.Header[r.proxyHeader]; len(lines) == 1 {
			forwarded = lines[0]
		} else if len(lines) > 1 {
			forwarded = strings.Join(lines, ",")
		}
	}
	return r.clientKey(req.RemoteAddr, forwarded)
}

// textOf reads the text a helper returned, freeing what it allocated.
func textOf(t *C.rkgo_text) (string, error) {
	if t.message != nil {
		message := C.GoString(t.message)
		C.free(unsafe.Pointer(t.message))
		return "", errorFor(status(t.status), message)
	}
	if t.heap != nil {
		s := C.GoStringN(t.heap, C.int(t.n))
		C.free(unsafe.Pointer(t.heap))
		return s, nil
	}
	return string(unsafe.Slice((*byte)(unsafe.Pointer(&t.buf[0])), int(t.n))), nil
}

// fieldReport is what one limiter decided about a request, as the header fields read it.
type fieldReport struct {
	name                   string
	window                 time.Duration // 0: the limiter has none
	allowed                bool
	limit, remaining       uint64
	resetAfter, retryAfter time.Duration
	limits                 []fieldLimit // a multi-limit decision's limits, each with its window
}

// fieldLimit is one limit of a multi-limit decision.
type fieldLimit struct {
	window                 time.Duration
	limit, remaining       uint64
	resetAfter, retryAfter time.Duration
}

// reportOf is lim's decision d as the fields read it.
func reportOf(name string, window time.Duration, d *Decision) fieldReport {
	return fieldReport{name: name, window: window, allowed: d.Allowed, limit: d.Limit, remaining: d.Remaining,
		resetAfter: d.ResetAfter, retryAfter: d.RetryAfter}
}

// native is the report as the library takes it, without its name and limits.
func (f *fieldReport) native() C.rk_http_report {
	return C.rk_http_report{window_secs: seconds(f.window), allowed: C.bool(f.allowed), limit: C.uint64_t(f.limit),
		remaining: C.uint64_t(f.remaining), reset_after_secs: seconds(f.resetAfter), retry_after_secs: seconds(f.retryAfter)}
}

// fields are the rate-limit header fields of reports for a request counted under key, in the
// rules' form, as (name, value) pairs in order (none without a form, or when no limiter
// announces a limit).
func (r *httpRules) fields(reports []fieldReport, key string) ([][2]string, error) {
	var t C.rkgo_text
	if len(reports) == 1 && len(reports[0].limits) == 0 {
		// The middleware's: no C allocation.
		t = C.rkgo_http_fields_one(r.addr(), reports[0].name, reports[0].native(), key)
	} else {
		natives, free := nativeReports(reports)
		defer free()
		t = C.rkgo_http_fields(r.addr(), C.uintptr_t(uintptr(unsafe.Pointer(natives))), C.size_t(len(reports)), key)
	}
	runtime.KeepAlive(r)
	lines, err := textOf(&t)
	if err != nil {
		return nil, err
	}
	// "Name: value\r\n" each (rk_http_rules_field_lines): split, not parsed as JSON, which
	// cost more than the rest of the middleware.
	pairs := make([][2]string, 0, 4)
	for lines != "" {
		var line string
		line, lines, _ = strings.Cut(lines, "\r\n")
		name, value, _ := strings.Cut(line, ": ")
		pairs = append(pairs, [2]string{name, value})
	}
	return pairs, nil
}

// nativeReports copies reports, their names and their limits into C memory (the library reads
// arrays of structs that point to more memory, which cgo forbids passing from Go's).
func nativeReports(reports []fieldReport) (*C.rk_http_report, func()) {
	var allocated []unsafe.Pointer
	alloc := func(size uintptr) unsafe.Pointer {
		p := C.calloc(1, C.size_t(size))
		allocated = append(allocated, p)
		return p
	}
	base := (*C.rk_http_report)(alloc(unsafe.Sizeof(C.rk_http_report{}) * uintptr(len(reports)+1)))
	out := unsafe.Slice(base, len(reports))
	for i := range reports {
		out[i] = reports[i].native()
		name := C.CString(reports[i].name)
		allocated = append(allocated, unsafe.Pointer(name))
		out[i].name = name
		if n := len(reports[i].limits); n > 0 {
			limits := unsafe.Slice((*C.rk_http_limit)(alloc(unsafe.Sizeof(C.rk_http_limit{})*uintptr(n))), n)
			for j, l := range reports[i].limits {
				limits[j] = C.rk_http_limit{window_secs: seconds(l.window), limit: C.uint64_t(l.limit),
					remaining: C.uint64_t(l.remaining), reset_after_secs: seconds(l.resetAfter), retry_after_secs: seconds(l.retryAfter)}
			}
			out[i].limits, out[i].limits_len = &limits[0], C.size_t(n)
		}
	}
	return base, func() {
		for _, p := range allocated {
			C.free(p)
		}
	}
}
