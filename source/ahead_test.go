package source_test

import (
	"context"
	"testing"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/source"
)

// The look for rows stamped ahead of the clock, read in the bound's own
// round trip (ReadAheadWith: one round trip for both), finds what the statement of its own finds
// for the same bound, for each kind of timestamp column.
func TestAheadOfClockReadWithTheBound(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	for _, typ := range []string{"timestamptz", "timestamp", "timestamp(3)"} {
		t.Run(typ, func(t *testing.T) {
			db.Exec(t, `DROP TABLE IF EXISTS ev; CREATE TABLE ev (id int PRIMARY KEY, at `+typ+` NOT NULL);
INSERT INTO ev VALUES (1, (now() AT TIME ZONE 'UTC')::`+typ+` - interval '1 minute'), (2, (now() AT TIME ZONE 'UTC')::`+typ+` + interval '20 seconds')`)
			if typ == "timestamptz" {
				db.Exec(t, `UPDATE ev SET at = now() + interval '20 seconds' WHERE id = 2`)
			}
			c, err := config.Parse("ev.yaml", []byte(`name: ev
source:
  dsn: `+db.URL+`
  table: public.ev
  cursor: [at, id]
sink:
  dsn: `+db.URL+`
  table: public.ev_copy
`))
			if err != nil {
				t.Fatal(err)
			}
			var ctr pgutil.Counter
			ctx := pgutil.WithCounter(ctx, &ctr)
			r, err := source.Open(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(ctx)
			var (
				b    source.Bound
				with time.Duration
				ok   bool
			)
			for i := range 2 { // the first prepares the statements on the session
				before := ctr.Snapshot()
				r.ReadAheadWith(time.Minute)
				if b, err = r.Bound(ctx); err != nil {
					t.Fatal(err)
				}
				with, ok, err = r.AheadOfClock(ctx, b, time.Minute)
				if err != nil || !ok || with <= 0 || with > 20*time.Second {
					t.Fatalf("read with the bound: %s %v %v; want the row stamped up to 20 s past the bound", with, ok, err)
				}
				// A timestamp(p) truncates its bound to p digits: looked
				// for by a statement of its own.
				want := 1
				if typ == "timestamp(3)" {
					want = 2
				}
				if n := ctr.Snapshot().Since(before).RoundTrips; i == 1 && n != want {
					t.Errorf("the bound and the look ahead took %d round trips, want %d", n, want)
				}
			}
			alone, ok2, err := r.AheadOfClock(ctx, b, time.Minute)
			if err != nil || ok2 != ok || alone != with {
				t.Fatalf("read alone: %s %v %v; read with the bound: %s", alone, ok2, err, with)
			}
		})
	}
}
