package daemon_test

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/ops"
)

// A quiet source synced every second is fresh to within seconds although
// its newest row is a day old; /status and /metrics show the same
// freshness and the same row counters, re-read rows counted apart from
// rows written, also for counts made before the daemon started.
func TestFreshnessAndCountersAgree(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 500)
	f.db.Exec(t, `UPDATE src SET updated_at = now() - interval '1 day'`)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "lookback: 0s\n^schedule: \"@every 1s\"")
	state := filepath.Join(t.TempDir(), "state.db")
	// Before the daemon: the copy is made, then read again from the start
	// (every row unchanged).
	copyThenResync(t, path, state)
	addr := testutil.FreeAddr(t)
	p := syncd.Start(t, nil, "run", "--config", path, "--state", state, "--listen", addr, "--log-level", "debug") // idle runs log "run done" at debug
	testutil.Eventually(t, 30*time.Second, "three runs", func() bool { return p.Output.Count("run done") >= 3 })

	_, body := httpGet(t, "http://"+addr+"/status")
	m := testutil.Scrape(t, addr).Series
	var st ops.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || len(st.Sources) != 1 {
		t.Fatalf("GET /status: %v: %s", err, body)
	}
	s := st.Sources[0]
	counters := map[string]int64{
		"syncd_rows_read_total":      s.RowsRead,
		"syncd_rows_written_total":   s.RowsWritten,
		"syncd_rows_deleted_total":   s.RowsDeleted,
		"syncd_rows_unchanged_total": s.RowsUnchanged,
		"syncd_rows_applied_total":   s.RowsTotal,
	}
	for name, v := range counters {
		if got, ok := m[name+`{source="orders"}`]; !ok || got != float64(v) {
			t.Errorf("%s = %v (present %v) in /metrics, but /status says %d", name, got, ok, v)
		}
	}
	if s.RowsRead != 1000 || s.RowsWritten != 500 || s.RowsUnchanged != 500 || s.RowsDeleted != 0 {
		t.Errorf("rows read %d, written %d, unchanged %d, deleted %d; want 1000 read (500 twice), 500 written, 500 unchanged, 0 deleted",
			s.RowsRead, s.RowsWritten, s.RowsUnchanged, s.RowsDeleted)
	}

	if s.FreshnessSeconds == nil || *s.FreshnessSeconds > 5 || *s.FreshnessSeconds < 0 {
		t.Errorf("freshness in /status = %v, want a few seconds for a source synced every second", s.FreshnessSeconds)
	}
	if v, ok := m[`syncd_freshness_seconds{source="orders"}`]; !ok || v > 5 || v < 0 {
		t.Errorf("syncd_freshness_seconds = %v (present %v), want a few seconds", v, ok)
	}
	caught, err := time.Parse(time.RFC3339Nano, s.CaughtUp)
	if err != nil {
		t.Fatalf("caught_up %q: %v", s.CaughtUp, err)
	}
	if v := m[`syncd_last_caught_up_timestamp_seconds{source="orders"}`]; math.Abs(v-float64(caught.UnixNano())/1e9) > 2 {
		t.Errorf("syncd_last_caught_up_timestamp_seconds = %v, /status caught_up = %s", v, s.CaughtUp)
	}
	day := (24 * time.Hour).Seconds()
	if s.NewestRowAgeSeconds == nil || *s.NewestRowAgeSeconds < day-60 {
		t.Errorf("newest row age in /status = %v, want about a day", s.NewestRowAgeSeconds)
	}
	if v := m[`syncd_newest_row_age_seconds{source="orders"}`]; v < day-60 {
		t.Errorf("syncd_newest_row_age_seconds = %v, want about a day", v)
	}
	// The status table shows freshness, not the newest row's age, as how
	// far the copy is behind.
	r := syncd.Run(t, nil, "status", "--config", path, "--state", state)
	if r.Code != 0 || !strings.Contains(r.Stdout, "FRESHNESS") || !strings.Contains(r.Stdout, "NEWEST ROW AGE") || !strings.Contains(r.Stdout, "24h0") {
		t.Errorf("status table: exit %d: %s%s", r.Code, r.Stdout, r.Stderr)
	}
	p.Signal(t, syscall.SIGTERM)
	if c := p.Wait(t, 10*time.Second).Code; c != 0 {
		t.Fatalf("exit %d after SIGTERM", c)
	}
	// Without the daemon, status reads the same from the state file.
	if st := statusOf(t, path, state).Sources[0]; st.FreshnessSeconds == nil || *st.FreshnessSeconds > 10 || st.RowsRead < 1000 {
		t.Errorf("status from the state file: freshness %v, rows read %d", st.FreshnessSeconds, st.RowsRead)
	}
}

