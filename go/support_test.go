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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The Redis servers of the tests: real redis-server processes on free loopback ports (never
// 6379), started through the fixture every suite shares (rk-test-redis, the binary of the
// workspace's test-support crate: RK_TEST_REDIS, else target/debug/rk-test-redis) and stopped
// by pid when the tests end. The fixture's servers outlive the process that asked for them, so
// a test binary that crashes (a panic in a goroutine, a fatal error, a kill) would leave them
// running: each binary lists its servers in a file named by its pid under serversDir, and the
// next binary's TestMain stops the servers of every list whose owner is gone.

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
	err = writeServerList(started)
	serversMu.Unlock()
	return parsed.Servers, err
}

// serversDir holds one list of servers per running test binary, named by its pid.
func serversDir() string { return filepath.Join(os.TempDir(), "ratekeeper-go-test-servers") }

// writeServerList records this binary's servers, for the next binary to stop should this one
// crash before its TestMain does.
func writeServerList(servers []server) error {
	if err := os.MkdirAll(serversDir(), 0o700); err != nil {
		return err
	}
	list, err := json.Marshal(servers)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(serversDir(), strconv.Itoa(os.Getpid())+".json"), list, 0o600)
}

// stopServers stops servers by pid through the fixture.
func stopServers(servers []server) error {
	if len(servers) == 0 {
		return nil
	}
	args := []string{"stop"}
	for _, s := range servers {
		args = append(args, strconv.Itoa(s.Pid))
	}
	if out, err := exec.Command(fixture(), args...).CombinedOutput(); err != nil {
		return fmt.Errorf("rk-test-redis stop: %v: %s", err, out)
	}
	return nil
}

// reapOrphans stops the servers listed by test binaries that are gone: those still running as
// the redis-server on the listed port (a pid reused by another process is left alone).
func reapOrphans() error {
	entries, err := os.ReadDir(serversDir())
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		owner, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".json"))
		if err != nil || owner == os.Getpid() || syscall.Kill(owner, 0) != syscall.ESRCH {
			continue // not a list, ours, or its binary still runs
		}
		path := filepath.Join(serversDir(), e.Name())
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var servers, orphans []server
		if err := json.Unmarshal(raw, &servers); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		for _, s := range servers {
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.Pid))
			if err == nil && strings.Contains(string(cmdline), "redis-server") && strings.Contains(string(cmdline), ":"+strconv.Itoa(s.Port)) {
				orphans = append(orphans, s)
			}
		}
		if err := stopServers(orphans); err != nil {
			return err
		}
		if err := os.Remove(path); err != nil {
			return err
		}
	}
	return nil
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
	if os.Getenv(crashChild) != "" {
		crashWithAServer()
	}
	if err := reapOrphans(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the servers of crashed test binaries:", err)
	}
	code := m.Run()
	serversMu.Lock()
	if err := stopServers(started); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		os.Remove(filepath.Join(serversDir(), strconv.Itoa(os.Getpid())+".json"))
	}
	serversMu.Unlock()
	os.Exit(code)
}

// running says whether process pid exists and has not exited (a zombie has).
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

// crashChild makes this test binary start a server and die without stopping it (a crash), for
// TestServersOfACrashedBinaryAreStopped.
const crashChild = "RK_GO_TEST_CRASH_WITH_A_SERVER"

func crashWithAServer() {
	servers, err := startServers()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(servers[0].Pid)
	os.Exit(3) // no TestMain epilogue, as after a panic
}

// A test binary that dies with a server running leaves a list that the next one's reapOrphans
// uses to stop it.
func TestServersOfACrashedBinaryAreStopped(t *testing.T) {
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), crashChild+"=1")
	out, err := child.Output()
	if e, ok := err.(*exec.ExitError); !ok || e.ExitCode() != 3 {
		t.Fatalf("the child: %v (%s)", err, out)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("the child printed %q", out)
	}
	if !running(pid) {
		t.Fatalf("the crashed child's server %d is not running: nothing to test", pid)
	}
	if err := reapOrphans(); err != nil {
		t.Fatal(err)
	}
	// Killed and waited for by the fixture; the exit may take a moment to show in /proc.
	for deadline := time.Now().Add(10 * time.Second); running(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the crashed child's server %d still runs after reapOrphans", pid)
		}
	}
	if _, err := os.Stat(filepath.Join(serversDir(), strconv.Itoa(child.Process.Pid)+".json")); !os.IsNotExist(err) {
		t.Fatalf("the crashed child's list is still there: %v", err)
	}
}
