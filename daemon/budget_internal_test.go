package daemon

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/syncd/syncd/internal/testutil"
)

// The budget lets n jobs run, queues the others first in, first out, hands
// a released slot to the first waiter, and lets a waiter go at the stop
// without taking a slot.
func TestBudgetQueuesInOrderAndStops(t *testing.T) {
	b := newBudget(2, newBudgetMetrics(prometheus.NewRegistry()))
	stop := make(chan struct{})
	for i := range 2 {
		if !b.acquire(stop) {
			t.Fatalf("job %d of the first two did not get a slot at once", i)
		}
	}
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			if b.acquire(stop) {
				order <- i
			} else {
				order <- -1 - i
			}
		}()
		// Queued in turn: wait until this one waits.
		testutil.Eventually(t, 10*time.Second, "the job to queue", func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			return len(b.queue) == i+1
		})
	}
	b.release()
	if got := <-order; got != 0 {
		t.Fatalf("the released slot went to job %d, want the first waiter, 0", got)
	}
	close(stop)
	for range 2 {
		if got := <-order; got >= 0 {
			t.Fatalf("job %d got a slot after the stop, want none", got)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running != 2 || len(b.queue) != 0 {
		t.Fatalf("running %d, queued %d after the stop; want 2 (one of the first two, and job 0) and 0", b.running, len(b.queue))
	}
}
