package sink_test

import "testing"

// BenchmarkApplyPage applies one 1,000-row binary page: by COPY straight
// into an empty copy (fast), and again over the stored rows (probe, then
// the staging table and upsert).
func BenchmarkApplyPage(b *testing.B) {
	e := newFastEnv(b, 1000, 1000)
	s := e.openSink(b, true)
	p := e.pages(b)[0]
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			e.db.Exec(b, "TRUNCATE copy")
			b.StartTimer()
			apply(b, s, p)
		}
	})
	apply(b, s, p)
	b.Run("upsert", func(b *testing.B) {
		for b.Loop() {
			apply(b, s, p)
		}
	})
}
