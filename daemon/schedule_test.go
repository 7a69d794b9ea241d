package daemon_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/ops"
	"github.com/syncd/syncd/syncer"
)

// The schedule fires again and again, each run picks up the rows written
// since the last one, and /metrics counts exactly what was synced.
func TestScheduleFiresAndMetricsMatch(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 2500)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "page_size: 1000\nlookback: 0s\n^schedule: \"@every 1s\"")
	started := time.Now()
	clock := newFakeClock()
	d := startDaemon(t, path, func(o *daemon.Options) { o.Clock = clock })

	// The start-up run; the schedule does not fire until the clock moves.
	testutil.Eventually(t, 20*time.Second, "the start-up run's end", func() bool {
		return testutil.Scrape(t, d.addr).Series[`syncd_runs_total{outcome="ok",source="orders"}`] == 1
	})
	f.requireEqual(t, "src", "copy")
	m := testutil.Scrape(t, d.addr).Series
	want := map[string]float64{
		`syncd_rows_read_total{source="orders"}`:    2500,
		`syncd_rows_applied_total{source="orders"}`: 2500,
		`syncd_pages_total{source="orders"}`:        3, // 1000, 1000, 500 (short: caught up)
		`syncd_retries_total{source="orders"}`:      0,
		`syncd_source_failed{source="orders"}`:      0,
		`syncd_build_info{version="test"}`:          1,
	}
	if m["process_start_time_seconds"] <= 0 || m["go_goroutines"] <= 0 {
		t.Error("no process or Go runtime metrics")
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}

	f.insert(t, "src", 2501, 3200)
	f.db.Exec(t, `UPDATE src SET v = 'changed', updated_at = clock_timestamp() WHERE id <= 10`)
	clock.fire(t)
	testutil.Eventually(t, 20*time.Second, "the scheduled run's end", func() bool {
		return testutil.Scrape(t, d.addr).Series[`syncd_runs_total{outcome="ok",source="orders"}`] == 2
	})
	f.requireEqual(t, "src", "copy")
	m = testutil.Scrape(t, d.addr).Series
	scraped := time.Now()
	want = map[string]float64{
		`syncd_rows_read_total{source="orders"}`:    3210,
		`syncd_rows_applied_total{source="orders"}`: 3210,
		`syncd_pages_total{source="orders"}`:        4,
	}
	for k, v := range want {
		if got := m[k]; got != v {
			t.Errorf("%s = %v, want %v", k, got, v)
		}
	}
	if n := m[`syncd_run_duration_seconds_count{source="orders"}`]; n != 2 || m[`syncd_run_duration_seconds_sum{source="orders"}`] <= 0 {
		t.Errorf("run duration histogram counts %v runs", n)
	}
	for _, o := range []string{"failed", "skipped", "stopped"} {
		if v := m[`syncd_runs_total{outcome="`+o+`",source="orders"}`]; v != 0 {
			t.Errorf("runs_total %s = %v, want 0", o, v)
		}
	}
	// Every kind's error series exists from the start, at 0 (so that
	// increase() shows a kind's first error).
	for k, v := range m {
		if strings.HasPrefix(k, "syncd_errors_total") && v != 0 {
			t.Errorf("unexpected error: %s = %v", k, v)
		}
	}
	if _, ok := m[`syncd_errors_total{kind="connection",source="orders"}`]; !ok {
		t.Errorf("syncd_errors_total{kind=\"connection\"} does not exist before the first connection error")
	}
	last := m[`syncd_last_success_timestamp_seconds{source="orders"}`]
	if last < float64(started.Unix()) || last > float64(scraped.Unix()+1) {
		t.Errorf("last success %v is not between the start %d and now %d", last, started.Unix(), scraped.Unix())
	}
	var newest time.Time
	if err := f.db.Pool.QueryRow(context.Background(), "SELECT max(updated_at) FROM src").Scan(&newest); err != nil {
		t.Fatal(err)
	}
	lag := m[`syncd_newest_row_age_seconds{source="orders"}`]
	if wantLag := scraped.Sub(newest).Seconds(); math.Abs(lag-wantLag) > 1 {
		t.Errorf("newest row age = %.3fs, want now minus the newest synced updated_at = %.3fs", lag, wantLag)
	}
	if n := d.logs.Count("run done", "source", "orders"); n != 2 {
		t.Errorf("%d \"run done\" records, want one per run: 2", n)
	}

	// /status is the document of `syncd status --json`.
	code, body := httpGet(t, "http://"+d.addr+"/status")
	if code != http.StatusOK {
		t.Fatalf("GET /status: %d %s", code, body)
	}
	var st ops.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Sources) != 1 || st.Sources[0].Name != "orders" || st.Sources[0].LastStatus != "ok" || st.Sources[0].RowsTotal != 3210 {
		t.Errorf("status = %+v", st)
	}
	if code, body := httpGet(t, "http://"+d.addr+"/healthz"); code != 200 {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := httpGet(t, "http://"+d.addr+"/readyz"); code != 200 {
		t.Errorf("/readyz: %d %s", code, body)
	}
	if err := d.shutdown(t); err != nil {
		t.Errorf("graceful stop: %v", err)
	}
}

