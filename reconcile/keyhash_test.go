package reconcile_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/reconcile"
)

// TestKeysValueHashedKeys deletes scattered source rows under keys that
// are not a single integer, each hashed by its values in the key check
// (uuid and text by their bytes, integers by value, chained column by
// column): the check reports exactly the deleted keys as extra, the repair
// deletes exactly them, a second check finds nothing, and the copy then
// equals the source row by row. The text keys include one under a German
// ICU collation, one under a nondeterministic (case-insensitive) ICU
// collation, a copy whose key columns have other types of the same values
// (varchar for text, int8 for int4), and a composite key whose columns
// hold swapped values of each other.
func TestKeysValueHashedKeys(t *testing.T) {
	const rows = 3000
	cases := []struct {
		name, src, dst, key string
		// order sorts both tables for the row-by-row comparison.
		order string
	}{
		{"uuid", "k uuid PRIMARY KEY", "", "[k]", "k"},
		{"text-german", `k text COLLATE "de-x-icu" PRIMARY KEY`, "", "[k]", `k COLLATE "C"`},
		{"text-nondeterministic", `k text COLLATE syncd_ci PRIMARY KEY`, "", "[k]", `k COLLATE "C"`},
		{"varchar-copy", `k text PRIMARY KEY`, `k varchar PRIMARY KEY`, "[k]", `k COLLATE "C"`},
		{"int-int", "a int4 NOT NULL, b int4 NOT NULL, PRIMARY KEY (a, b)", "a int8 NOT NULL, b int4 NOT NULL, PRIMARY KEY (a, b)", "[a, b]", "a, b"},
		{"text-int", `r text COLLATE "de-x-icu" NOT NULL, n int4 NOT NULL, PRIMARY KEY (r, n)`, "", "[r, n]", `r COLLATE "C", n`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Row g's key: the uuid of md5(g); a text with case and
			// accents; (g % 50, g / 50) with its mirror (g / 50, g % 50)
			// present too; a region and a number.
			var cols, vals, keyText string
			switch tc.name {
			case "uuid":
				cols, vals, keyText = "k", "md5(g::text)::uuid", "k::text"
			case "int-int":
				cols, vals, keyText = "a, b", "a, b", "a || ',' || b"
			case "text-int":
				cols, vals, keyText = "r, n", "(ARRAY['a','A','ä','Ä','ß','ss','é','e'])[1 + g % 8], g", "r || ',' || n"
			default:
				cols, vals, keyText = "k", "(ARRAY['k','K','ä','Ä','ß'])[1 + g % 5] || '-' || g", "k"
			}
			from := "generate_series(1, " + fmt.Sprint(rows) + ") g"
			if tc.name == "int-int" {
				from = "(SELECT a, b, row_number() OVER (ORDER BY a, b) AS g FROM (SELECT DISTINCT a, b FROM generate_series(1, " + fmt.Sprint(rows/2) + ") g, LATERAL (VALUES (g % 50, g / 50), (g / 50, g % 50)) v(a, b)) p) q"
			}
			dst := tc.dst
			if dst == "" {
				dst = tc.src
			}
			f := &fixture{src: pgtest.NewDB(t), dst: pgtest.NewDB(t)}
			for _, db := range []*pgtest.DB{f.src, f.dst} {
				db.Exec(t, `CREATE COLLATION syncd_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`)
			}
			f.src.Exec(t, "CREATE TABLE t ("+tc.src+", g int8 NOT NULL UNIQUE, updated_at timestamptz NOT NULL, val text)")
			f.dst.Exec(t, "CREATE TABLE t ("+dst+", g int8 NOT NULL UNIQUE, updated_at timestamptz NOT NULL, val text)")
			f.src.Exec(t, "INSERT INTO t ("+cols+", g, updated_at, val) SELECT "+vals+", g, '2026-01-01'::timestamptz + g * interval '1 s', md5(g::text) FROM "+from)
			f.src.Exec(t, "ANALYZE t")
			f.configure(t, fmt.Sprintf("name: t\nsource:\n  dsn: %s\n  table: t\n  cursor: [updated_at, g]\nsink:\n  dsn: %s\n  table: t\n  key: %s\n", f.src.URL, f.dst.URL, tc.key))
			deleted := queryStrings(t, f.src, "DELETE FROM t WHERE g % 97 = 5 RETURNING "+keyText)
			if len(deleted) < 20 {
				t.Fatalf("deleted %d rows, want at least 20", len(deleted))
			}
			for _, db := range []*pgtest.DB{f.src, f.dst} {
				db.Exec(t, "VACUUM ANALYZE t")
			}

			rep := f.keys(t, reconcile.Options{})
			assertCounts(t, rep, 0, int64(len(deleted)), 0)
			assertKeys(t, "extra", rep.Keys.Extra, deleted...)
			rep = f.keys(t, reconcile.Options{Repair: true})
			if rep.Deleted() != int64(len(deleted)) || rep.After == nil || !rep.After.Equal() {
				t.Fatalf("repair deleted %d rows (want %d), after it: %+v", rep.Deleted(), len(deleted), rep.After)
			}
			left := queryStrings(t, f.src, "SELECT count(*)::text FROM t")[0]
			if rep = f.keys(t, reconcile.Options{}); !rep.Equal() || fmt.Sprint(rep.RowsCompared) != left {
				t.Fatalf("a second check found %d extra, %d missing, compared %d keys (the source holds %s)", rep.Extra, rep.Missing, rep.RowsCompared, left)
			}
			q := "SELECT " + strings.ReplaceAll(cols, ", ", "::text || '|' || ") + "::text || '|' || g || '|' || updated_at || '|' || val FROM t ORDER BY " + tc.order
			if a, b := queryStrings(t, f.src, q), queryStrings(t, f.dst, q); !slices.Equal(a, b) {
				t.Fatalf("after the repair the copy has %d rows, the source %d, or they differ", len(b), len(a))
			}
		})
	}
}

