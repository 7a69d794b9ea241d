package metrics

import "github.com/prometheus/client_golang/prometheus"

// indexSeries holds the series of the source tables' cursor indexes.
type indexSeries struct {
	indexMissing *prometheus.GaugeVec
}

func newIndexSeries(reg prometheus.Registerer) *indexSeries {
	o := &indexSeries{
		indexMissing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_cursor_index_missing",
			Help: "1 when the source table has no index whose leading columns are the cursor columns (valid, btree, not partial unless its predicate is source.where), as the catalog said at the last run: every page then reads and sorts the whole table; 0 when it has one. The log says it once per process, with the CREATE INDEX.",
		}, []string{"source"}),
	}
	reg.MustRegister(o.indexMissing)
	return o
}

// CursorIndexMissing records whether the last run found the source table
// without an index in cursor order.
func (m *Metrics) CursorIndexMissing(name string, missing bool) {
	v := 0.0
	if missing {
		v = 1
	}
	m.index.indexMissing.WithLabelValues(name).Set(v)
}
