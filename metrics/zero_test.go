package metrics_test

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/syncd/syncd/internal/retry"
	"github.com/syncd/syncd/metrics"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/syncer"
)

// values maps each series of family name to its value, keyed by the
// values of labels (joined by "/").
func values(t *testing.T, reg *prometheus.Registry, name string, labels ...string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, mf := range gather(t, reg) {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			key := ""
			for i, l := range labels {
				if i > 0 {
					key += "/"
				}
				key += have[l]
			}
			switch {
			case s.Counter != nil:
				out[key] = s.GetCounter().GetValue()
			case s.Gauge != nil:
				out[key] = s.GetGauge().GetValue()
			case s.Histogram != nil:
				out[key] = float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// A source's counters exist at 0 for every label value they know from the
// moment it is added, so that increase() sees their first increment; the
// known values are the ones the code that counts uses.
func TestCountersBornAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "test")
	m.AddSource("orders", metrics.Totals{})
	errs := values(t, reg, "syncd_errors_total", "source", "kind")
	for _, k := range metrics.ErrorKinds {
		if v, ok := errs["orders/"+k]; !ok || v != 0 {
			t.Errorf("syncd_errors_total{kind=%s} = %v (present %v), want 0 at start", k, v, ok)
		}
	}
	for _, k := range []string{retry.Classify(&sink.PageTimeoutError{}).Kind, retry.KindConnection, retry.KindOther, retry.KindConfig} {
		if !slices.Contains(metrics.ErrorKinds, k) {
			t.Errorf("error kind %s is not in metrics.ErrorKinds", k)
		}
	}
	changes := values(t, reg, "syncd_schema_changes_total", "source", "change")
	for _, c := range []string{syncer.ChangeColumnAdded, syncer.ChangeColumnDropped, syncer.ChangeTypeWidened, syncer.ChangeTypeChanged,
		syncer.ChangeColumnRenamed, syncer.ChangeKeyChanged, syncer.ChangeDomainChanged, syncer.ChangeEnumRenamed} {
		if v, ok := changes["orders/"+c]; !ok || v != 0 {
			t.Errorf("syncd_schema_changes_total{change=%s} = %v (present %v), want 0 at start", c, v, ok)
		}
	}
	if len(changes) != len(metrics.SchemaChangeKinds) {
		t.Errorf("syncd_schema_changes_total has %d series, want %d: %v", len(changes), len(metrics.SchemaChangeKinds), changes)
	}
	rec := values(t, reg, "syncd_reconcile_runs_total", "source", "outcome")
	for _, o := range []string{metrics.OutcomeOK, metrics.OutcomeFailed, metrics.OutcomeSkipped} {
		if v, ok := rec["orders/"+o]; !ok || v != 0 {
			t.Errorf("syncd_reconcile_runs_total{outcome=%s} = %v (present %v), want 0 at start", o, v, ok)
		}
	}
	for _, name := range []string{"syncd_run_duration_seconds", "syncd_reconcile_duration_seconds", "syncd_reconcile_rows_compared_total", "syncd_reconcile_rows_fetched_total"} {
		if v, ok := values(t, reg, name, "source")["orders"]; !ok || v != 0 {
			t.Errorf("%s{source=orders} = %v (present %v), want 0 at start", name, v, ok)
		}
	}
	// Counting adds to the series born at 0, and adding the source again
	// keeps what was counted.
	m.Error("orders", retry.KindConnection)
	m.AddSource("orders", metrics.Totals{})
	if v := values(t, reg, "syncd_errors_total", "source", "kind")["orders/connection"]; v != 1 {
		t.Errorf("syncd_errors_total{kind=connection} = %v after one error and AddSource again, want 1", v)
	}
}
