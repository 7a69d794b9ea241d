package syncer_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/watermark"

	"github.com/syncd/syncd/internal/pgpool"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/syncer"
)

// BenchmarkIdleRun times one run of an unchanged 20-row table that has
// caught up, as run --once makes it (fresh sessions, every catalog read)
// and as the daemon does (pooled sessions, catalog reads skipped while the
// fingerprints hold), and counts its round trips and new sessions on the
// wire:
//
//	go test -run '^$' -bench BenchmarkIdleRun -benchtime 200x ./syncer/
func BenchmarkIdleRun(b *testing.B) {
	e := &env{src: pgtest.NewDB(b), dst: pgtest.NewDB(b)}
	e.src.Exec(b, `CREATE TABLE public.src (id int PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT now(), v text);
CREATE INDEX ON public.src (updated_at, id);
INSERT INTO public.src SELECT i, now() - interval '1 hour', 'x' FROM generate_series(1, 20) i; ANALYZE public.src`)
	store, err := watermark.Open(filepath.Join(b.TempDir(), "state.db"), 0)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	c, err := config.Parse("idle.yaml", []byte(fmt.Sprintf(`name: idle
source:
  dsn: %s
  table: public.src
  cursor: [updated_at, id]
  lookback: 0s
sink:
  dsn: %s
  table: public.copy
  key: [id]
`, e.src.URL, e.dst.URL)))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := syncer.Run(context.Background(), syncer.Options{Config: c, Store: store}); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"fresh", "pooled"} {
		b.Run(mode, func(b *testing.B) {
			var ctr pgutil.Counter
			ctx := pgutil.WithCounter(context.Background(), &ctr)
			o := syncer.Options{Config: c, Store: store}
			if mode == "pooled" {
				p := pgpool.New(pgpool.Options{MaxIdle: 1})
				defer p.Close()
				o.Pool, o.Schema = p, &syncer.SchemaCache{}
				for range 2 { // fill the pool and the cache
					if _, err := syncer.Run(ctx, o); err != nil {
						b.Fatal(err)
					}
				}
			}
			before := ctr.Snapshot()
			b.ResetTimer()
			for b.Loop() {
				if _, err := syncer.Run(ctx, o); err != nil {
					b.Fatal(err)
				}
			}
			got := ctr.Snapshot().Since(before)
			b.ReportMetric(float64(got.RoundTrips)/float64(b.N), "roundtrips/run")
			b.ReportMetric(float64(got.Connects)/float64(b.N), "sessions/run")
		})
	}
}
