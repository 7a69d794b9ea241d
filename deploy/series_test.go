package deploy

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd/syncd/metrics"
)

// Every series the dashboard queries exists as soon as a source is added,
// before any run, error or reconcile, except the few documented in
// docs/DAEMON.md ("Series that appear later") that have no value to show
// until an event or the state file gives one: a 0 there would be a lie.
func TestDashboardSeriesExistAtStart(t *testing.T) {
	later := map[string]string{
		"up":                                 "Prometheus's own",
		"syncd_freshness_seconds":            "the state file's caught-up time, or the first run that catches up",
		"syncd_newest_row_age_seconds":       "the state file's watermark, or the first page",
		"syncd_read_bound_held_back_seconds": "the state file's last bound, or the first run",
		"syncd_reconcile_differences":        "the state file's last reconcile, or 0 with a reconcile schedule",
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "test")
	m.AddSource("s", metrics.Totals{})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		if len(mf.GetMetric()) > 0 {
			have[mf.GetName()] = true
			have[mf.GetName()+"_bucket"] = true
		}
	}
	var missing []string
	d := loadDashboard(t)
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, n := range metricNames(tg.Expr) {
				if !have[n] && later[n] == "" {
					missing = append(missing, n+" ("+p.Title+")")
				}
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("dashboard series that do not exist until an event: %v", slices.Compact(missing))
	}
	daemonDoc := readFile(t, "docs/DAEMON.md")
	for n := range later {
		if n != "up" && !strings.Contains(daemonDoc, "`"+n+"`") {
			t.Errorf("docs/DAEMON.md does not document %s", n)
		}
	}
}
