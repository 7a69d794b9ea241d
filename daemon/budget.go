package daemon

import (
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxConcurrentRuns is the budget of jobs (syncs and scheduled
// reconciles) that run at once when Options.MaxConcurrentRuns is not set:
// twice the CPUs, at least 2 and at most 8. A run mostly waits for its
// databases, and each one holds a session on its source and its sink.
func DefaultMaxConcurrentRuns() int {
	return min(max(2*runtime.NumCPU(), 2), 8)
}

// budget lets at most n jobs run at once; the others wait in the order
// they came (first in, first out). A source has at most one job running
// or waiting (source.busy), so a source is never queued twice.
type budget struct {
	n int
	m *budgetMetrics

	mu      sync.Mutex
	running int
	queue   []chan struct{}
}

func newBudget(n int, m *budgetMetrics) *budget {
	m.max.Set(float64(n))
	return &budget{n: n, m: m}
}

// acquire waits for a slot; false when stop closed first.
func (b *budget) acquire(stop <-chan struct{}) bool {
	began := time.Now()
	b.mu.Lock()
	if b.running < b.n && len(b.queue) == 0 {
		b.running++
		b.m.running.Set(float64(b.running))
		b.mu.Unlock()
		b.m.wait.Observe(0)
		return true
	}
	ch := make(chan struct{})
	b.queue = append(b.queue, ch)
	b.m.queued.Set(float64(len(b.queue)))
	b.mu.Unlock()
	select {
	case <-ch:
		b.m.wait.Observe(time.Since(began).Seconds())
		return true
	case <-stop:
		b.mu.Lock()
		defer b.mu.Unlock()
		for i, q := range b.queue {
			if q == ch {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				b.m.queued.Set(float64(len(b.queue)))
				return false
			}
		}
		// Handed a slot at the same moment: give it on.
		b.releaseLocked()
		return false
	}
}

// release frees a slot taken by acquire, handing it to the first waiter.
func (b *budget) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releaseLocked()
}

func (b *budget) releaseLocked() {
	if len(b.queue) > 0 {
		ch := b.queue[0]
		b.queue = b.queue[1:]
		b.m.queued.Set(float64(len(b.queue)))
		close(ch) // the slot passes to it: running is unchanged
		return
	}
	b.running--
	b.m.running.Set(float64(b.running))
}

// budgetMetrics are the series of the run budget.
type budgetMetrics struct {
	max, running, queued prometheus.Gauge
	wait                 prometheus.Histogram
}

func newBudgetMetrics(reg prometheus.Registerer) *budgetMetrics {
	m := &budgetMetrics{
		max: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_max_concurrent_runs",
			Help: "The daemon's budget of jobs (syncs and scheduled reconciles) that run at once (--max-concurrent-runs).",
		}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_runs_running",
			Help: "Jobs (syncs and scheduled reconciles) running now, at most syncd_max_concurrent_runs.",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_runs_queued",
			Help: "Jobs due that wait for a slot of the budget (at most one per source and job).",
		}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "syncd_run_wait_seconds",
			Help:    "Time a job due waited for a slot of the budget before it started.",
			Buckets: []float64{0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
	}
	reg.MustRegister(m.max, m.running, m.queued, m.wait)
	return m
}
