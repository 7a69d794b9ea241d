package daemon

import (
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/metrics"
	"github.com/syncd/syncd/watermark"
)

// seedMetrics makes the gauges the shipped dashboard shows exist from a
// source's start, from what the state file recorded, rather than from the
// first run or reconcile of this process: the read bound of the last run
// (syncd_read_bound_*), and the differences of the last recorded
// reconcile (syncd_reconcile_differences), 0 of each kind for a source
// with a reconcile schedule and none recorded yet, and likewise those of
// the last key check (syncd_reconcile_keys_differences). The counters are
// created at 0 by metrics.AddSource.
func seedMetrics(m *metrics.Metrics, c *config.Config, st watermark.State) {
	if !st.Bound.IsZero() {
		heldBack := st.BoundAt.Sub(st.Bound)
		if st.BoundAt.IsZero() || heldBack < 0 {
			heldBack = 0
		}
		m.Bound(c.Name, st.Bound, heldBack, st.BoundHolderPID)
	}
	if k := st.LastKeyCheck; k != nil || c.Reconcile != nil && c.Reconcile.KeysSchedule != "" {
		var diffs map[string]int64
		if k != nil {
			diffs = k.Differences
		}
		m.KeyCheckDifferences(c.Name, diffs)
	}
	r := st.LastReconcile
	if r == nil && (c.Reconcile == nil || c.Reconcile.Schedule == "") {
		return
	}
	for _, k := range metrics.ReconcileKinds {
		var n int64
		if r != nil {
			n = r.Differences[k]
		}
		m.SetReconcileDifferences(c.Name, k, n)
	}
}
