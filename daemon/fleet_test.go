package daemon_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testutil"
)

// Sixty small tables in one pattern at @every 1s with a budget of three:
// every copy is made and equals its table, no more than three jobs ever
// run at once (counted from the daemon's own start and end records, which
// it writes inside its slot), the jobs beyond the budget wait (the wait
// metric counts them), and once caught up the INFO log holds the summary
// lines only: no line per idle run.
func TestFleetBudgetAndQuietLog(t *testing.T) {
	f := newFixture(t)
	f.db.Exec(t, `CREATE SCHEMA copy`)
	const tables = 60
	for i := range tables {
		f.table(t, fmt.Sprintf("t%02d", i), 20)
	}
	path := filepath.Join(f.dir, "fleet.yaml")
	writeFile(t, path, fmt.Sprintf(`name: fleet
schedule: "@every 1s"
source:
  dsn: %s
  table: public.t*
  cursor: [updated_at, id]
sink:
  dsn: %s
  table: copy.*
`, f.dsn(), f.dsn()))
	addr := testutil.FreeAddr(t)
	p := syncd.Start(t, nil, "run", "--config", path, "--state", filepath.Join(t.TempDir(), "state.db"), "--listen", addr,
		"--max-concurrent-runs", "3", "--summary-every", "2s", "--log-level", "debug")
	testutil.Eventually(t, 120*time.Second, "the 60 copies", func() bool {
		var n int
		if err := f.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'copy'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == tables
	})
	for i := range tables {
		name := fmt.Sprintf("t%02d", i)
		testutil.Eventually(t, 60*time.Second, name+"'s copy equal to it", func() bool { return f.diff(t, name, "copy."+name) == 0 })
	}
	// Caught up: from the next summary on, over two more summaries and at
	// least one idle run per table, no other INFO line is written.
	from := len(p.Output.Entries())
	if !p.Output.Await(30*time.Second, func() bool { return countAfter(p.Output, from, "summary") >= 1 }) {
		t.Fatal("no summary line within 30s")
	}
	mark := lastIndex(p.Output, "summary")
	if !p.Output.Await(120*time.Second, func() bool {
		return countAfter(p.Output, mark+1, "summary") >= 2 && countAfter(p.Output, mark+1, "run done") >= tables
	}) {
		t.Fatalf("no two more summary lines and %d runs within 120s", tables)
	}
	entries := p.Output.Entries()
	idleRuns := 0
	for _, e := range entries[mark+1:] {
		switch {
		case e.Level() == "INFO" && e.Msg() != "summary":
			t.Errorf("an INFO line other than the summary while caught up: %s %v", e.Msg(), e.Text("source"))
		case e.Msg() == "summary":
			if e.Int("runs") == 0 || e.Int("runs_idle") != e.Int("runs") || e.Int("failed") != 0 || e.Int("sources") != tables {
				t.Errorf("summary while caught up: runs %d, idle %d, failed %d, sources %d; want idle runs only, of %d sources",
					e.Int("runs"), e.Int("runs_idle"), e.Int("failed"), e.Int("sources"), tables)
			}
		case e.Msg() == "run done":
			idleRuns++
		}
	}
	if idleRuns < tables {
		t.Errorf("%d idle runs (at debug level) in the window, want at least %d", idleRuns, tables)
	}
	// The budget, from the start and end records of every job.
	running, peak, jobs := 0, 0, 0
	for _, e := range entries {
		switch e.Msg() {
		case "job started":
			running++
			jobs++
			peak = max(peak, running)
		case "job ended":
			running--
		}
	}
	if peak > 3 || peak < 3 {
		t.Errorf("at most %d jobs ran at once over %d jobs, want exactly 3 (the budget, used)", peak, jobs)
	}
	m := testutil.Scrape(t, addr).Series
	if m["syncd_max_concurrent_runs"] != 3 || m["syncd_runs_running"] > 3 || m["syncd_run_wait_seconds_count"] < tables {
		t.Errorf("metrics: max %v running %v waits counted %v; want 3, at most 3, at least %d",
			m["syncd_max_concurrent_runs"], m["syncd_runs_running"], m["syncd_run_wait_seconds_count"], tables)
	}
}

// countAfter counts the records msg from index from on.
func countAfter(l *testutil.Log, from int, msg string) int {
	n := 0
	entries := l.Entries()
	for _, e := range entries[min(from, len(entries)):] {
		if e.Msg() == msg {
			n++
		}
	}
	return n
}

// lastIndex is the index of the last record msg, -1 when none.
func lastIndex(l *testutil.Log, msg string) int {
	entries := l.Entries()
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Msg() == msg {
			return i
		}
	}
	return -1
}

