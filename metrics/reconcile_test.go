package metrics_test

import (
	"time"

	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/syncd/syncd/metrics"
)

// A reconcile's not-covered rows are a gauge per source and reason that
// passes the lint and leaves with its source.
func TestReconcileNotCoveredRows(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "test")
	m.SetReconcileNotCovered("orders", "pending", 4)
	m.SetReconcileNotCovered("orders", "no_watermark", 0)
	m.SetReconcileDifferences("orders", "duplicate", 2)

	problems, err := promlint.NewWithMetricFamilies(gather(t, reg)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	got := map[string]float64{}
	for _, mf := range gather(t, reg) {
		if mf.GetName() != "syncd_reconcile_not_covered_rows" {
			continue
		}
		for _, s := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["source"]+"/"+labels["reason"]] = s.GetGauge().GetValue()
		}
	}
	if len(got) != 2 || got["orders/pending"] != 4 || got["orders/no_watermark"] != 0 {
		t.Fatalf("syncd_reconcile_not_covered_rows = %v; want orders/pending 4, orders/no_watermark 0", got)
	}
	m.RemoveSource("orders")
	for _, mf := range gather(t, reg) {
		if len(mf.GetMetric()) > 0 && (mf.GetName() == "syncd_reconcile_not_covered_rows" || mf.GetName() == "syncd_reconcile_differences") {
			t.Errorf("%s left behind after RemoveSource", mf.GetName())
		}
	}
}

// The time of the last clean reconcile is a gauge per source that only
// moves forward (a state file read at start cannot set it back) and leaves
// with its source.
func TestReconcileLastClean(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "test")
	later := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	m.ReconcileClean("orders", time.Time{})
	m.ReconcileClean("orders", later)
	m.ReconcileClean("orders", later.Add(-time.Hour))
	got := map[string]float64{}
	for _, mf := range gather(t, reg) {
		if mf.GetName() == "syncd_reconcile_last_clean_timestamp_seconds" {
			for _, s := range mf.GetMetric() {
				got[s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
			}
		}
	}
	if len(got) != 1 || got["orders"] != float64(later.Unix()) {
		t.Fatalf("syncd_reconcile_last_clean_timestamp_seconds = %v; want orders %d", got, later.Unix())
	}
	m.RemoveSource("orders")
	m.ReconcileClean("orders", later.Add(-time.Hour))
	for _, mf := range gather(t, reg) {
		if mf.GetName() == "syncd_reconcile_last_clean_timestamp_seconds" {
			if v := mf.GetMetric()[0].GetGauge().GetValue(); v != float64(later.Add(-time.Hour).Unix()) {
				t.Fatalf("after RemoveSource and a new value: %v, want %d", v, later.Add(-time.Hour).Unix())
			}
		}
	}
}
