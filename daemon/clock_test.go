package daemon_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testutil"
)

// fakeClock is a daemon.Clock that moves only when a test fires it: a
// schedule's tick happens exactly when the test says, whatever the load.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []*fakeWait
}

type fakeWait struct {
	at time.Time
	ch chan struct{}
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) At(t time.Time) (<-chan struct{}, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &fakeWait{at: t, ch: make(chan struct{})}
	if !t.After(c.now) {
		close(w.ch)
		return w.ch, func() {}
	}
	c.waits = append(c.waits, w)
	return w.ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.waits = slices.DeleteFunc(c.waits, func(x *fakeWait) bool { return x == w })
	}
}

// fire waits until the scheduler waits for its next tick, moves the clock
// to that moment and lets it fire: every schedule due then ticks once.
func (c *fakeClock) fire(t *testing.T) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "the scheduler to wait for its next tick", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.waits) > 0
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.waits[0].at
	for _, w := range c.waits {
		if w.at.Before(next) {
			next = w.at
		}
	}
	c.now = next
	c.waits = slices.DeleteFunc(c.waits, func(w *fakeWait) bool {
		if w.at.After(c.now) {
			return false
		}
		close(w.ch)
		return true
	})
}

// advance waits until the scheduler waits for its next tick and moves the
// clock by d (at least to that tick): every schedule due meanwhile ticks
// once, whatever its place in the period (the daemon spreads the ticks of
// its sources over their period).
func (c *fakeClock) advance(t *testing.T, d time.Duration) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "the scheduler to wait for its next tick", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.waits) > 0
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.waits[0].at
	for _, w := range c.waits {
		if w.at.Before(next) {
			next = w.at
		}
	}
	c.now = c.now.Add(d)
	if next.After(c.now) {
		c.now = next
	}
	c.waits = slices.DeleteFunc(c.waits, func(w *fakeWait) bool {
		if w.at.After(c.now) {
			return false
		}
		close(w.ch)
		return true
	})
}
