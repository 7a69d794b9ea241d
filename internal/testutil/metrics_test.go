package testutil_test

import (
	"testing"

	"github.com/syncd/syncd/internal/testutil"
)

const page = `# HELP syncd_runs_total Runs.
# TYPE syncd_runs_total counter
syncd_runs_total{source="orders",outcome="ok"} 3
syncd_runs_total{outcome="error",source="a \"b\""} 0
# HELP syncd_up Up.
# TYPE syncd_up gauge
syncd_up 1
# HELP syncd_run_duration_seconds Duration.
# TYPE syncd_run_duration_seconds histogram
syncd_run_duration_seconds_bucket{source="orders",le="0.5"} 2
syncd_run_duration_seconds_bucket{source="orders",le="+Inf"} 3
syncd_run_duration_seconds_sum{source="orders"} 1.25
syncd_run_duration_seconds_count{source="orders"} 3
`

func TestParseMetrics(t *testing.T) {
	m, err := testutil.ParseMetrics(page)
	if err != nil {
		t.Fatal(err)
	}
	for series, want := range map[string]float64{
		`syncd_runs_total{outcome="ok",source="orders"}`:     3,
		`syncd_runs_total{outcome="error",source="a \"b\""}`: 0,
		`syncd_up`: 1,
		`syncd_run_duration_seconds_count{source="orders"}`:            3,
		`syncd_run_duration_seconds_sum{source="orders"}`:              1.25,
		`syncd_run_duration_seconds_bucket{le="0.5",source="orders"}`:  2,
		`syncd_run_duration_seconds_bucket{le="+Inf",source="orders"}`: 3,
	} {
		if got, ok := m.Series[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	if len(m.Series) != 7 {
		t.Errorf("%d series, want 7: %v", len(m.Series), m.Series)
	}
	if v, ok := m.Value("syncd_runs_total", map[string]string{"source": "orders", "outcome": "ok"}); !ok || v != 3 {
		t.Errorf("Value(runs ok) = %v, %v; want 3, true", v, ok)
	}
	if _, ok := m.Value("syncd_runs_total", map[string]string{"source": "orders"}); ok {
		t.Error("Value matched a series with more labels than asked for")
	}
	if v, ok := m.Value("syncd_run_duration_seconds", map[string]string{"source": "orders"}); !ok || v != 3 {
		t.Errorf("Value(histogram) = %v, %v; want its count 3", v, ok)
	}
	if _, err := testutil.ParseMetrics("syncd_up{ 1\n"); err == nil {
		t.Error("a malformed page parsed")
	}
}
