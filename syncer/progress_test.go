package syncer_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/syncer"
)

// A run reports its start (the "run started" line, the first progress)
// once its first page is read: a run that reads more than one page with
// the planner's estimate of its rows, a run whose first page is its last
// with that page's rows exactly, without asking the planner.
func TestRunStartedEstimateAfterFirstPage(t *testing.T) {
	f := newFixture(t)
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, now() - interval '1 hour' + g * interval '1 ms', 'v' || g FROM generate_series(1, 300) g; ANALYZE src`)
	c := f.config(t, f.db.URL, "lookback: 0s", "page_size: 100")
	run := func(t *testing.T) (first syncer.Progress, statements []string) {
		t.Helper()
		var (
			mu   sync.Mutex
			seen []syncer.Progress
			ctr  pgutil.Counter
		)
		o := f.options(c, slog.New(slog.NewTextHandler(f.logs, nil)))
		o.OnProgress = func(p syncer.Progress) {
			mu.Lock()
			if p.Phase == "" { // the pages', not a first load's
				seen = append(seen, p)
			}
			mu.Unlock()
		}
		if _, err := syncer.Run(pgutil.WithCounter(context.Background(), &ctr), o); err != nil {
			t.Fatalf("run: %v", err)
		}
		if len(seen) == 0 {
			t.Fatal("no progress reported")
		}
		return seen[0], ctr.Snapshot().Statements
	}
	explained := func(statements []string) bool {
		for _, s := range statements {
			if strings.HasPrefix(s, "EXPLAIN") {
				return true
			}
		}
		return false
	}
	p, stmts := run(t)
	if p.Rows != 0 || p.Estimate < 250 || p.Estimate > 350 || !explained(stmts) {
		t.Fatalf("first progress of a run of 3 pages: %+v, EXPLAIN sent: %v; want 0 rows and the planner's estimate, about 300", p, explained(stmts))
	}
	f.db.Exec(t, `INSERT INTO src (id, v) SELECT g, 'new' FROM generate_series(1001, 1007) g`)
	p, stmts = run(t)
	if p.Rows != 0 || p.Estimate != 7 || p.Left != 7 || explained(stmts) {
		t.Fatalf("first progress of a run of one page of 7 rows: %+v, EXPLAIN sent: %v; want an estimate of exactly 7, no EXPLAIN", p, explained(stmts))
	}
	f.assertSame(t)
	if got := strings.Count(f.logs.String(), "run started"); got != 2 {
		t.Fatalf("%d run started lines for 2 runs:\n%s", got, f.logs)
	}
}
