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
// (every key, children by arithmetic) and a deeper level (three children
// read by ranges of the key) are each answered by an Index Only Scan of
// the key's index, never by a scan of the table's heap.
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
	kids, bucket := k.split([]segment{top})
	todo := kids[10:13]
	for i := range todo {
		todo[i].n = 1000
	}
	deeper, _ := k.split(todo)
	lo, hi := bounds(deeper)
	plo, phi := bounds(todo)
	for _, sd := range []*side{k.src, k.dst} {
		for _, q := range []struct {
			name string
			sql  string
			args []any
		}{
			{"first level", sd.checksumSQL(false, bucket), nil},
			{"deeper level", sd.checksumSQL(true, ""), []any{lo, hi, plo, phi}},
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
			if !strings.Contains(plan, "Index Only Scan using t_pkey on t y") || strings.Contains(plan, "Seq Scan on t") {
				t.Errorf("%s, %s: want an Index Only Scan of t_pkey and no Seq Scan of t:\n%s\n%s", sd.role, q.name, q.sql, plan)
			}
		}
	}
}
