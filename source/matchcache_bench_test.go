package source_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncd/syncd/internal/pgpool"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/source"
)

// BenchmarkPatternMatch times one match of a pattern source whose catalog
// did not change (the daemon's tick of a pattern source), with 50 and 300
// tables in the schema (each with a primary key and an index on its
// cursor), as the daemon did it before (a fresh session, every table
// described) and does now (a pooled session, the catalog fingerprints,
// no table described), and counts its round trips and new sessions on
// the wire:
//
//	go test -run '^$' -bench BenchmarkPatternMatch -benchtime 10x ./source/
func BenchmarkPatternMatch(b *testing.B) {
	for _, n := range []int{50, 300} {
		b.Run(fmt.Sprintf("tables=%d", n), func(b *testing.B) {
			db := pgtest.NewDB(b)
			db.Exec(b, `CREATE SCHEMA app; CREATE SCHEMA copy`)
			patternTables(b, db, 0, n)
			for i := range n {
				db.Exec(b, fmt.Sprintf(`CREATE INDEX ON app.t%03d (updated_at, id)`, i))
			}
			c := patternConfig(b, db, "")
			for _, mode := range []string{"describe-all", "fingerprints"} {
				b.Run(mode, func(b *testing.B) {
					var ctr pgutil.Counter
					ctx := pgutil.WithCounter(context.Background(), &ctr)
					var cache *source.MatchCache
					if mode == "fingerprints" {
						p := pgpool.New(pgpool.Options{MaxIdle: 1})
						defer p.Close()
						ctx, cache = pgpool.With(ctx, p), &source.MatchCache{}
						if _, err := source.Expand(ctx, c, cache); err != nil { // fill the pool and the cache
							b.Fatal(err)
						}
					}
					before := ctr.Snapshot()
					for b.Loop() {
						e, err := source.Expand(ctx, c, cache)
						if err != nil {
							b.Fatal(err)
						}
						if len(e.Members) != n {
							b.Fatalf("%d members, want %d", len(e.Members), n)
						}
					}
					got := ctr.Snapshot().Since(before)
					b.ReportMetric(float64(got.RoundTrips)/float64(b.N), "roundtrips/match")
					b.ReportMetric(float64(got.Connects)/float64(b.N), "sessions/match")
				})
			}
		})
	}
}
