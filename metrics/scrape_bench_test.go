package metrics_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/syncd/syncd/metrics"
)

// BenchmarkScrape is one GET /metrics of a daemon with 1,000 sources that
// each ran once, as the daemon serves it (promhttp over the registry),
// plain and gzip (Prometheus and Go's HTTP client ask for gzip).
func BenchmarkScrape(b *testing.B) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "bench")
	for i := range 1000 {
		name := fmt.Sprintf("many.t%04d", i+1)
		m.AddSource(name, metrics.Totals{Read: 20, Written: 20})
		m.Page(name, 20, 20, 0, time.Now())
		m.Bound(name, time.Now(), time.Second, 0)
		m.CaughtUp(name, time.Now())
		m.CursorIndexMissing(name, false)
		m.Outside(name, 0, 0)
		m.RunDone(name, metrics.OutcomeOK, 50*time.Millisecond)
	}
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	for _, enc := range []string{"plain", "gzip"} {
		b.Run(enc, func(b *testing.B) {
			var size int64
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
				if enc == "gzip" {
					req.Header.Set("Accept-Encoding", "gzip")
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				size = int64(w.Body.Len())
				io.Copy(io.Discard, w.Body)
			}
			b.ReportMetric(float64(size), "bytes/scrape")
		})
	}
}
