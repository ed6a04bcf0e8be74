package ratekeeper

/*
#include "ratekeeper.h"
*/
import "C"

import (
	"encoding/json"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"time"
)

// Backend is where limiter state lives: an in-process memory backend, a Redis server or a
// Redis Cluster. Every process pointing at the same Redis and prefix, in any language, shares
// the same limits. Safe for concurrent use by many goroutines; Close it when done.
type Backend struct {
	ptr    *C.rk_backend
	handle closer
	remote bool // Redis, Cluster or Sentinel: a check is a round trip
}

// Option configures a backend (NewMemory, NewRedis, NewCluster).
type Option func(*config)

// config is a backend's configuration as rk_backend_new_from_json takes it, and the clock the
// one option JSON cannot carry.
type config struct {
	fields map[string]any
	clock  *ManualClock
}

// FailurePolicy is what a Redis backend does when Redis cannot answer within the deadline.
type FailurePolicy string

const (
	// FailClosed fails the call with ErrUnavailable (the default).
	FailClosed FailurePolicy = "fail_closed"
	// FailOpen allows the call (a concurrent limiter's lease then has fencing token 0).
	FailOpen FailurePolicy = "fail_open"
	// Fallback lets an in-process memory limiter take over with 1/divisor of every limit (see
	// WithFallback).
	Fallback FailurePolicy = "fallback"
)

// WithPrefix sets the namespace of every Redis key (default "rk").
func WithPrefix(prefix string) Option { return func(c *config) { c.fields["prefix"] = prefix } }

// WithFailurePolicy sets what happens when Redis cannot answer (default FailClosed).
func WithFailurePolicy(p FailurePolicy) Option {
	return func(c *config) { c.fields["failure_policy"] = string(p) }
}

// WithFallback sets the Fallback policy: an in-process limiter with 1/divisor of every limit
// takes over while Redis cannot answer (divisor: e.g. the number of processes sharing them).
func WithFallback(divisor uint32) Option {
	return func(c *config) {
		c.fields["failure_policy"] = string(Fallback)
		c.fields["fallback_divisor"] = divisor
	}
}

// WithDeadline sets how long a call may take, answered or not (default 200ms).
func WithDeadline(d time.Duration) Option {
	return func(c *config) { c.fields["deadline"] = d.Seconds() }
}

// WithConnectTimeout sets how long a connection attempt may take (default 1s).
func WithConnectTimeout(d time.Duration) Option {
	return func(c *config) { c.fields["connect_timeout"] = d.Seconds() }
}

// WithTLSCAFile trusts the PEM CA certificate(s) in path for rediss:// URLs (read now).
func WithTLSCAFile(path string) Option { return func(c *config) { c.fields["tls_ca_file"] = path } }

// WithTLSCAData trusts the PEM CA certificate(s) in pem for rediss:// URLs.
func WithTLSCAData(pem string) Option { return func(c *config) { c.fields["tls_ca_data"] = pem } }

// WithTLSClientCert presents the PEM certificate and key in these files (mutual TLS); an empty
// name is left out, so the library names what is missing.
func WithTLSClientCert(certFile, keyFile string) Option {
	return func(c *config) {
		for field, path := range map[string]string{"tls_cert_file": certFile, "tls_key_file": keyFile} {
			if path != "" {
				c.fields[field] = path
			}
		}
	}
}

// WithDenyCache makes the backend's limiters remember refusals in this process until their
// RetryAfter, refusing repeats without a round trip (Redis limiters of the counting kinds).
func WithDenyCache(on bool) Option { return func(c *config) { c.fields["deny_cache"] = on } }

// WithDenyCacheMaxEntries bounds the refusals the deny cache remembers (default 10,000).
func WithDenyCacheMaxEntries(n uint64) Option {
	return func(c *config) { c.fields["deny_cache_max_entries"] = n }
}

// WithReplicaAcks makes each call that writes state wait until n replicas acknowledged its
// writes (WAIT) before it admits (default 0: no waiting). Too few within the deadline fail the
// call with ErrUnavailable, and the failure policy decides (FailOpen then admits it).
func WithReplicaAcks(n uint32) Option { return func(c *config) { c.fields["replica_acks"] = n } }

