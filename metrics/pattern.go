package metrics

import "github.com/prometheus/client_golang/prometheus"

// patternSeries holds the series of the tables pattern sources skip.
type patternSeries struct {
	skipped *prometheus.GaugeVec
}

func newPatternSeries(reg prometheus.Registerer) *patternSeries {
	p := &patternSeries{
		skipped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_pattern_table_skipped",
			Help: "1 for each table the last match of a pattern source skipped, by table (schema.table) and reason: no_cursor_column, cursor_not_usable, no_primary_key, copy_name, name_taken or other; status and the log give the message. The series goes once the table is synced or excluded.",
		}, []string{"source", "table", "reason"}),
	}
	reg.MustRegister(p.skipped)
	return p
}

// PatternSkipped sets the tables the last match of pattern source name
// skipped, each with its reason (by table): the series of tables no
// longer skipped go.
func (m *Metrics) PatternSkipped(name string, reasons map[string]string) {
	m.pattern.skipped.DeletePartialMatch(prometheus.Labels{"source": name})
	for table, reason := range reasons {
		m.pattern.skipped.WithLabelValues(name, table, reason).Set(1)
	}
}

// RemovePattern deletes the series of a pattern source that left the
// config.
func (m *Metrics) RemovePattern(name string) {
	m.pattern.skipped.DeletePartialMatch(prometheus.Labels{"source": name})
}
