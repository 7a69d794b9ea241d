package testutil

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is a /metrics page read by Prometheus's own text parser, so a
// test sees what a scraper sees (a malformed page fails the test).
type Metrics struct {
	// Families are the parsed metric families by name.
	Families map[string]*dto.MetricFamily
	// Series holds every sample by its series as the page writes it: the
	// name, then the labels sorted by name (`syncd_runs_total{outcome="ok",source="orders"}`);
	// a histogram or summary gives name_count, name_sum and its buckets
	// or quantiles. A series the page lacks reads as 0: use Value or
	// index with ", ok" where absent and zero differ.
	Series map[string]float64
}

// Scrape reads http://addr/metrics and parses it, failing the test if it
// cannot.
func Scrape(t testing.TB, addr string) Metrics {
	t.Helper()
	m, err := TryScrape(addr)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TryScrape is Scrape returning an error, for a test that polls a daemon
// still starting (which refuses the connection).
func TryScrape(addr string) (Metrics, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return Metrics{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return Metrics{}, fmt.Errorf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return ParseMetrics(string(body))
}

// ParseMetrics parses a page in the Prometheus text format.
func ParseMetrics(text string) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return Metrics{}, fmt.Errorf("/metrics does not parse: %w\n%s", err, text)
	}
	m := Metrics{Families: mfs, Series: map[string]float64{}}
	for name, mf := range mfs {
		for _, s := range mf.GetMetric() {
			m.addSeries(name, s)
		}
	}
	return m, nil
}

func (m Metrics) addSeries(name string, s *dto.Metric) {
	labels := s.GetLabel()
	switch {
	case s.Gauge != nil:
		m.Series[series(name, labels)] = s.GetGauge().GetValue()
	case s.Counter != nil:
		m.Series[series(name, labels)] = s.GetCounter().GetValue()
	case s.Untyped != nil:
		m.Series[series(name, labels)] = s.GetUntyped().GetValue()
	case s.Histogram != nil:
		h := s.GetHistogram()
		m.Series[series(name+"_count", labels)] = float64(h.GetSampleCount())
		m.Series[series(name+"_sum", labels)] = h.GetSampleSum()
		for _, b := range h.GetBucket() {
			m.Series[series(name+"_bucket", labels, "le", bound(b.GetUpperBound()))] = float64(b.GetCumulativeCount())
		}
	case s.Summary != nil:
		sm := s.GetSummary()
		m.Series[series(name+"_count", labels)] = float64(sm.GetSampleCount())
		m.Series[series(name+"_sum", labels)] = sm.GetSampleSum()
		for _, q := range sm.GetQuantile() {
			m.Series[series(name, labels, "quantile", bound(q.GetQuantile()))] = q.GetValue()
		}
	}
}

// Value is the value of the series of family name with exactly labels
// (a histogram's or summary's sample count), and whether it exists.
func (m Metrics) Value(name string, labels map[string]string) (float64, bool) {
	mf := m.Families[name]
next:
	for _, s := range mf.GetMetric() {
		if len(s.GetLabel()) != len(labels) {
			continue
		}
		for _, l := range s.GetLabel() {
			if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
				continue next
			}
		}
		switch {
		case s.Gauge != nil:
			return s.GetGauge().GetValue(), true
		case s.Counter != nil:
			return s.GetCounter().GetValue(), true
		case s.Untyped != nil:
			return s.GetUntyped().GetValue(), true
		case s.Histogram != nil:
			return float64(s.GetHistogram().GetSampleCount()), true
		case s.Summary != nil:
			return float64(s.GetSummary().GetSampleCount()), true
		}
	}
	return 0, false
}

// series writes a series as the text format does: name{a="x",b="y"}, the
// labels (and the extra pair, a bucket's le) sorted by name.
func series(name string, labels []*dto.LabelPair, extra ...string) string {
	pairs := make([][2]string, 0, len(labels)+1)
	for _, l := range labels {
		pairs = append(pairs, [2]string{l.GetName(), l.GetValue()})
	}
	if len(extra) == 2 {
		pairs = append(pairs, [2]string{extra[0], extra[1]})
	}
	if len(pairs) == 0 {
		return name
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i][0] < pairs[j][0] })
	var b strings.Builder
	b.WriteString(name + "{")
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p[0] + `="` + labelEscaper.Replace(p[1]) + `"`)
	}
	b.WriteByte('}')
	return b.String()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func bound(f float64) string {
	if math.IsInf(f, +1) {
		return "+Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
