package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/syncd/syncd/metrics"
)

// A run held at the watermark by a prepared transaction (-1), or holding a
// sequence cursor (no timestamp bound), still sets the holder series, and
// the next run clears it.
func TestBoundHolderWithoutTimestampBound(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "test")
	m.AddSource("ids", metrics.Totals{})
	holder := func() float64 {
		t.Helper()
		for _, mf := range gather(t, reg) {
			if mf.GetName() == "syncd_read_bound_holder_pid" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no syncd_read_bound_holder_pid series")
		return 0
	}
	m.Bound("ids", time.Time{}, 0, -1)
	if got := holder(); got != -1 {
		t.Fatalf("holder %v, want -1 (a prepared transaction)", got)
	}
	m.Bound("ids", time.Time{}, 0, 0)
	if got := holder(); got != 0 {
		t.Fatalf("holder %v after it ended, want 0", got)
	}
}