// A long run logs where it starts, then a progress line at most every
// 10 s with the planner's estimate of the rows left; status shows the
// source as running with its progress, and not once the run is over.
func TestRunningSourceShowsProgress(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 1000)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "page_size: 100\n^schedule: \"@every 1h\"")
	state := filepath.Join(t.TempDir(), "state.db")
	copyThenResync(t, path, state)
	f.db.Exec(t, `ANALYZE src`)
	// A transaction holding the copy in SHARE mode blocks the run's first
	// write: the run is going, with no page done yet.
	ctx := context.Background()
	tx, err := f.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `LOCK TABLE copy IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	p := syncd.Start(t, nil, "run", "--config", path, "--state", state, "--listen", "")
	testutil.Eventually(t, 20*time.Second, "run started", func() bool { return p.Output.Count("run started") == 1 })
	if p.Output.Count("run started", "from", "the start") != 1 {
		t.Errorf("the run started line does not say it starts from the start")
	}
	var st ops.Status
	testutil.Eventually(t, 10*time.Second, "status to show the run", func() bool {
		r := syncd.Run(t, nil, "status", "--config", path, "--state", state, "--json")
		return r.Code == 0 && json.Unmarshal([]byte(r.Stdout), &st) == nil && st.Sources[0].Running != nil
	})
	run := st.Sources[0].Running
	if run.From != "the start" || run.Rows != 0 || run.Estimate < 900 || run.Estimate > 1100 || run.Left != run.Estimate || run.ETASeconds != -1 {
		t.Errorf("running = %+v; want from the start, 0 rows, about 1000 estimated and left, no ETA yet", *run)
	}
	r := syncd.Run(t, nil, "status", "--config", path, "--state", state)
	if r.Code != 0 || !strings.Contains(r.Stdout, "running: 0 rows from the start") {
		t.Errorf("status table while running: exit %d: %s%s", r.Code, r.Stdout, r.Stderr)
	}
	testutil.Eventually(t, 15*time.Second, "a progress line", func() bool { return p.Output.Count("run progress") >= 1 })
	rec, _ := p.Output.Find("run progress")
	if _, ok := rec.Get("rows_left_estimate"); !ok || !rec.Match("", "rows", 0, "eta", "unknown", "rows_per_second", 0) {
		t.Errorf("progress record %v, want 0 rows, an estimate of the rows left, eta unknown, 0 rows per second", rec)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "run done", func() bool { return p.Output.Count("run done") == 1 })
	if n := p.Output.Count("run progress"); n > 2 {
		t.Errorf("%d progress lines for a run of about 10 s, want at most one per 10 s", n)
	}
	r = syncd.Run(t, nil, "status", "--config", path, "--state", state, "--json")
	st = ops.Status{}
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &st) != nil || st.Sources[0].Running != nil || st.Sources[0].RowsRead != 2000 {
		t.Errorf("status after the run: exit %d: %s", r.Code, r.Stdout)
	}
	f.requireEqual(t, "src", "copy")
	p.Signal(t, syscall.SIGTERM)
	if c := p.Wait(t, 10*time.Second).Code; c != 0 {
		t.Fatalf("exit %d after SIGTERM", c)
	}
}

// copyThenResync copies source orders with run --once, then moves its
// watermark back to the start: the next run reads every row again.
func copyThenResync(t *testing.T, path, state string) {
	t.Helper()
	for _, args := range [][]string{
		{"run", "--once", "--config", path, "--state", state},
		{"resync", "--config", path, "--state", state, "--source", "orders", "--from-start"},
	} {
		if r := syncd.Run(t, nil, args...); r.Code != 0 {
			t.Fatalf("syncd %s: exit %d: %s", args[0], r.Code, r.Stderr)
		}
	}
}
