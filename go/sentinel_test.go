package ratekeeper

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A Sentinel-managed primary (rk-test-redis start --sentinel: a primary, two replicas, three
// redis-server --sentinel): NewSentinel and the redis+sentinel:// URL reach the same primary, and
// WithReplicaAcks beyond the replicas there are fails the call as unavailable.
func TestSentinel(t *testing.T) {
	servers, err := startServers("--sentinel")
	if err != nil {
		t.Fatal(err)
	}
	var sentinels []string
	for _, s := range servers[3:] { // the data nodes first, then the sentinels
		sentinels = append(sentinels, "127.0.0.1:"+strconv.Itoa(s.Port))
	}
	ctx, prefix := context.Background(), uniquePrefix()
	b := must[*Backend](t)(NewSentinel(sentinels, "rkprimary", WithPrefix(prefix), WithDeadline(5*time.Second)))
	defer b.Close()
	lim := must[*Limiter](t)(b.Window("w", 10, time.Minute))
	if d := must[Decision](t)(lim.Check(ctx, "k")); !d.Allowed {
		t.Fatalf("refused: %+v", d)
	}
	url := "redis+sentinel://" + strings.Join(sentinels, ",") + "/rkprimary"
	same := must[*Backend](t)(NewRedis(url, WithPrefix(prefix), WithDeadline(5*time.Second)))
	defer same.Close()
	if d := must[Decision](t)(must[*Limiter](t)(same.Window("w", 10, time.Minute)).Peek(ctx, "k")); d.Remaining != 9 {
		t.Fatalf("the URL form reached another server: %+v", d)
	}
	three := must[*Backend](t)(NewSentinel(sentinels, "rkprimary", WithPrefix(prefix), WithReplicaAcks(3),
		WithDeadline(time.Second)))
	defer three.Close()
	_, err = must[*Limiter](t)(three.Window("w", 10, time.Minute)).Check(ctx, "k")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "2 of the 3 replicas") {
		t.Fatalf("want ErrUnavailable naming the replicas that acknowledged, got %v", err)
	}
}
