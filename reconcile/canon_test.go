package reconcile

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
)

// TestCanonicalTextIgnoresSettings computes the canonical row text of the
// same rows in sessions with very different settings, and of equal values
// held in columns with other type modifiers: every text must be the same.
func TestCanonicalTextIgnoresSettings(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	db.Exec(t, `
CREATE TABLE a (id int, tz timestamptz, ts timestamp, d date, n numeric, f8 float8, f4 float4, j json, jb jsonb, by bytea,
  na numeric[], tza timestamptz[], t text, m money, iv interval);
CREATE TABLE b (id int, tz timestamptz, ts timestamp, d date, n numeric(12,2), f8 float8, f4 float4, j jsonb, jb jsonb, by bytea,
  na numeric(10,3)[], tza timestamptz[], t varchar(20), m money, iv interval);
INSERT INTO a VALUES
 (1, '2026-01-01 09:00:00.000001+09', '2026-01-01 00:00:00.5', '2026-01-01', 1.0, 0.1, 0.1, '{"b": 1,  "a": [1.50]}', '{"x": null}', '\x00ff',
  '{1.0,NULL,2.50}', '{"2026-01-01 00:00:00+00",NULL}', '', 12.5, '1 year 2 mons 3 days 04:05:06.000007'),
 (2, 'infinity', '-infinity', 'infinity', 'NaN', 'NaN', '-0', '[]', '[]', '', '{}', '{}', NULL, NULL, NULL),
 (3, '0044-03-15 12:00:00+00 BC', '1999-12-31 23:59:59.999999', '0001-01-01', 100, 1e300, 3.4e38, 'null', '"s"', NULL, NULL, NULL, 'x', 0, '-1 day 00:00:01');
INSERT INTO b SELECT * FROM a;`)
	sessions := []map[string]string{
		{"TimeZone": "UTC", "DateStyle": "ISO, YMD", "extra_float_digits": "3", "bytea_output": "hex", "lc_monetary": "C", "IntervalStyle": "postgres"},
		{"TimeZone": "Asia/Tokyo", "DateStyle": "SQL, DMY", "extra_float_digits": "0", "bytea_output": "escape", "lc_monetary": "C", "IntervalStyle": "sql_standard"},
		{"TimeZone": "America/St_Johns", "DateStyle": "German", "extra_float_digits": "-2", "bytea_output": "hex", "lc_monetary": "C", "IntervalStyle": "iso_8601"},
	}
	var want []string
	for i, params := range sessions {
		cfg, err := pgx.ParseConfig(db.URL)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range params {
			cfg.RuntimeParams[k] = v
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		tables := []string{"a", "b"}
		cols := make([][]column, len(tables))
		for j, table := range tables {
			var err error
			cols[j], err = describe(ctx, conn, config.Table{Schema: "public", Name: table}, []string{"id", "tz", "ts", "d", "n", "f8", "f4", "j", "jb", "by", "na", "tza", "t", "m", "iv"})
			if err != nil {
				t.Fatal(err)
			}
		}
		// b spells n, j and na otherwise than a: compared loosely.
		loosen(cols[0], cols[1])
		for j, table := range tables {
			rows, err := conn.Query(ctx, "SELECT "+rowText("y.", cols[j])+" FROM "+table+" y ORDER BY id")
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			if want == nil {
				want = got
				continue
			}
			if !slices.Equal(got, want) {
				t.Errorf("session %d, table %s:\n got  %q\n want %q", i, table, got, want)
			}
		}
		conn.Close(ctx)
	}
	// NULL and the empty string stay apart, in a value and in an array.
	if !strings.HasSuffix(want[0], ",'','12.5','14mon 3d 14706000007us'") || !strings.HasSuffix(want[1], ",NULL,NULL,NULL") {
		t.Errorf("NULL and '' are not told apart: %q", want)
	}
}

// TestLooseColumnsCompareAsTheCopySpellsThem holds in b the values of a
// as the sink writes them (a's text output into b's types, which spell
// some of them otherwise): loosened columns compare equal, and the same
// columns compared exactly do not.
func TestLooseColumnsCompareAsTheCopySpellsThem(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	db.Exec(t, `
CREATE TABLE a (id int, n numeric(10,1), i int, j json, f real, na numeric(9,2)[], ja json[]);
CREATE TABLE b (id int, n numeric(12,2), i numeric(12,2), j jsonb, f double precision, na numeric(10,3)[], ja jsonb[]);
INSERT INTO a VALUES (1, 2.0, 5, '{"b": 1,  "a": [1.50]}', 0.1, '{1.50,NULL}', ARRAY['{"y": 1, "x": 2}']::json[]),
  (2, -0.5, 0, '[]', 'NaN', '{}', '{}'), (3, NULL, NULL, NULL, '-0', NULL, NULL);`)
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// syncd's sessions print floats with extra_float_digits = 3.
	if _, err := conn.Exec(ctx, "SET extra_float_digits = 3"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO b SELECT id, n::text::numeric(12,2), i::text::numeric(12,2), j::text::jsonb, f::text::float8, na::text::numeric(10,3)[], ja::text::jsonb[] FROM a"); err != nil {
		t.Fatal(err)
	}
	names := []string{"id", "n", "i", "j", "f", "na", "ja"}
	texts := func(table string, cols []column) []string {
		rows, err := conn.Query(ctx, "SELECT "+rowText("y.", cols)+" FROM "+table+" y ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	ca, err := describe(ctx, conn, config.Table{Schema: "public", Name: "a"}, names)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := describe(ctx, conn, config.Table{Schema: "public", Name: "b"}, names)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(names); i++ {
		if exact := texts("a", ca[i:i+1]); slices.Equal(exact, texts("b", cb[i:i+1])) {
			t.Errorf("column %s compared exactly is equal: %q", names[i], exact)
		}
	}
	loosen(ca, cb)
	for i, c := range ca {
		if c.Loose != (i > 0) {
			t.Errorf("column %s: loose %v", c.Name, c.Loose)
		}
	}
	if x, y := texts("a", ca), texts("b", cb); !slices.Equal(x, y) {
		t.Errorf("loosened columns differ:\n a %q\n b %q", x, y)
	}
}
