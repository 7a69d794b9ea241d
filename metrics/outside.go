package metrics

import "github.com/prometheus/client_golang/prometheus"

// outside holds the series of the rows a source's cursor cannot reach.
type outside struct {
	nullCursor *prometheus.GaugeVec
	ahead      *prometheus.GaugeVec
}

func newOutside(reg prometheus.Registerer) *outside {
	src := []string{"source"}
	o := &outside{
		nullCursor: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_rows_null_cursor",
			Help: "Rows with a NULL cursor column found by the last run that caught up; the cursor never reaches them, so each run copies them in an extra pass. Non-zero: make the cursor columns NOT NULL in the source.",
		}, src),
		ahead: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_rows_ahead_of_clock",
			Help: "Rows whose first cursor column lies past the source's clock plus the clock allowance ('infinity', a wrong year), found by the last run that caught up; each run copies them in an extra pass. Non-zero: correct their stamps in the source.",
		}, src),
	}
	reg.MustRegister(o.nullCursor, o.ahead)
	return o
}

func (o *outside) remove(l prometheus.Labels) {
	o.nullCursor.DeletePartialMatch(l)
	o.ahead.DeletePartialMatch(l)
}

// Outside records the rows outside the cursor's reach that a run which
// caught up counted.
func (m *Metrics) Outside(name string, nullCursor, aheadOfClock int64) {
	m.outside.nullCursor.WithLabelValues(name).Set(float64(nullCursor))
	m.outside.ahead.WithLabelValues(name).Set(float64(aheadOfClock))
}