// WithMaxKeys bounds a memory backend's keys (default 1,000,000).
func WithMaxKeys(n uint64) Option { return func(c *config) { c.fields["max_keys"] = n } }

// WithClock makes the backend read time from a manual clock (tests).
func WithClock(clock *ManualClock) Option { return func(c *config) { c.clock = clock } }

// NewMemory returns an in-process memory backend: state per process, shared by every limiter
// built from it.
func NewMemory(opts ...Option) (*Backend, error) {
	return newBackend(map[string]any{"kind": "memory"}, opts)
}

// NewRedis returns a backend on a standalone Redis server:
// redis://[user:password@]host:port[/db] or rediss:// (TLS). Nothing connects until the first
// call, so an unreachable server is reported by the calls, never here.
func NewRedis(url string, opts ...Option) (*Backend, error) {
	return newBackend(map[string]any{"kind": "redis", "url": url}, opts)
}

// NewCluster returns a backend on a Redis Cluster reached through any of seeds
// (redis://host:port URLs); the options are those of NewRedis.
func NewCluster(seeds []string, opts ...Option) (*Backend, error) {
	if seeds == nil {
		seeds = []string{}
	}
	return newBackend(map[string]any{"kind": "cluster", "seeds": seeds}, opts)
}

// NewSentinel returns a backend on a Sentinel-managed primary named service (the name in the
// sentinels' "sentinel monitor" line), found through any of sentinels ("host:port", port 26379
// when left out): every connection asks the sentinels where the primary is and confirms its role
// first, so a failover is followed and no call goes to a replica. The options are those of
// NewRedis; credentials and a database go in the URL form instead, given to NewRedis:
// redis+sentinel://[user:password@]host:port[,host:port...]/service[/db].
func NewSentinel(sentinels []string, service string, opts ...Option) (*Backend, error) {
	if sentinels == nil {
		sentinels = []string{}
	}
	place := map[string]any{"addresses": sentinels, "service": service}
	b, err := newBackend(map[string]any{"kind": "sentinel", "sentinel": place}, opts)
	var e *Error
	if errors.As(err, &e) && strings.HasPrefix(e.Parameter, "sentinel.") {
		// The library names the fields of its JSON object; Go's are the arguments.
		named := strings.TrimPrefix(strings.Replace(e.Parameter, "sentinel.addresses", "sentinels", 1), "sentinel.")
		e.Message = strings.Replace(e.Message, "`"+e.Parameter+"`", "`"+named+"`", 1)
		e.Parameter = named
	}
	return b, err
}

// clientName is how this process's limiters are listed in the registry ("go 1.19.8").
var clientName = "go " + strings.TrimPrefix(runtime.Version(), "go")

func newBackend(fields map[string]any, opts []Option) (*Backend, error) {
	c := &config{fields: fields}
	for _, opt := range opts {
		opt(c)
	}
	c.fields["client"] = clientName
	for k, v := range c.fields {
		if s, ok := v.(string); ok && strings.IndexByte(s, 0) >= 0 {
			return nil, invalidArgument(k, "must not contain a NUL byte")
		}
	}
	js, err := json.Marshal(c.fields)
	if err != nil {
		return nil, invalidArgument("options", err.Error())
	}
	jsText, _ := text(string(js), "options")
	b := &Backend{remote: c.fields["kind"] != "memory"}
	if c.clock != nil {
		if !c.clock.handle.enter() {
			return nil, closedError()
		}
		defer c.clock.handle.leave()
		err = call(func() status { return C.rk_backend_new_from_json_with_clock(jsText.ptr(), c.clock.ptr, &b.ptr) })
	} else {
		err = call(func() status { return C.rk_backend_new_from_json(jsText.ptr(), &b.ptr) })
	}
	if err != nil {
		return nil, err
	}
	runtime.SetFinalizer(b, (*Backend).Close)
	return b, nil
}

// Close frees the backend (a Redis backend first sends this process's pending metrics and
// registrations). Limiters built from it keep working. It waits for calls in flight; later
// calls on the backend fail with ErrClosed. Safe to call more than once.
func (b *Backend) Close() error {
	b.handle.close(func() { C.rk_backend_free(b.ptr) })
	return nil
}

// use runs f with the backend's handle held open.
func (b *Backend) use(f func(*C.rk_backend) status) error {
	if !b.handle.enter() {
		return closedError()
	}
	defer b.handle.leave()
	return call(func() status { return f(b.ptr) })
}

