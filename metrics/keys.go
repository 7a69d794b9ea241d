package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// KeyCheckKinds are the values of the label "kind" of
// syncd_reconcile_keys_differences: the key check compares presence only.
var KeyCheckKinds = []string{"missing", "extra"}

// keyCheck holds the series of the daemon's scheduled key checks
// (reconcile.keys_schedule).
type keyCheck struct {
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	deleted  *prometheus.CounterVec
	diffs    *prometheus.GaugeVec
}

func newKeyCheck(reg prometheus.Registerer) *keyCheck {
	src := []string{"source"}
	k := &keyCheck{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_reconcile_keys_runs_total",
			Help: "Scheduled key checks (reconcile.keys_schedule) by outcome: ok, failed or skipped.",
		}, []string{"source", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "syncd_reconcile_keys_duration_seconds",
			Help:    "Duration of scheduled key checks.",
			Buckets: []float64{0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600},
		}, src),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_reconcile_keys_deleted_total",
			Help: "Copy rows the scheduled key checks deleted (with reconcile.repair): rows deleted at the source.",
		}, src),
		diffs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_reconcile_keys_differences",
			Help: "Keys the last key check of the source found differing (after its repair, when it repairs), by kind: missing (synced source rows the copy lacks: the full reconcile repairs them) or extra (copy rows the source no longer holds).",
		}, []string{"source", "kind"}),
	}
	reg.MustRegister(k.runs, k.duration, k.deleted, k.diffs)
	return k
}

// zero makes a source's key check counters exist at 0.
func (k *keyCheck) zero(name string) {
	for _, o := range []string{OutcomeOK, OutcomeFailed, OutcomeSkipped} {
		k.runs.WithLabelValues(name, o)
	}
	k.deleted.WithLabelValues(name)
	k.duration.WithLabelValues(name)
}

func (k *keyCheck) remove(l prometheus.Labels) {
	k.runs.DeletePartialMatch(l)
	k.duration.DeletePartialMatch(l)
	k.deleted.DeletePartialMatch(l)
	k.diffs.DeletePartialMatch(l)
}

// KeyCheckDone records the end of a scheduled key check: its outcome and
// duration, and for one that ran the copy rows it deleted and the
// differences it left, by kind (KeyCheckKinds).
func (m *Metrics) KeyCheckDone(name, outcome string, d time.Duration, deleted int64, diffs map[string]int64) {
	m.keys.runs.WithLabelValues(name, outcome).Inc()
	if outcome != OutcomeOK {
		return
	}
	m.keys.duration.WithLabelValues(name).Observe(d.Seconds())
	m.keys.deleted.WithLabelValues(name).Add(float64(deleted))
	m.KeyCheckDifferences(name, diffs)
}

// KeyCheckDifferences sets the differences of a source's last key check,
// by kind (KeyCheckKinds; a kind diffs lacks is 0).
func (m *Metrics) KeyCheckDifferences(name string, diffs map[string]int64) {
	for _, kind := range KeyCheckKinds {
		m.keys.diffs.WithLabelValues(name, kind).Set(float64(diffs[kind]))
	}
}
