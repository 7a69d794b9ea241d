// Package metrics owns syncd's Prometheus series: what each source's runs
// read and wrote, how long they took and how they ended, how fresh the
// copy is, and the faults met on the way. Every series lives in a
// registry the caller passes in (never the global one) and carries the
// label "source". Other parts of syncd add their series through the
// exported methods (reconcile) or by registering collectors on the same
// registry.
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Run outcomes (the label "outcome" of syncd_runs_total).
const (
	OutcomeOK      = "ok"
	OutcomeFailed  = "failed"
	OutcomeSkipped = "skipped" // another process held the source's lock
	OutcomeStopped = "stopped" // a shutdown ended the run before it caught up
)

// Metrics holds every series of one daemon.
type Metrics struct {
	rowsRead      *prometheus.CounterVec
	rowsApplied   *prometheus.CounterVec
	rowsWritten   *prometheus.CounterVec
	rowsDeleted   *prometheus.CounterVec
	rowsUnchanged *prometheus.CounterVec
	pages         *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	runs          *prometheus.CounterVec
	lastSuccess   *prometheus.GaugeVec
	failed        *prometheus.GaugeVec
	retries       *prometheus.CounterVec
	errors        *prometheus.CounterVec
	skipped       *prometheus.CounterVec

	reconcileRuns     *prometheus.CounterVec
	reconcileDuration *prometheus.HistogramVec
	reconcileDiffs    *prometheus.GaugeVec

	rowAge   *ageCollector // now minus the newest row's stamp
	caughtUp *prometheus.GaugeVec
	fresh    *ageCollector // now minus caughtUp
	outside  *outside
	keys     *keyCheck
	*extra
	index   *indexSeries
	pattern *patternSeries
}

// New makes the series and registers them on reg.
func New(reg prometheus.Registerer, version string) *Metrics {
	src := []string{"source"}
	m := &Metrics{
		rowsRead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_rows_read_total",
			Help: "Rows read from the source in pages that committed in the sink, re-reads included; counted since the state file began, like status.",
		}, src),
		rowsApplied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_rows_applied_total",
			Help: "Same as syncd_rows_written_total (kept for existing dashboards).",
		}, src),
		rowsWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_rows_written_total",
			Help: "Rows the sink inserted or changed; counted since the state file began, like status.",
		}, src),
		rowsDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_rows_deleted_total",
			Help: "Rows the sink removed (soft deletes); counted since the state file began, like status.",
		}, src),
		rowsUnchanged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_rows_unchanged_total",
			Help: "Rows read that the sink neither wrote nor removed: lookback re-reads, pages read again after a crash or a resync, rows already equal in the copy.",
		}, src),
		pages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_pages_total",
			Help: "Pages committed in the sink.",
		}, src),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "syncd_run_duration_seconds",
			Help:    "Duration of runs that were not skipped, retries included.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}, src),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_runs_total",
			Help: "Runs by outcome: ok, failed, skipped (another process held the source) or stopped (shutdown).",
		}, []string{"source", "outcome"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_last_success_timestamp_seconds",
			Help: "Unix time at which the last successful run of the source ended.",
		}, src),
		failed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_source_failed",
			Help: "1 when the last run of the source failed, else 0 (a run skipped because another process, a replica, runs the source sets 0).",
		}, src),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_retries_total",
			Help: "Attempts started again after a transient fault.",
		}, src),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_errors_total",
			Help: "Errors met by runs, by kind (connection, admin_shutdown, serialization, deadlock, lock_timeout, statement_timeout, too_many_connections, undefined_object, permission, authentication, config, other).",
		}, []string{"source", "kind"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_skipped_ticks_total",
			Help: "Schedule ticks skipped because the previous run of the source was still going.",
		}, src),
		reconcileRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_reconcile_runs_total",
			Help: "Scheduled reconciles by outcome: ok, failed or skipped.",
		}, []string{"source", "outcome"}),
		reconcileDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "syncd_reconcile_duration_seconds",
			Help:    "Duration of scheduled reconciles.",
			Buckets: []float64{0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600},
		}, src),
		reconcileDiffs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_reconcile_differences",
			Help: "Differences found by the last reconcile of the source, by kind: missing, extra, changed, duplicate (keys the copy holds more than once), null_key (rows whose key is NULL, either side).",
		}, []string{"source", "kind"}),
		rowAge: newAgeCollector("syncd_newest_row_age_seconds",
			"Now minus the time in the source's watermark (its first cursor column): the age of the newest row in the copy. It grows while the source receives no writes; it is not how far the copy is behind (see syncd_freshness_seconds)."),
		caughtUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_last_caught_up_timestamp_seconds",
			Help: "Unix time up to which the copy was last known to hold every committed source row: the read bound of the last run that caught up (without a bound, the source's clock when that run began reading).",
		}, src),
		fresh: newAgeCollector("syncd_freshness_seconds",
			"Now minus syncd_last_caught_up_timestamp_seconds, computed at scrape: how far the copy may be behind the source."),
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "syncd_build_info",
		Help:        "Always 1; the label version is the running syncd's version.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	build.Set(1)
	reg.MustRegister(m.rowsRead, m.rowsApplied, m.rowsWritten, m.rowsDeleted, m.rowsUnchanged,
		m.pages, m.duration, m.runs, m.lastSuccess,
		m.failed, m.retries, m.errors, m.skipped, m.reconcileRuns, m.reconcileDuration,
		m.reconcileDiffs, m.rowAge, m.caughtUp, m.fresh, build)
	m.extra = newExtra(reg)
	m.outside = newOutside(reg)
	m.keys = newKeyCheck(reg)
	m.index = newIndexSeries(reg)
	m.pattern = newPatternSeries(reg)
	return m
}