// A tick that finds the previous run still going is skipped, logged and
// counted, and the run itself is not disturbed.
func TestTickSkippedWhileRunning(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 200)
	path := f.source(t, "slow.yaml", "slow", "src", "copy", "page_size: 20\n^schedule: \"@every 1s\"")
	clock := newFakeClock()
	// The start-up run holds after its first page until the tick came.
	held := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	d := startDaemon(t, path, func(o *daemon.Options) {
		o.Clock = clock
		o.Test.AfterCommit = func(_ context.Context, at syncer.Commit) error {
			if at.Source == "slow" && at.Page == 1 {
				once.Do(func() { close(held) })
				<-release
			}
			return nil
		}
	})
	var released sync.Once
	free := func() { released.Do(func() { close(release) }) }
	t.Cleanup(free) // before the daemon's stop, which waits for the run
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the start-up run committed no page within 30s")
	}
	clock.fire(t)
	testutil.Eventually(t, 10*time.Second, "the skipped tick counted", func() bool {
		return testutil.Scrape(t, d.addr).Series[`syncd_skipped_ticks_total{source="slow"}`] == 1
	})
	if n := d.logs.Count("tick skipped: the previous run of this source is still going", "source", "slow", "job", "sync"); n != 1 {
		t.Errorf("%d records say the tick was skipped, want 1", n)
	}
	free()
	testutil.Eventually(t, 20*time.Second, "the start-up run's end", func() bool {
		return testutil.Scrape(t, d.addr).Series[`syncd_runs_total{outcome="ok",source="slow"}`] == 1
	})
	f.requireEqual(t, "src", "copy")
	m := testutil.Scrape(t, d.addr).Series
	if m[`syncd_pages_total{source="slow"}`] < 10 || m[`syncd_retries_total{source="slow"}`] != 0 || m[`syncd_skipped_ticks_total{source="slow"}`] != 1 {
		t.Errorf("pages %v (want at least 10 of 20 rows) retries %v (want 0) skipped ticks %v (want 1)",
			m[`syncd_pages_total{source="slow"}`], m[`syncd_retries_total{source="slow"}`], m[`syncd_skipped_ticks_total{source="slow"}`])
	}
}

