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

// TestKeyHashByValue evaluates keyHash in PostgreSQL: swapping the values
// of two key columns changes the hash, as do 1 and 2^32 (which hashint8extended
// unseeded hashes alike); an int4 and an int8 of the same
// value hash alike, as do a text and a varchar, so that a copy whose key
// column has a wider type agrees with its source; the line and the summed
// hash of one key differ.
func TestKeyHashByValue(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE h (name text PRIMARY KEY, a int4, b int4, c int8, d int8, s text, v varchar, u uuid)`)
	db.Exec(t, `INSERT INTO h VALUES
  ('one-two', 1, 2, 1, 2, 'x', 'x', '00000000-0000-0000-0000-000000000001'),
  ('two-one', 2, 1, 2, 1, 'x', 'x', '00000000-0000-0000-0000-000000000001'),
  ('zero', 0, 0, 0, 0, 'X', 'X', '00000000-0000-0000-0000-000000000002'),
  ('minus', -1, -1, -1, -1, 'x ', 'x ', '00000000-0000-0000-0000-000000000003'),
  ('big', 1, 1, 4294967296, 1, 'ab', 'ab', '00000000-0000-0000-0000-000000000004')`)
	cols := map[string]column{
		"a": {Name: "a", Base: "int4"}, "b": {Name: "b", Base: "int4"}, "c": {Name: "c", Base: "int8"}, "d": {Name: "d", Base: "int8"},
		"s": {Name: "s", Base: "text"}, "v": {Name: "v", Base: "varchar"}, "u": {Name: "u", Base: "uuid"},
	}
	hash := func(row string, seed int64, names ...string) int64 {
		t.Helper()
		keys := make([]column, len(names))
		for i, n := range names {
			keys[i] = cols[n]
		}
		var h int64
		if err := db.Pool.QueryRow(context.Background(), "SELECT "+keyHash("y.", keys, valueFamilies(keys, keys), seed)+" FROM h y WHERE name = $1", row).Scan(&h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	if hash("one-two", lineSeed, "a", "b") == hash("two-one", lineSeed, "a", "b") {
		t.Error("(1, 2) and (2, 1) hash alike")
	}
	if hash("one-two", lineSeed, "a", "b") != hash("one-two", lineSeed, "c", "d") {
		t.Error("int4 (1, 2) and int8 (1, 2) hash apart")
	}
	if hash("big", sumSeed, "c") == hash("one-two", sumSeed, "c") || hash("zero", sumSeed, "c") == hash("minus", sumSeed, "c") {
		t.Error("1 and 2^32, or 0 and -1, hash alike")
	}
	if hash("one-two", sumSeed, "s", "u") != hash("one-two", sumSeed, "v", "u") {
		t.Error("text and varchar 'x' hash apart")
	}
	if hash("one-two", sumSeed, "s") == hash("zero", sumSeed, "s") || hash("one-two", sumSeed, "s") == hash("minus", sumSeed, "s") {
		t.Error("'x', 'X' and 'x ' do not all hash apart")
	}
	if hash("one-two", sumSeed, "u") == hash("zero", sumSeed, "u") {
		t.Error("two uuids hash alike")
	}
	if hash("one-two", sumSeed, "u", "a") == hash("one-two", lineSeed, "u", "a") {
		t.Error("the line and the summed hash of a key are the same")
	}
	// A mixed family: a uuid key of the source held as text by the copy
	// is hashed by its canonical text on both sides.
	if f := valueFamilies([]column{cols["u"], cols["a"]}, []column{cols["s"], cols["c"]}); f[0] != "" || f[1] != "int" {
		t.Errorf("families of (uuid, int4) against (text, int8): %q, want canonical text and int", f)
	}
}

// TestHashedKeyLevelsUseIndexOnlyScans asserts on the plans of the key
// check's checksum queries for keys on the hash line (a uuid, a (text,
// int4) key), on both sides of a vacuumed table: the first level and a
// deeper one read the key's index by an Index Only Scan, never the heap,
// and hash the key by its values (no canonical text is built).
func TestHashedKeyLevelsUseIndexOnlyScans(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ name, ddl, key, hash string }{
		{"uuid", `CREATE TABLE t (k uuid PRIMARY KEY, updated_at timestamptz NOT NULL, val text);
INSERT INTO t SELECT md5(g::text)::uuid, '2026-01-01'::timestamptz + g * interval '1 s', md5(g::text) FROM generate_series(1, 50000) g`, "[k]", "uuid_hash_extended"},
		{"text-int", `CREATE TABLE t (r text NOT NULL, n int4 NOT NULL, updated_at timestamptz NOT NULL, val text, PRIMARY KEY (r, n));
INSERT INTO t SELECT 'r' || (g % 100), g, '2026-01-01'::timestamptz + g * interval '1 s', md5(g::text) FROM generate_series(1, 50000) g`, "[r, n]", "hashint8extended"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
			for _, db := range []*pgtest.DB{src, dst} {
				for _, q := range strings.Split(tc.ddl, ";\n") {
					db.Exec(t, q)
				}
				db.Exec(t, "VACUUM ANALYZE t")
			}
			cfg, err := config.Parse("t.yaml", fmt.Appendf(nil, "name: t\nsource:\n  dsn: %s\n  table: t\n  cursor: [updated_at, %s]\nsink:\n  dsn: %s\n  table: t\n  key: %s\n", src.URL, strings.Trim(tc.key, "[]"), dst.URL, tc.key))
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
			if bucket == "" {
				t.Fatal("the first level of the hash line is not cut by arithmetic")
			}
			k.level = 1
			todo := kids[10:13]
			for i := range todo {
				todo[i].n = 64
			}
			deeper, _ := k.split(todo)
			lo, hi := bounds(deeper)
			for _, sd := range []*side{k.src, k.dst} {
				for _, q := range []struct {
					name string
					sql  string
					args []any
				}{
					{"first level", sd.checksumSQL(false, bucket), nil},
					{"deeper level", sd.checksumSQL(false, ""), []any{lo, hi}},
				} {
					if !strings.Contains(q.sql, tc.hash) || strings.Contains(q.sql, "quote_nullable") {
						t.Errorf("%s, %s: the key is not hashed by its values (%s):\n%s", sd.role, q.name, tc.hash, q.sql)
					}
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
						t.Errorf("%s, %s: want an Index Only Scan of t_pkey, no Seq Scan of t:\n%s\n%s", sd.role, q.name, q.sql, plan)
					}
				}
			}
		})
	}
}
