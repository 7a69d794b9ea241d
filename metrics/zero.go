package metrics

import "github.com/syncd/syncd/internal/retry"

// ErrorKinds are the values of the label "kind" of syncd_errors_total: the
// kinds of package retry plus page_timeout (a page over sink.page_timeout).
// Each source's series of every kind exist from its start at 0, so that
// increase() shows a kind's first error.
var ErrorKinds = []string{
	retry.KindConnection, retry.KindAdminShutdown, retry.KindSerialization, retry.KindDeadlock,
	retry.KindLockTimeout, retry.KindStatementTimeout, retry.KindTooManyConns, retry.KindUndefinedObject,
	retry.KindPermission, retry.KindAuthentication, retry.KindConfig, retry.KindCanceled, retry.KindOther,
	"page_timeout",
}

// SchemaChangeKinds are the values of the label "change" of
// syncd_schema_changes_total.
var SchemaChangeKinds = []string{"column_added", "column_dropped", "type_widened", "domain_changed", "enum_label_renamed", "type_changed", "column_renamed", "key_changed"}

// ReconcileKinds are the values of the label "kind" of
// syncd_reconcile_differences.
var ReconcileKinds = []string{"missing", "extra", "changed", "duplicate", "null_key"}

// zeroSeries makes a new source's counters of every known label value,
// and its run duration histogram, exist at 0 from its start: Prometheus's
// increase() and rate() cannot see a series' first increment when the
// series is born with it.
func (m *Metrics) zeroSeries(name string) {
	for _, k := range ErrorKinds {
		m.errors.WithLabelValues(name, k)
	}
	for _, o := range []string{OutcomeOK, OutcomeFailed, OutcomeSkipped} {
		m.reconcileRuns.WithLabelValues(name, o)
	}
	for _, c := range SchemaChangeKinds {
		m.schemaChanges.WithLabelValues(name, c)
	}
	m.reconcileCompared.WithLabelValues(name)
	m.reconcileFetched.WithLabelValues(name)
	m.duration.WithLabelValues(name)
	m.reconcileDuration.WithLabelValues(name)
	m.keys.zero(name)
}