// A config with a reconcile section is reconciled on its own schedule with
// its own repair setting, and what it finds feeds the metrics: with repair
// the daemon mends the copy; without, it leaves the copy and reports
// exactly what differs and how many rows it could not compare yet.
func TestReconcileScheduled(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 10)
	f.table(t, "src2", 10)
	f.source(t, "fixed.yaml", "fixed", "src", "copy", "^schedule: \"@every 1h\"\n^reconcile:\n^  schedule: \"@every 1s\"\n^  repair: true")
	f.source(t, "kept.yaml", "kept", "src2", "copy2", "^schedule: \"@every 1h\"\n^reconcile:\n^  schedule: \"@every 1s\"\n^  repair: false")
	clock := newFakeClock()
	d := startDaemon(t, f.dir, func(o *daemon.Options) { o.Clock = clock })
	// The start-up run copies both; the hourly schedule runs no other.
	testutil.Eventually(t, 20*time.Second, "both start-up runs", func() bool {
		m := testutil.Scrape(t, d.addr).Series
		return m[`syncd_runs_total{outcome="ok",source="fixed"}`] == 1 && m[`syncd_runs_total{outcome="ok",source="kept"}`] == 1
	})
	f.requireEqual(t, "src", "copy")
	f.requireEqual(t, "src2", "copy2")
	// Two rows lost and one changed in each copy; five rows past kept's
	// watermark that no run copies before the next hour.
	f.db.Exec(t, `DELETE FROM copy WHERE id IN (1, 2); UPDATE copy SET v = 'broken' WHERE id = 3;
DELETE FROM copy2 WHERE id IN (1, 2); UPDATE copy2 SET v = 'broken' WHERE id = 3`)
	f.insert(t, "src2", 11, 15)

	// Both reconcile schedules tick: each first fires one period after it
	// was scheduled plus its place in the period, so within two seconds.
	clock.advance(t, 2*time.Second)
	testutil.Eventually(t, 20*time.Second, "the repair of fixed by its reconcile", func() bool { return f.diff(t, "src", "copy") == 0 })
	testutil.Eventually(t, 20*time.Second, "kept's differences and fixed's reconcile counted", func() bool {
		m := testutil.Scrape(t, d.addr).Series
		return m[`syncd_reconcile_runs_total{outcome="ok",source="fixed"}`] >= 1 &&
			m[`syncd_reconcile_differences{kind="missing",source="kept"}`] == 2 &&
			m[`syncd_reconcile_differences{kind="changed",source="kept"}`] == 1 &&
			m[`syncd_reconcile_not_covered_rows{reason="pending",source="kept"}`] == 5
	})
	m := testutil.Scrape(t, d.addr).Series
	for _, src := range []string{"fixed", "kept"} {
		if m[`syncd_reconcile_runs_total{outcome="ok",source="`+src+`"}`] < 1 {
			t.Errorf("no ok reconcile of %s counted", src)
		}
		if got := m[`syncd_runs_total{outcome="ok",source="`+src+`"}`]; got != 1 {
			t.Errorf("%s: %v ok runs, want 1: only a reconcile may have touched the copy", src, got)
		}
	}
	for kind, want := range map[string]float64{"extra": 0, "duplicate": 0, "null_key": 0} {
		if got := m[`syncd_reconcile_differences{kind="`+kind+`",source="kept"}`]; got != want {
			t.Errorf("kept: reconcile differences %s = %v, want %v", kind, got, want)
		}
	}
	if got, ok := m[`syncd_reconcile_not_covered_rows{reason="no_watermark",source="kept"}`]; !ok || got != 0 {
		t.Errorf("kept: not covered no_watermark = %v (present %v), want 0", got, ok)
	}
	// repair: false left kept's copy as it was: 2 missing, 1 changed, 5 not copied yet.
	if got := f.diff(t, "src2", "copy2"); got != 8 {
		t.Errorf("kept's copy differs in %d rows, want 8 (left unrepaired)", got)
	}
	// After the repair, fixed's next reconcile finds nothing left.
	clock.advance(t, time.Second)
	testutil.Eventually(t, 20*time.Second, "fixed's differences at zero after its repair", func() bool {
		m := testutil.Scrape(t, d.addr).Series
		return m[`syncd_reconcile_differences{kind="missing",source="fixed"}`] == 0 &&
			m[`syncd_reconcile_differences{kind="changed",source="fixed"}`] == 0
	})
	f.requireEqual(t, "src", "copy")
}