// SetLimit overrides the spec of limiter name (key "": the whole limiter; else one key) in
// every process using the backend, live. spec is JSON as for FromSpec.
func (b *Backend) SetLimit(name, spec, key string) error {
	n, err := text(name, "name")
	if err != nil {
		return err
	}
	s, err := text(spec, "spec")
	if err != nil {
		return err
	}
	k, err := keyText(key)
	if err != nil {
		return err
	}
	return b.use(func(p *C.rk_backend) status { return C.rk_backend_set_limit(p, n.ptr(), s.ptr(), k.ptr()) })
}

// ClearLimit removes the override of limiter name, or of one of its keys (nothing if none).
func (b *Backend) ClearLimit(name, key string) error {
	n, err := text(name, "name")
	if err != nil {
		return err
	}
	k, err := keyText(key)
	if err != nil {
		return err
	}
	return b.use(func(p *C.rk_backend) status { return C.rk_backend_clear_limit(p, n.ptr(), k.ptr()) })
}

// Flush sends this process's pending metric counts and registrations to Redis now (they are
// sent once a second anyway): call it before a short-lived process exits.
func (b *Backend) Flush() error {
	return b.use(func(p *C.rk_backend) status { return C.rk_backend_flush(p) })
}

// LimitersJSON lists every limiter the backend knows (on Redis: every process's, in any
// language), as the JSON array rk_backend_limiters_json documents.
func (b *Backend) LimitersJSON() ([]byte, error) {
	return b.ownedText(func(p *C.rk_backend, out **C.char) status { return C.rk_backend_limiters_json(p, out) })
}

// MetricsJSON returns every limiter's metrics as JSON (fleet: every process's, from Redis).
func (b *Backend) MetricsJSON(fleet bool) ([]byte, error) {
	return b.ownedText(func(p *C.rk_backend, out **C.char) status {
		return C.rk_backend_metrics_json(p, C.bool(fleet), out)
	})
}

// Metrics is one limiter's counters (the JSON of MetricsJSON has them all).
type Metrics struct {
	// Name and Kind identify the limiter.
	Name, Kind string
	// Allowed, Refused and Errors count checks by outcome.
	Allowed, Refused, Errors uint64
}

// Metrics returns every limiter's main counters in this process.
func (b *Backend) Metrics() ([]Metrics, error) {
	js, err := b.MetricsJSON(false)
	if err != nil {
		return nil, err
	}
	var rows []struct {
		Name    string `json:"name"`
		Kind    string `json:"kind"`
		Metrics struct {
			Allowed uint64 `json:"allowed"`
			Refused uint64 `json:"refused"`
			Errors  uint64 `json:"errors"`
		} `json:"metrics"`
	}
	if err := json.Unmarshal(js, &rows); err != nil {
		return nil, &Error{Kind: ErrInternal, Message: "metrics JSON: " + err.Error()}
	}
	out := make([]Metrics, len(rows))
	for i, r := range rows {
		out[i] = Metrics{Name: r.Name, Kind: r.Kind, Allowed: r.Metrics.Allowed, Refused: r.Metrics.Refused, Errors: r.Metrics.Errors}
	}
	return out, nil
}

// Prometheus returns every limiter's metrics in the Prometheus text format 0.0.4 (fleet:
// every process's, from Redis).
func (b *Backend) Prometheus(fleet bool) ([]byte, error) {
	return b.ownedText(func(p *C.rk_backend, out **C.char) status {
		return C.rk_backend_prometheus(p, C.bool(fleet), out)
	})
}

// PrometheusHandler serves this process's metrics in the Prometheus text format (mount it at
// /metrics); a backend failure is a 503.
func (b *Backend) PrometheusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		text, err := b.Prometheus(false)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(text)
	})
}

// ownedText runs a call returning a string the library allocated, copies it and frees it.
func (b *Backend) ownedText(f func(*C.rk_backend, **C.char) status) ([]byte, error) {
	var out *C.char
	if err := b.use(func(p *C.rk_backend) status { return f(p, &out) }); err != nil {
		return nil, err
	}
	defer C.rk_string_free(out)
	return []byte(C.GoString(out)), nil
}
