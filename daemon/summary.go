package daemon

import (
	"sync"
	"time"

	"github.com/syncd/syncd/internal/saidonce"
)

// DefaultSummaryEvery is how often the daemon logs its summary line when
// Options.SummaryEvery is not set.
const DefaultSummaryEvery = time.Minute

// summary counts what the jobs did since the last summary line. A run that
// writes no row logs at debug level only (syncer.Options.QuietIdle), so on
// a daemon that has caught up this line is the INFO log.
type summary struct {
	mu sync.Mutex
	counts
	repeats int64 // saidonce.Repeats at the last summary
}

// counts are the summary's numbers.
type counts struct {
	runs       int // syncs that ended
	idle       int // of which wrote nothing
	failed     int // syncs and reconciles that failed
	reconciles int
	rows       int64 // rows read
	written    int64 // rows written (inserted, changed or removed)
	slowest    string
	slowestFor time.Duration
	maxWait    time.Duration
}

// ran records a sync that ended.
func (s *summary) ran(name string, rows, written int64, failed bool, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs++
	if written == 0 {
		s.idle++
	}
	if failed {
		s.failed++
	}
	s.rows += rows
	s.written += written
	if took > s.slowestFor {
		s.slowest, s.slowestFor = name, took
	}
}

// reconciled records a scheduled reconcile that ended.
func (s *summary) reconciled(name string, failed bool, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reconciles++
	if failed {
		s.failed++
	}
	if took > s.slowestFor {
		s.slowest, s.slowestFor = name, took
	}
}

// waited records how long a job waited for the budget.
func (s *summary) waited(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxWait = max(s.maxWait, d)
}

// take returns the counts and starts new ones.
func (s *summary) take() (counts, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.counts
	s.counts = counts{}
	now := saidonce.Repeats()
	repeated := now - s.repeats
	s.repeats = now
	return out, repeated
}

// summaries logs the summary every Options.SummaryEvery until the stop,
// when anything ran meanwhile; the channel it returns is closed when it
// ends.
func (d *daemon) summaries() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d.o.SummaryEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				d.logSummary()
			case <-d.stop:
				return
			case <-d.ctx.Done():
				return
			}
		}
	}()
	return done
}

func (d *daemon) logSummary() {
	s, repeated := d.sum.take()
	if s.runs+s.reconciles == 0 {
		return
	}
	d.mu.Lock()
	sources := len(d.sources)
	d.mu.Unlock()
	d.budget.mu.Lock()
	running, queued := d.budget.running, len(d.budget.queue)
	d.budget.mu.Unlock()
	d.log.Info("summary", "every", d.o.SummaryEvery.String(), "sources", sources, "runs", s.runs, "runs_idle", s.idle,
		"rows", s.rows, "written", s.written, "reconciles", s.reconciles, "failed", s.failed,
		"slowest", s.slowest, "slowest_duration", s.slowestFor.Round(time.Millisecond).String(),
		"max_wait", s.maxWait.Round(time.Millisecond).String(), "running", running, "queued", queued,
		"warnings_repeated", repeated)
}