// Totals are a source's row counters as stored in the state file.
type Totals struct {
	Read, Written, Deleted int64
}

// AddSource makes the source's series appear before its first run, so that
// rates and alerts work from the start; the row counters start from the
// totals stored in the state file, so that they equal what status shows.
func (m *Metrics) AddSource(name string, t Totals) {
	// Seeded, not added to: a source added again must not count twice.
	for _, c := range []*prometheus.CounterVec{m.rowsRead, m.rowsApplied, m.rowsWritten, m.rowsDeleted, m.rowsUnchanged} {
		c.DeleteLabelValues(name)
	}
	m.rowsRead.WithLabelValues(name).Add(float64(t.Read))
	m.rowsApplied.WithLabelValues(name).Add(float64(t.Written))
	m.rowsWritten.WithLabelValues(name).Add(float64(t.Written))
	m.rowsDeleted.WithLabelValues(name).Add(float64(t.Deleted))
	m.rowsUnchanged.WithLabelValues(name).Add(float64(max(t.Read-t.Written-t.Deleted, 0)))
	m.pages.WithLabelValues(name)
	m.retries.WithLabelValues(name)
	m.skipped.WithLabelValues(name)
	m.failed.WithLabelValues(name)
	for _, o := range []string{OutcomeOK, OutcomeFailed, OutcomeSkipped, OutcomeStopped} {
		m.runs.WithLabelValues(name, o)
	}
	m.zeroSeries(name)
}

// RemoveSource deletes every series of a source that left the config.
func (m *Metrics) RemoveSource(name string) {
	l := prometheus.Labels{"source": name}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		m.rowsRead, m.rowsApplied, m.rowsWritten, m.rowsDeleted, m.rowsUnchanged,
		m.pages, m.duration, m.runs, m.lastSuccess, m.failed, m.caughtUp,
		m.retries, m.errors, m.skipped, m.reconcileRuns, m.reconcileDuration, m.reconcileDiffs,
	} {
		v.DeletePartialMatch(l)
	}
	m.extra.remove(l)
	m.rowAge.remove(name)
	m.fresh.remove(name)
	m.outside.remove(l)
	m.keys.remove(l)
	m.index.indexMissing.DeletePartialMatch(l)
}