// A key the copy holds in another form that the key's nondeterministic
// collation calls equal ('Alpha' in the copy, 'alpha' in the source, after
// the source's key changed only in case) is not a deleted row: the key
// check must not delete the copy's row, whose key the source still holds.
func TestKeysCollationEqualKeyIsNotDeleted(t *testing.T) {
	f := &fixture{src: pgtest.NewDB(t), dst: pgtest.NewDB(t)}
	for _, db := range []*pgtest.DB{f.src, f.dst} {
		db.Exec(t, `CREATE COLLATION syncd_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE TABLE t (k text COLLATE syncd_ci PRIMARY KEY, updated_at timestamptz NOT NULL, val text);
INSERT INTO t SELECT 'key' || g, '2026-01-01'::timestamptz + g * interval '1 s', md5(g::text) FROM generate_series(1, 2000) g;
INSERT INTO t VALUES ('Alpha', '2026-01-01', 'a')`)
	}
	f.src.Exec(t, "UPDATE t SET k = 'alpha' WHERE k = 'Alpha'; DELETE FROM t WHERE k IN ('key7', 'key700')")
	for _, db := range []*pgtest.DB{f.src, f.dst} {
		db.Exec(t, "VACUUM ANALYZE t")
	}
	f.configure(t, fmt.Sprintf("name: t\nsource:\n  dsn: %s\n  table: t\n  cursor: [updated_at, k]\nsink:\n  dsn: %s\n  table: t\n  key: [k]\n", f.src.URL, f.dst.URL))
	rep := f.keys(t, reconcile.Options{Repair: true})
	if rep.Deleted() != 2 {
		t.Errorf("the repair deleted %d rows, want 2 (key7 and key700)", rep.Deleted())
	}
	if n := queryStrings(t, f.dst, "SELECT count(*)::text FROM t WHERE k = 'alpha'")[0]; n != "1" {
		t.Fatalf("the copy holds %s rows of the key 'alpha' (as 'Alpha'), want 1: the key check deleted a row the source still holds", n)
	}
	if n := queryStrings(t, f.dst, "SELECT count(*)::text FROM t")[0]; n != "1999" {
		t.Fatalf("the copy holds %s rows, want 1999", n)
	}
}
