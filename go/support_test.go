package ratekeeper

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// The Redis servers of the tests: real redis-server processes on free loopback ports (never
// 6379), started through the fixture every suite shares (rk-test-redis, the binary of the
// workspace's test-support crate: RK_TEST_REDIS, else target/debug/rk-test-redis) and stopped
// by pid when the tests end.

// server is one server the fixture started.
type server struct {
	Pid  int    `json:"pid"`
	Port int    `json:"port"`
	URL  string `json:"url"`
}

var (
	serversMu           sync.Mutex
	started             []server
	standalone, cluster struct {
		once sync.Once
		urls []string
		err  error
	}
	prefixes atomic.Int64
)

// fixture is the path of rk-test-redis.
func fixture() string {
	if p := os.Getenv("RK_TEST_REDIS"); p != "" {
		return p
	}
	return filepath.Join("..", "target", "debug", "rk-test-redis")
}

// startServers runs `rk-test-redis start --json args...` and remembers the servers to stop.
func startServers(args ...string) ([]server, error) {
	out, err := exec.Command(fixture(), append([]string{"start", "--json"}, args...)...).Output()
	if err != nil {
		if e, ok := err.(*exec.ExitError); ok {
			return nil, fmt.Errorf("rk-test-redis start: %v: %s", err, e.Stderr)
		}
		return nil, fmt.Errorf("rk-test-redis start (build it: cargo build -p ratekeeper-test-support): %v", err)
	}
	var parsed struct{ Servers []server }
	if err := json.Unmarshal(out, &parsed); err != nil {
		return nil, err
	}
	serversMu.Lock()
	started = append(started, parsed.Servers...)
	serversMu.Unlock()
	return parsed.Servers, nil
}

// redisURL is the URL of the shared standalone server, started on first use.
func redisURL(t testing.TB) string {
	standalone.once.Do(func() {
		servers, err := startServers()
		standalone.err = err
		if err == nil {
			standalone.urls = []string{servers[0].URL}
		}
	})
	if standalone.err != nil {
		t.Fatal(standalone.err)
	}
	return standalone.urls[0]
}

// clusterSeeds are the seeds of the shared 3-master Redis Cluster, started on first use.
func clusterSeeds(t testing.TB) []string {
	cluster.once.Do(func() {
		servers, err := startServers("--cluster")
		cluster.err = err
		for _, s := range servers {
			cluster.urls = append(cluster.urls, s.URL)
		}
	})
	if cluster.err != nil {
		t.Fatal(cluster.err)
	}
	return cluster.urls
}

// uniquePrefix is a key prefix no other test of this process uses.
func uniquePrefix() string {
	return "go" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(prefixes.Add(1), 10)
}

// getOnce serves h on a real loopback server and makes one GET: the response and its body.
func getOnce(t *testing.T, h http.Handler) (*http.Response, []byte) {
	t.Helper()
	server := httptest.NewServer(h)
	defer server.Close()
	resp, err := http.Get(server.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func TestMain(m *testing.M) {
	code := m.Run()
	serversMu.Lock()
	if len(started) > 0 {
		args := []string{"stop"}
		for _, s := range started {
			args = append(args, strconv.Itoa(s.Pid))
		}
		if out, err := exec.Command(fixture(), args...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "rk-test-redis stop: %v: %s\n", err, out)
		}
	}
	serversMu.Unlock()
	os.Exit(code)
}
