package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// extra holds the series of the commit-safe bound, scheduled reconciles'
// row counts and not-covered rows, and coupon campaigns.
type extra struct {
	bound         *prometheus.GaugeVec
	boundHeldBack *prometheus.GaugeVec
	boundHolder   *prometheus.GaugeVec

	reconcileCompared *prometheus.CounterVec
	reconcileFetched  *prometheus.CounterVec
	reconcileUncov    *prometheus.GaugeVec
	reconcileClean    *prometheus.GaugeVec
	mu                sync.Mutex
	lastClean         map[string]float64 // the value of reconcileClean per source

	campaign *prometheus.GaugeVec

	schemaChanges *prometheus.CounterVec
}

func newExtra(reg prometheus.Registerer) *extra {
	src := []string{"source"}
	e := &extra{
		lastClean: map[string]float64{},
		bound: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_read_bound_timestamp_seconds",
			Help: "Unix time of the commit-safe read bound of the last run: rows stamped at or after it wait for a later run.",
		}, src),
		boundHeldBack: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_read_bound_held_back_seconds",
			Help: "How far the last run's read bound was behind the source's clock (an open transaction or source.settle).",
		}, src),
		boundHolder: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_read_bound_holder_pid",
			Help: "Backend pid of the open source transaction that held the last run's read bound back; -1 for a prepared transaction, 0 when none did.",
		}, src),
		reconcileCompared: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_reconcile_rows_compared_total",
			Help: "Source rows covered by reconciles' checksum comparisons.",
		}, src),
		reconcileFetched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_reconcile_rows_fetched_total",
			Help: "Rows reconciles fetched from either side to compare value by value.",
		}, src),
		reconcileClean: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_reconcile_last_clean_timestamp_seconds",
			Help: "Unix time when the last reconcile that proved the copy equal to the source (no difference left, no row left uncompared) began; kept in the state file across restarts. Alert on time() minus it: the copy not proven for that long.",
		}, []string{"source"}),
		reconcileUncov: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_reconcile_not_covered_rows",
			Help: "Source rows the last reconcile of the source could not compare, by reason: pending (newer than the watermark) or no_watermark. Above 0, the copy is not proven equal.",
		}, []string{"source", "reason"}),
		campaign: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_campaign_grants",
			Help: "A coupon campaign's counts after its last run, by state: targets, granted, missing (targets without a grant) and extra (grants that are not targets).",
		}, []string{"source", "state"}),
		schemaChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_schema_changes_total",
			Help: "Source schema changes runs found, by change: column_added, column_dropped, type_widened (followed under schema_changes: evolve), type_changed, column_renamed, key_changed (refused); a refused change counts on every run it stops.",
		}, []string{"source", "change"}),
	}
	reg.MustRegister(e.bound, e.boundHeldBack, e.boundHolder, e.reconcileCompared, e.reconcileFetched, e.reconcileUncov, e.reconcileClean, e.campaign, e.schemaChanges)
	return e
}

func (e *extra) remove(l prometheus.Labels) {
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		e.bound, e.boundHeldBack, e.boundHolder, e.reconcileCompared, e.reconcileFetched, e.reconcileUncov, e.reconcileClean, e.campaign, e.schemaChanges,
	} {
		v.DeletePartialMatch(l)
	}
	e.mu.Lock()
	delete(e.lastClean, l["source"])
	e.mu.Unlock()
}

// Bound records the commit-safe read bound of a run (zero bound: none, or
// a cursor that is not a timestamp) and the transaction holding it back.
func (m *Metrics) Bound(name string, bound time.Time, heldBack time.Duration, holderPID int32) {
	m.extra.boundHolder.WithLabelValues(name).Set(float64(holderPID))
	if bound.IsZero() {
		return
	}
	m.extra.bound.WithLabelValues(name).Set(float64(bound.UnixNano()) / 1e9)
	m.extra.boundHeldBack.WithLabelValues(name).Set(heldBack.Seconds())
}

// ReconcileRows counts the rows a reconcile compared and fetched.
func (m *Metrics) ReconcileRows(name string, compared, fetched int64) {
	m.extra.reconcileCompared.WithLabelValues(name).Add(float64(compared))
	m.extra.reconcileFetched.WithLabelValues(name).Add(float64(fetched))
}

// SetReconcileNotCovered records how many source rows the last reconcile
// of a source could not compare for a reason.
func (m *Metrics) SetReconcileNotCovered(name, reason string, n int64) {
	m.extra.reconcileUncov.WithLabelValues(name, reason).Set(float64(n))
}

// ReconcileClean records when the last reconcile that proved the copy of
// a source equal began (zero: never; an earlier time than the one known is
// ignored).
func (m *Metrics) ReconcileClean(name string, at time.Time) {
	if at.IsZero() {
		return
	}
	g := m.extra.reconcileClean.WithLabelValues(name)
	v := float64(at.UnixNano()) / 1e9
	m.extra.mu.Lock()
	defer m.extra.mu.Unlock()
	if v > m.extra.lastClean[name] {
		m.extra.lastClean[name] = v
		g.Set(v)
	}
}

// Campaign records a coupon campaign's counts after a run.
func (m *Metrics) Campaign(name string, targets, granted, missing, extra int64) {
	for state, n := range map[string]int64{"targets": targets, "granted": granted, "missing": missing, "extra": extra} {
		m.extra.campaign.WithLabelValues(name, state).Set(float64(n))
	}
}

// SchemaChange counts one source schema change a run found.
func (m *Metrics) SchemaChange(name, change string) {
	m.schemaChanges.WithLabelValues(name, change).Inc()
}
