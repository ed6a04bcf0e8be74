package ratekeeper

import (
	"errors"
	"testing"
	"time"
)

// Sidekiq's defaults, and a policy whose delays the test can name: max(retryAfter, base * n),
// then no reschedule past the last.
func TestBackoffReschedules(t *testing.T) {
	def := must[*Backoff](t)(NewBackoff())
	defer def.Close()
	if def.Base() != 5*time.Minute || def.Jitter() != 5*time.Minute || def.MaxReschedules() != 20 {
		t.Fatalf("defaults %v %v %d, want Sidekiq's 5m 5m 20", def.Base(), def.Jitter(), def.MaxReschedules())
	}
	b := must[*Backoff](t)(NewBackoff(BackoffBase(10*time.Second), BackoffJitter(0), BackoffMaxReschedules(3)))
	defer b.Close()
	for _, c := range []struct {
		attempt    int
		retryAfter time.Duration
		delay      time.Duration
		reschedule bool
	}{
		{1, 0, 10 * time.Second, true},
		{2, 0, 20 * time.Second, true},
		{2, 45 * time.Second, 45 * time.Second, true}, // the limiter's RetryAfter is a floor
		{3, time.Second, 30 * time.Second, true},
		{4, 0, 0, false}, // past max_reschedules: fail the job
	} {
		delay, again, err := b.RescheduleIn(c.attempt, c.retryAfter)
		if err != nil || delay != c.delay || again != c.reschedule {
			t.Errorf("RescheduleIn(%d, %v) = %v, %v, %v; want %v, %v", c.attempt, c.retryAfter, delay, again, err, c.delay, c.reschedule)
		}
	}
}

// The jitter spreads delays over [base * n, base * n + jitter), the same for the same seed.
func TestBackoffJitterIsSeeded(t *testing.T) {
	delays := func(seed uint64) []time.Duration {
		b := must[*Backoff](t)(NewBackoff(BackoffBase(time.Minute), BackoffJitter(time.Minute), BackoffSeed(seed)))
		defer b.Close()
		var out []time.Duration
		for n := 1; n <= 5; n++ {
			d, _, err := b.RescheduleIn(n, 0)
			if err != nil {
				t.Fatal(err)
			}
			if low := time.Duration(n) * time.Minute; d < low || d >= low+time.Minute {
				t.Fatalf("attempt %d waits %v, outside [%v, %v)", n, d, low, low+time.Minute)
			}
			out = append(out, d)
		}
		return out
	}
	a, b := delays(7), delays(7)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 7 gave %v then %v", a, b)
		}
	}
}

func TestBackoffAfterClose(t *testing.T) {
	b := must[*Backoff](t)(NewBackoff())
	b.Close()
	b.Close()
	if _, _, err := b.RescheduleIn(1, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("RescheduleIn after Close returned %v, want ErrClosed", err)
	}
}