// Page records one committed page: rows read, written and deleted;
// watermark is the time of the stored watermark's first cursor column
// (zero when it is not a timestamp).
func (m *Metrics) Page(name string, rows, written, deleted int64, watermark time.Time) {
	m.pages.WithLabelValues(name).Inc()
	m.rowsRead.WithLabelValues(name).Add(float64(rows))
	m.rowsApplied.WithLabelValues(name).Add(float64(written))
	m.rowsWritten.WithLabelValues(name).Add(float64(written))
	m.rowsDeleted.WithLabelValues(name).Add(float64(deleted))
	m.rowsUnchanged.WithLabelValues(name).Add(float64(max(rows-written-deleted, 0)))
	m.SetWatermark(name, watermark)
}

// SetWatermark sets the time the newest row's age is measured from, for
// example from the state file at start.
func (m *Metrics) SetWatermark(name string, watermark time.Time) {
	if !watermark.IsZero() {
		m.rowAge.set(name, watermark)
	}
}

// CaughtUp records the point up to which the copy holds every committed
// source row (zero: unknown yet; an earlier point than the one known is
// ignored, as in the state file); freshness is measured from it.
func (m *Metrics) CaughtUp(name string, t time.Time) {
	if t.IsZero() {
		return
	}
	if m.fresh.setLater(name, t) {
		m.caughtUp.WithLabelValues(name).Set(float64(t.UnixNano()) / 1e9)
	}
}

// RunDone records the end of a run with its outcome.
func (m *Metrics) RunDone(name, outcome string, d time.Duration) {
	m.runs.WithLabelValues(name, outcome).Inc()
	switch outcome {
	case OutcomeSkipped:
		// Another process (a replica) runs the source now: this one's
		// last failure no longer says how the source fares. Freshness
		// stays this process's own: take the fleet's as the minimum over
		// its replicas.
		m.failed.WithLabelValues(name).Set(0)
		return
	case OutcomeOK:
		m.lastSuccess.WithLabelValues(name).Set(float64(time.Now().UnixNano()) / 1e9)
		m.failed.WithLabelValues(name).Set(0)
	case OutcomeFailed:
		m.failed.WithLabelValues(name).Set(1)
	}
	m.duration.WithLabelValues(name).Observe(d.Seconds())
}

// Error counts one error of a kind (see package retry).
func (m *Metrics) Error(name, kind string) { m.errors.WithLabelValues(name, kind).Inc() }

// Retry counts one attempt started again after a transient fault.
func (m *Metrics) Retry(name string) { m.retries.WithLabelValues(name).Inc() }

// SkippedTick counts a schedule tick that found the previous run still going.
func (m *Metrics) SkippedTick(name string) { m.skipped.WithLabelValues(name).Inc() }

// ReconcileDone records the end of a scheduled reconcile.
func (m *Metrics) ReconcileDone(name, outcome string, d time.Duration) {
	m.reconcileRuns.WithLabelValues(name, outcome).Inc()
	if outcome != OutcomeSkipped {
		m.reconcileDuration.WithLabelValues(name).Observe(d.Seconds())
	}
}

// SetReconcileDifferences records how many differences of a kind the last
// reconcile of a source found; package reconcile calls it with its report.
func (m *Metrics) SetReconcileDifferences(name, kind string, n int64) {
	m.reconcileDiffs.WithLabelValues(name, kind).Set(float64(n))
}

// ageCollector computes now minus a time per source when scraped, so that
// an age grows between runs as it really does.
type ageCollector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	wm   map[string]time.Time
}

func newAgeCollector(name, help string) *ageCollector {
	return &ageCollector{
		desc: prometheus.NewDesc(name, help, []string{"source"}, nil),
		wm:   map[string]time.Time{},
	}
}

func (c *ageCollector) set(name string, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wm[name] = t
}

// setLater sets t unless the time set is later; it says whether it did.
func (c *ageCollector) setLater(name string, t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.wm[name]; ok && !t.After(old) {
		return false
	}
	c.wm[name] = t
	return true
}

func (c *ageCollector) remove(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.wm, name)
}

func (c *ageCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *ageCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for name, t := range c.wm {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, now.Sub(t).Seconds(), name)
	}
}
