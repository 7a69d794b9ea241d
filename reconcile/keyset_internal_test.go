package reconcile

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
)

// TestKeyRangesUseIndexOnlyScans asserts on the plans of the key check's
// checksum queries, on both sides of a vacuumed table: the first level
// (every key) and a deeper level (children of three ranges) are each
// answered by Index Only Scans of the key's index, one range each, never
// by a scan of the table's heap.
func TestKeyRangesUseIndexOnlyScans(t *testing.T) {
	ctx := context.Background()
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	ddl := `CREATE TABLE t (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, val text, n int);
INSERT INTO t SELECT g, '2026-01-01'::timestamptz + g * interval '1 s', md5(g::text), g FROM generate_series(1, 200000) g;
VACUUM ANALYZE t`
	for _, db := range []*pgtest.DB{src, dst} {
		for _, q := range strings.Split(ddl, ";\n") {
			db.Exec(t, q)
		}
	}
	cfg, err := config.Parse("t.yaml", fmt.Appendf(nil, "name: t\nsource:\n  dsn: %s\n  table: t\n  cursor: [updated_at, id]\nsink:\n  dsn: %s\n  table: t\n", src.URL, dst.URL))
	if err != nil {
		t.Fatal(err)
	}
	c, _, _, closeAll, err := open(ctx, cfg, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	k := c.keyView()
	if err := k.preferIndex(ctx); err != nil {
		t.Fatal(err)
	}
	top, ok, err := k.top(ctx)
	if err != nil || !ok {
		t.Fatalf("top: %v %v", ok, err)
	}
	kids, _ := k.split([]segment{top})
	if w := kids[0].size().Int64(); w < KeyFirstRows/2 || w > 2*KeyFirstRows {
		t.Errorf("first level of 200000 keys cut into ranges of %d keys; want about %d", w, KeyFirstRows)
	}
	k.level = 1
	todo := kids[10:13]
	for i := range todo {
		todo[i].n = KeyFirstRows
	}
	deeper, _ := k.split(todo)
	flo, fhi := bounds(kids)
	lo, hi := bounds(deeper)
	for _, sd := range []*side{k.src, k.dst} {
		if !sd.ranged {
			t.Fatalf("%s: the key check does not sum the ranges of the vacuumed table's key by index ranges", sd.role)
		}
		for _, q := range []struct {
			name string
			sql  string
			args []any
		}{
			{"first level", sd.rangedSQL(), []any{flo, fhi}},
			{"deeper level", sd.rangedSQL(), []any{lo, hi}},
		} {
			rows, err := sd.conn.Query(ctx, "EXPLAIN "+q.sql, q.args...)
			if err != nil {
				t.Fatalf("%s %s: %v", sd.role, q.name, err)
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			plan := strings.Join(lines, "\n")
			if !strings.Contains(plan, "Index Only Scan using t_pkey on t y") || strings.Contains(plan, "Seq Scan on t") || strings.Contains(plan, "HashAggregate") {
				t.Errorf("%s, %s: want Index Only Scans of t_pkey, no Seq Scan of t and no hash table of ranges:\n%s\n%s", sd.role, q.name, q.sql, plan)
			}
		}
	}
}
