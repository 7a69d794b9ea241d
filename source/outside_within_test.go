package source_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/source"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// validate's count of the rows outside the cursor's reach is exact when it
// is quick, and the planner's estimate, said so, when it would scan a big
// table longer than allowed.
func TestCountOutsideWithin(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE ev (id bigint PRIMARY KEY, updated_at timestamptz, v text);
INSERT INTO ev SELECT g, CASE WHEN g % 100 = 0 THEN NULL ELSE now() - g * interval '1 second' END, 'v' || g FROM generate_series(1, 200000) g;
ANALYZE ev`)
	c, err := config.Parse("ev.yaml", []byte(`name: ev
source:
  dsn: `+db.URL+`
  table: public.ev
  cursor: [updated_at, id]
sink:
  dsn: `+db.URL+`
  table: public.ev_copy
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := source.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	exact, err := r.CountOutsideWithin(ctx, time.Minute)
	if err != nil || exact.Estimated || exact.NullCursor != 2000 || exact.Ahead != 0 {
		t.Fatalf("count within a minute: %+v %v, want exactly 2000 NULL cursors", exact, err)
	}
	est, err := r.CountOutsideWithin(ctx, time.Millisecond)
	if err != nil || !est.Estimated || est.NullCursor < 1000 || est.NullCursor > 4000 {
		t.Fatalf("count within 1ms: %+v %v, want the planner's estimate, about 2000", est, err)
	}
	w := est.Warnings(r.Table())
	if len(w) != 2 || !strings.HasPrefix(w[1], "about ") || w[0] != "counting the rows of public.ev outside the cursor's reach (NULL cursor, ahead of the clock) took over 1ms: no index answers it, so each run scans the table for them; the figures below are the planner's estimates" {
		t.Errorf("warnings: %q", w)
	}
	// The session is usable afterwards: the timeout was the count's only.
	if o, err := r.CountOutside(ctx); err != nil || o.NullCursor != 2000 {
		t.Errorf("count after the estimate: %+v %v", o, err)
	}
}