// A reconcile that comes due while its source's sync is going is not
// skipped: it waits for the sync and runs after it. The sync is held in
// its first page by a gate: the source's where clause takes a shared
// advisory lock the test holds exclusively until it lets go.
func TestReconcileDueWaitsForTheSync(t *testing.T) {
	f := newFixture(t)
	f.db.Exec(t, `CREATE FUNCTION gate() RETURNS boolean LANGUAGE sql VOLATILE AS 'SELECT pg_advisory_xact_lock_shared(4242) IS NOT NULL'`)
	f.table(t, "src", 50)
	ctx := context.Background()
	gate, err := f.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Release()
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_lock(4242)`); err != nil {
		t.Fatal(err)
	}
	opened := false
	open := func() {
		if !opened {
			opened = true
			if _, err := gate.Exec(ctx, `SELECT pg_advisory_unlock(4242)`); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer open()
	path := f.source(t, "gated.yaml", "gated", "src", "copy", "where: gate()\n^schedule: \"@every 1h\"\n^reconcile:\n^  schedule: \"@every 1s\"")
	addr := testutil.FreeAddr(t)
	p := syncd.Start(t, nil, "run", "--config", path, "--state", filepath.Join(t.TempDir(), "state.db"), "--listen", addr)
	// The start-up sync waits at the gate; the reconcile comes due.
	if _, ok := p.Output.AwaitEntry(30*time.Second, "reconcile due while another job of this source is going or queued: it runs when that job ends", "source", "gated"); !ok {
		t.Fatal("the reconcile did not come due while the sync was held")
	}
	// The sync's page is held at the gate meanwhile, and no reconcile ran.
	testutil.Eventually(t, 30*time.Second, "the sync's page waiting at the gate", func() bool {
		var waiting int
		if err := f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting >= 1
	})
	if n := p.Output.Count("scheduled reconcile done: the copy equals the source"); n != 0 {
		t.Fatalf("%d reconciles ran while the sync was held", n)
	}
	open()
	done, ok := p.Output.AwaitEntry(30*time.Second, "scheduled reconcile done: the copy equals the source", "source", "gated")
	if !ok {
		t.Fatal("the due reconcile did not run after the sync")
	}
	entries := p.Output.Entries()
	runDone, reconciled := -1, -1
	for i, e := range entries {
		if e.Match("run done", "source", "gated") && runDone < 0 {
			runDone = i
		}
		if e.Match("scheduled reconcile done: the copy equals the source", "source", "gated") && reconciled < 0 {
			reconciled = i
		}
	}
	if runDone < 0 || reconciled < runDone {
		t.Errorf("the reconcile (record %d, %v) did not run after the sync's end (record %d)", reconciled, done.Time(), runDone)
	}
	f.requireEqual(t, "src", "copy")
	// The outcome is counted once the reconcile's job has ended, which may
	// be just after its log line.
	testutil.Eventually(t, 30*time.Second, "the ok reconcile counted", func() bool {
		return testutil.Scrape(t, addr).Series[`syncd_reconcile_runs_total{outcome="ok",source="gated"}`] >= 1
	})
	if got := testutil.Scrape(t, addr).Series[`syncd_reconcile_runs_total{outcome="skipped",source="gated"}`]; got != 0 {
		t.Errorf("%v reconciles counted as skipped, want 0", got)
	}
	if strings.Contains(p.Output.String(), "tick skipped") {
		t.Errorf("a tick was logged as skipped at INFO")
	}
}

// A budget or a summary period that is not positive is a usage error
// (exit 2) naming the flag or the variable, before the daemon starts.
func TestBudgetFlagsRefuseNonsense(t *testing.T) {
	f := newFixture(t)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "")
	state := filepath.Join(t.TempDir(), "state.db")
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--max-concurrent-runs", "-1"}, "--max-concurrent-runs -1: give a positive number"},
		{[]string{"SYNCD_MAX_CONCURRENT_RUNS=many"}, nil, `$SYNCD_MAX_CONCURRENT_RUNS="many": give a positive number`},
		{nil, []string{"--summary-every", "-1s"}, "--summary-every -1s: give a positive duration"},
		{[]string{"SYNCD_SUMMARY_EVERY=0s"}, nil, `$SYNCD_SUMMARY_EVERY="0s": give a positive duration`},
	} {
		args := append([]string{"run", "--config", path, "--state", state, "--listen", ""}, c.args...)
		r := syncd.Run(t, c.env, args...)
		if r.Code != 2 || !strings.Contains(r.Stderr, c.want) {
			t.Errorf("%v %v: exit %d, r.Stderr %q; want 2 and %q", c.env, c.args, r.Code, r.Stderr, c.want)
		}
	}
}
