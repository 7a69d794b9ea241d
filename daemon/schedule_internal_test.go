package daemon

import (
	"sync"
	"testing"
	"time"
)

// stepClock is a Clock a test moves to the next time the scheduler waits
// for.
type stepClock struct {
	mu      sync.Mutex
	now     time.Time
	at      time.Time
	ch      chan struct{}
	waiting chan struct{} // receives when the scheduler starts a wait
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) At(t time.Time) (<-chan struct{}, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.ch = t, make(chan struct{})
	select {
	case c.waiting <- struct{}{}:
	default:
	}
	return c.ch, func() {}
}

// step waits for the scheduler's wait and moves the clock to its end.
func (c *stepClock) step(t *testing.T) {
	t.Helper()
	select {
	case <-c.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the scheduler did not wait for a tick")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.at
	close(c.ch)
}

// Each entry fires once per tick of its schedule, by the clock it is
// given; a removed entry no longer fires; stop waits for the jobs going.
func TestSchedulerFiresByItsClock(t *testing.T) {
	clock := &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), waiting: make(chan struct{}, 1)}
	s := newScheduler(clock)
	fired := make(chan string, 10)
	release := make(chan struct{})
	if _, err := s.add("@every 1s", func() { fired <- "a" }); err != nil {
		t.Fatal(err)
	}
	b, err := s.add("@every 1s", func() { fired <- "b"; <-release })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.add("not a schedule", func() {}); err == nil {
		t.Fatal("a bad spec was accepted")
	}
	s.start()
	clock.step(t)
	got := map[string]int{}
	for range 2 {
		got[<-fired]++
	}
	if got["a"] != 1 || got["b"] != 1 || !clock.Now().Equal(time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)) {
		t.Fatalf("first tick at %v fired %v, want a and b once at 00:00:01", clock.Now(), got)
	}
	s.remove(b)
	clock.step(t)
	if f := <-fired; f != "a" {
		t.Fatalf("second tick fired %s, want a", f)
	}
	done := s.stop()
	select {
	case <-done:
		t.Fatal("stop did not wait for b's job in flight")
	default: // b's job is held until release
	}
	close(release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not end after the job did")
	}
	select {
	case f := <-fired:
		t.Fatalf("%s fired after the stop", f)
	default:
	}
}
