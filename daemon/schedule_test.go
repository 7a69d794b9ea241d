package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/cli"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/reconcile"
)

// The schedule fires again and again, each run picks up the rows written
// since the last one, and /metrics counts exactly what was synced.
func TestScheduleFiresAndMetricsMatch(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 2500)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "page_size: 1000\nlookback: 0s\n^schedule: \"@every 1s\"")
	started := time.Now()
	d := startDaemon(t, path, nil)

	eventually(t, 20*time.Second, "the first run to copy 2500 rows", func() bool { return f.diff(t, "src", "copy") == 0 })
	// The copy is complete a moment before the run records its end.
	eventually(t, 10*time.Second, "the first run's end", func() bool {
		return scrape(t, d.addr)[`syncd_runs_total{outcome="ok",source="orders"}`] >= 1
	})
	m := scrape(t, d.addr)
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
	eventually(t, 20*time.Second, "a scheduled run to pick up 700 new and 10 changed rows", func() bool { return f.diff(t, "src", "copy") == 0 })
	// The page's metrics are recorded a moment after its commit.
	eventually(t, 10*time.Second, "the page of 710 rows in the metrics", func() bool {
		return scrape(t, d.addr)[`syncd_pages_total{source="orders"}`] >= 4
	})
	m = scrape(t, d.addr)
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
	if n := m[`syncd_run_duration_seconds_count{source="orders"}`]; n < 1 || m[`syncd_run_duration_seconds_sum{source="orders"}`] <= 0 {
		t.Errorf("run duration histogram counts %v runs", n)
	}
	for _, o := range []string{"failed", "skipped", "stopped"} {
		if v := m[`syncd_runs_total{outcome="`+o+`",source="orders"}`]; v != 0 {
			t.Errorf("runs_total %s = %v, want 0", o, v)
		}
	}
	for k := range m {
		if strings.HasPrefix(k, "syncd_errors_total") {
			t.Errorf("unexpected error series %s", k)
		}
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
	eventually(t, 5*time.Second, "an info line per run", func() bool {
		return strings.Count(d.logs.String(), `"msg":"run done"`) >= 2
	})

	// /status is the document of `syncd status --json`.
	code, body := httpGet(t, "http://"+d.addr+"/status")
	if code != http.StatusOK {
		t.Fatalf("GET /status: %d %s", code, body)
	}
	var st cli.Status
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
	// 10 pages of 20 rows at 10 ms a row: about 2 s for one run.
	path := f.source(t, "slow.yaml", "slow", "src", "copy", "page_size: 20\nwhere: slow(10)\n^schedule: \"@every 1s\"")
	d := startDaemon(t, path, nil)
	eventually(t, 20*time.Second, "the copy", func() bool { return f.diff(t, "src", "copy") == 0 })
	eventually(t, 10*time.Second, "a skipped tick", func() bool {
		return scrape(t, d.addr)[`syncd_skipped_ticks_total{source="slow"}`] >= 1
	})
	if !strings.Contains(d.logs.String(), "tick skipped: the previous run of this source is still going") {
		t.Error("no log line says the tick was skipped")
	}
	m := scrape(t, d.addr)
	if m[`syncd_pages_total{source="slow"}`] < 10 || m[`syncd_retries_total{source="slow"}`] != 0 {
		t.Errorf("pages %v retries %v", m[`syncd_pages_total{source="slow"}`], m[`syncd_retries_total{source="slow"}`])
	}
}

// A config with a reconcile section gets the reconcile function called on
// its own schedule, counted in the metrics.
func TestReconcileScheduled(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 10)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "^schedule: \"@every 1h\"\n^reconcile:\n^  schedule: \"@every 1s\"\n^  repair: true")
	calls := make(chan string, 100)
	d := startDaemon(t, path, func(o *daemon.Options) {
		o.Reconcile = func(ctx context.Context, cfg *config.Config) (*reconcile.Report, error) {
			if !cfg.Reconcile.Repair {
				return nil, errors.New("repair not passed through")
			}
			calls <- cfg.Name
			return &reconcile.Report{Source: cfg.Name, Missing: 2, Changed: 1, Duplicate: 1, Repaired: true,
				NotCovered: map[string]int64{reconcile.ReasonPending: 5}}, nil
		}
	})
	select {
	case name := <-calls:
		if name != "orders" {
			t.Errorf("reconcile called for %q", name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reconcile was not called on its schedule")
	}
	eventually(t, 5*time.Second, "the reconcile counted", func() bool {
		return scrape(t, d.addr)[`syncd_reconcile_runs_total{outcome="ok",source="orders"}`] >= 1
	})
	m := scrape(t, d.addr)
	for kind, want := range map[string]float64{"missing": 2, "extra": 0, "changed": 1, "duplicate": 1, "null_key": 0} {
		if got := m[`syncd_reconcile_differences{kind="`+kind+`",source="orders"}`]; got != want {
			t.Errorf("reconcile differences %s = %v, want %v", kind, got, want)
		}
	}
	// Rows the reconcile could not compare, by reason.
	for reason, want := range map[string]float64{"pending": 5, "no_watermark": 0} {
		key := `syncd_reconcile_not_covered_rows{reason="` + reason + `",source="orders"}`
		if got, ok := m[key]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, want)
		}
	}
}
