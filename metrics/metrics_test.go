package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/syncd/syncd/metrics"
)

// Every series passes the Prometheus naming lint (syncd_ prefix checked
// here; base units, _total counters, help text by promlint), and a removed
// source leaves no series behind.
func TestNamesFollowConventionsAndRemoveSourceCleansUp(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "test")
	m.AddSource("orders", metrics.Totals{Read: 20, Written: 15, Deleted: 1})
	m.Page("orders", 10, 7, 1, time.Now().Add(-time.Minute))
	m.CaughtUp("orders", time.Now().Add(-2*time.Second))
	m.RunDone("orders", metrics.OutcomeOK, time.Second)
	m.Error("orders", "connection")
	m.Retry("orders")
	m.SkippedTick("orders")
	m.ReconcileDone("orders", metrics.OutcomeOK, time.Second)
	m.SetReconcileDifferences("orders", "missing", 3)
	m.ReconcileRows("orders", 1000, 12)
	m.Bound("orders", time.Now().Add(-3*time.Second), 3*time.Second, 4242)
	m.Campaign("orders", 10, 9, 1, 0)
	m.Outside("orders", 3, 2)
	m.CursorIndexMissing("orders", true)

	problems, err := promlint.NewWithMetricFamilies(gather(t, reg)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	names := map[string]bool{}
	for _, mf := range gather(t, reg) {
		names[mf.GetName()] = true
		if !strings.HasPrefix(mf.GetName(), "syncd_") {
			t.Errorf("%s lacks the syncd_ prefix", mf.GetName())
		}
	}
	for _, want := range []string{
		"syncd_rows_read_total", "syncd_rows_applied_total", "syncd_pages_total", "syncd_run_duration_seconds",
		"syncd_runs_total", "syncd_newest_row_age_seconds",
		"syncd_rows_written_total", "syncd_rows_deleted_total", "syncd_rows_unchanged_total",
		"syncd_freshness_seconds", "syncd_last_caught_up_timestamp_seconds", "syncd_last_success_timestamp_seconds", "syncd_source_failed",
		"syncd_retries_total", "syncd_errors_total", "syncd_skipped_ticks_total", "syncd_reconcile_runs_total",
		"syncd_reconcile_duration_seconds", "syncd_reconcile_differences", "syncd_build_info",
		"syncd_reconcile_rows_compared_total", "syncd_reconcile_rows_fetched_total", "syncd_read_bound_timestamp_seconds",
		"syncd_read_bound_held_back_seconds", "syncd_read_bound_holder_pid", "syncd_campaign_grants",
		"syncd_rows_null_cursor", "syncd_rows_ahead_of_clock", "syncd_cursor_index_missing",
	} {
		if !names[want] {
			t.Errorf("series %s missing", want)
		}
	}

	m.RemoveSource("orders")
	for _, mf := range gather(t, reg) {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "source" {
					t.Errorf("%s still has a series for source %s after RemoveSource", mf.GetName(), l.GetValue())
				}
			}
		}
	}
}

func gather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}
