package main_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// A run whose copy's name is held by something that is not a table (a
// view, a sequence, a materialized view) refuses it before writing,
// naming what holds it and what to do, as validate does: CREATE TABLE IF
// NOT EXISTS skips any relation of the name, and the pages would go to
// the view (through it into its base table) or fail mid-run. The sink is
// left as it was: the types created for the copy are rolled back.
func TestRunRefusesACopyNameHeldByAView(t *testing.T) {
	for _, c := range []struct{ name, ddl, what string }{
		{"view", "CREATE TABLE copy.base (id int PRIMARY KEY, updated_at timestamptz, v text); CREATE VIEW copy.orders AS SELECT * FROM copy.base", "a view"},
		{"sequence", "CREATE SEQUENCE copy.orders", "a sequence"},
		{"matview", "CREATE MATERIALIZED VIEW copy.orders AS SELECT 1 AS id", "a materialized view"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
			src.Exec(t, `CREATE TYPE mood AS ENUM ('ok', 'sad');
CREATE TABLE orders (id int PRIMARY KEY, updated_at timestamptz NOT NULL, v text, m mood);
INSERT INTO orders SELECT g, '2026-01-01'::timestamptz + g * interval '1 s', 'o' || g, 'ok' FROM generate_series(1, 50) g`)
			dst.Exec(t, "CREATE SCHEMA copy; "+c.ddl)
			dir := t.TempDir()
			cfg := writeConfig(t, dir, "orders.yaml", fmt.Sprintf(`name: orders
source:
  dsn: %s
  table: public.orders
  cursor: [updated_at, id]
sink:
  dsn: %s
  table: copy.orders
  key: [id]
`, src.URL, dst.URL))
			r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", dir+"/state.db")
			want := "copy.orders in the sink is " + c.what + ", not a table, so the copy cannot be created there: drop or rename it, or choose another sink.table"
			if r.Code != 2 || !strings.Contains(r.Stderr, want) {
				t.Fatalf("run: exit %d, want 2 and %q\n%s", r.Code, want, r)
			}
			// The enum type the copy needs was created in the same
			// transaction, and rolled back with it.
			if n := count(t, dst, "SELECT count(*) FROM pg_type WHERE typname = 'mood'"); n != 0 {
				t.Fatalf("the refused run left %d types named mood in the sink, want 0", n)
			}
			if c.name == "view" {
				if n := count(t, dst, "SELECT count(*) FROM copy.base"); n != 0 {
					t.Fatalf("the view's base table holds %d rows, want 0", n)
				}
			}
		})
	}
}
