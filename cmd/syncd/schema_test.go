package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// pagilaTypes are Pagila-like types: an enum, a domain over numeric with a
// CHECK, a composite, a range, and types nested in each other (a domain
// over an enum, a composite with an enum field, a range over a domain, an
// enum in another schema).
const pagilaTypes = `
CREATE TYPE mpaa_rating AS ENUM ('G', 'PG', 'PG-13', 'R');
CREATE DOMAIN year AS numeric(4,0) CHECK (VALUE >= 1901 AND VALUE <= 2155);
CREATE TYPE money_amt AS (amount numeric(10,2), currency text);
CREATE TYPE price_range AS RANGE (subtype = numeric);
CREATE DOMAIN posint AS integer DEFAULT 1 CHECK (VALUE > 0);
CREATE TYPE posint_range AS RANGE (subtype = posint);
CREATE DOMAIN rating_d AS mpaa_rating DEFAULT 'G';
CREATE TYPE film_meta AS (rating mpaa_rating, tags text[], price money_amt);
CREATE SCHEMA cat;
CREATE TYPE cat.mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE film (
  film_id bigint PRIMARY KEY,
  updated_at timestamptz NOT NULL,
  title text NOT NULL,
  release_year year,
  rating mpaa_rating,
  ratings mpaa_rating[],
  price money_amt,
  prices price_range,
  ids posint_range,
  rd rating_d,
  meta film_meta,
  metas film_meta[],
  mood cat.mood,
  length integer,
  length_hours numeric GENERATED ALWAYS AS (length / 60.0) STORED
);
CREATE TABLE payment (
  payment_id bigint NOT NULL,
  updated_at timestamptz NOT NULL,
  rating mpaa_rating,
  amount numeric(5,2),
  PRIMARY KEY (payment_id),
  UNIQUE (updated_at, payment_id)
) PARTITION BY RANGE (payment_id);
CREATE TABLE payment_p1 PARTITION OF payment FOR VALUES FROM (1) TO (1001);
CREATE TABLE payment_p2 PARTITION OF payment FOR VALUES FROM (1001) TO (2001);
`

const filmRows = `INSERT INTO film (film_id, updated_at, title, release_year, rating, ratings, price, prices, ids, rd, meta, metas, mood, length)
SELECT g, '2026-10-01 09:00:00+00'::timestamptz + g * interval '1 second', 'film ' || g,
  1901 + g %% 250,
  (ARRAY['G','PG','PG-13','R'])[1 + g %% 4]::mpaa_rating,
  CASE WHEN g %% 7 = 0 THEN NULL ELSE ARRAY[(ARRAY['G','PG','PG-13','R'])[1 + g %% 4], 'R']::mpaa_rating[] END,
  ROW(g * 1.25, CASE WHEN g %% 3 = 0 THEN 'EUR' ELSE 'USD' END)::money_amt,
  numrange(g, g * 2.5, '[)')::text::price_range,
  CASE WHEN g %% 5 = 0 THEN 'empty'::posint_range ELSE posint_range(g, g + 10) END,
  (ARRAY['G','PG','PG-13','R'])[1 + g %% 4]::rating_d,
  ROW('PG-13', ARRAY['a,b', 'q"uote', g::text], ROW(g, 'X'))::film_meta,
  ARRAY[ROW('R', ARRAY['x'], NULL)::film_meta, NULL],
  (ARRAY['sad','ok','happy'])[1 + g %% 3]::cat.mood,
  CASE WHEN g %% 11 = 0 THEN NULL ELSE 60 + g %% 120 END
FROM generate_series(%d, %d) g`

const paymentRows = `INSERT INTO payment SELECT g, '2026-10-01 09:00:00+00'::timestamptz + g * interval '1 second',
  (ARRAY['G','PG','PG-13','R'])[1 + g %% 4]::mpaa_rating, g %% 1000 / 10.0 FROM generate_series(%d, %d) g`

// tableConfig is a source on src.table copied into dst.table (same name).
func tableConfig(src, dst *pgtest.DB, table, key string) string {
	return fmt.Sprintf(`name: %s
source:
  dsn: %s
  table: public.%s
  cursor: [updated_at, %s]
  lookback: 0s
sink:
  dsn: %s
  table: public.%s
  key: [%s]
`, table, src.URL, table, key, dst.URL, table, key)
}

// rowHashes is one md5 of each row's text form per key, in key order,
// joined: equal strings mean equal copies value by value.
func rowHashes(t *testing.T, db *pgtest.DB, table, key string) string {
	t.Helper()
	var s string
	q := fmt.Sprintf("SELECT count(*) || ':' || coalesce(string_agg(%s || '=' || md5(t::text), ',' ORDER BY %s), '') FROM %s t", key, key, table)
	if err := db.Pool.QueryRow(context.Background(), q).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// A Pagila-like schema is created from nothing in an empty sink database by
// one `run --once`: every type (nested ones, arrays, another schema) in one
// step before the tables, the generated column as a plain column, the
// partitioned table as a plain copy. Rows are equal value by value; a
// partition added later and an enum label added later are picked up by the
// next run, and validate says ok.
func TestPagilaSchemaCreatedFromNothing(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, pagilaTypes)
	src.Exec(t, fmt.Sprintf(filmRows, 1, 500))
	src.Exec(t, fmt.Sprintf(paymentRows, 1, 1500))
	dir := t.TempDir()
	cfgDir := filepath.Join(dir, "conf")
	if err := os.Mkdir(cfgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, cfgDir, "film.yaml", tableConfig(src, dst, "film", "film_id"))
	writeConfig(t, cfgDir, "payment.yaml", tableConfig(src, dst, "payment", "payment_id"))
	state := filepath.Join(dir, "state.db")
	runOK := func() {
		t.Helper()
		if r := bin.Run(t, nil, "run", "--once", "--config", cfgDir, "--state", state); r.Code != 0 {
			t.Fatalf("run: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
		}
	}
	same := func(table, key string, want int) {
		t.Helper()
		s, d := rowHashes(t, src, table, key), rowHashes(t, dst, table, key)
		if !strings.HasPrefix(s, fmt.Sprint(want, ":")) {
			t.Fatalf("source %s: want %d rows, got %s", table, want, s[:strings.IndexByte(s, ':')])
		}
		if s != d {
			t.Fatalf("copy of %s differs from the source:\nsource %.300s\ncopy   %.300s", table, s, d)
		}
	}

	if r := bin.Run(t, nil, "validate", "--config", cfgDir); r.Code != 0 {
		t.Fatalf("validate before the first run: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	if n := count(t, dst, "SELECT count(*) FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname IN ('public', 'cat')"); n != 0 {
		t.Fatalf("validate left %d types behind in the sink", n)
	}
	runOK()
	same("film", "film_id", 500)
	same("payment", "payment_id", 1500)

	// The types are the source's, not text: same labels in the same order,
	// the domain's check and default, the composite's fields.
	typeDefs := `SELECT string_agg(n.nspname || '.' || t.typname || ' ' || t.typtype::text || ' ' ||
  coalesce((SELECT string_agg(enumlabel, ',' ORDER BY enumsortorder) FROM pg_enum WHERE enumtypid = t.oid), '') || ' ' ||
  coalesce(format_type(t.typbasetype, t.typtypmod), '') || ' ' || coalesce(pg_get_expr(t.typdefaultbin, 0), '') || ' ' ||
  coalesce((SELECT string_agg(pg_get_constraintdef(c.oid), ',') FROM pg_constraint c WHERE c.contypid = t.oid), '') || ' ' ||
  coalesce((SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = t.typrelid AND t.typtype = 'c'), ''),
  E'\n' ORDER BY n.nspname, t.typname)
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname IN ('public', 'cat') AND t.typtype IN ('e', 'd', 'c', 'r') AND t.typrelid NOT IN (SELECT oid FROM pg_class WHERE relkind <> 'c')`
	ctx := context.Background()
	sameTypes := func() {
		t.Helper()
		var want, got string
		if err := src.Pool.QueryRow(ctx, typeDefs).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if err := dst.Pool.QueryRow(ctx, typeDefs).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want != got {
			t.Fatalf("the copy's types differ from the source's:\nsource:\n%s\ncopy:\n%s", want, got)
		}
	}
	sameTypes()
	var gen string
	if err := dst.Pool.QueryRow(ctx, `SELECT attgenerated::text FROM pg_attribute WHERE attrelid = 'film'::regclass AND attname = 'length_hours'`).Scan(&gen); err != nil || gen != "" {
		t.Fatalf("length_hours in the copy: generated %q (%v), want a plain column", gen, err)
	}

	// A partition added later, rows in it, a new enum label used by new
	// rows in both tables, and an update of old rows.
	src.Exec(t, `CREATE TABLE payment_p3 PARTITION OF payment FOR VALUES FROM (2001) TO (3001)`)
	src.Exec(t, fmt.Sprintf(paymentRows, 1501, 2500))
	src.Exec(t, `ALTER TYPE mpaa_rating ADD VALUE 'NC-17' AFTER 'R'`)
	src.Exec(t, `ALTER TYPE mpaa_rating ADD VALUE 'U' BEFORE 'G'`)
	src.Exec(t, fmt.Sprintf(filmRows, 501, 600))
	src.Exec(t, `UPDATE film SET rating = 'NC-17', ratings = ARRAY['U','NC-17']::mpaa_rating[], rd = 'NC-17', updated_at = updated_at + interval '1 day' WHERE film_id % 10 = 0`)
	src.Exec(t, `UPDATE payment SET rating = 'U', updated_at = updated_at + interval '1 day' WHERE payment_id % 100 = 0`)
	runOK()
	same("film", "film_id", 600)
	same("payment", "payment_id", 2500)
	sameTypes()
	if n := count(t, dst, "SELECT count(*) FROM film WHERE rating = 'NC-17'"); n != 60 {
		t.Fatalf("copy has %d films rated NC-17, want 60", n)
	}
	if r := bin.Run(t, nil, "validate", "--config", cfgDir); r.Code != 0 {
		t.Fatalf("validate after the runs: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
}

// Labels added to a source enum while the daemon runs, each used by rows
// committed right after it, reach the copy's enum before those rows: no
// run fails ("invalid input value for enum"), and the copy becomes equal
// value by value after each one.
func TestEnumLabelAddedWhileDaemonRuns(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TYPE mpaa_rating AS ENUM ('G', 'PG');
CREATE TABLE film (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), rating mpaa_rating, ratings mpaa_rating[]);
INSERT INTO film (id, rating, ratings) SELECT g, 'PG', ARRAY['G','PG']::mpaa_rating[] FROM generate_series(1, 100) g`)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "film.yaml", "schedule: \"@every 1s\"\n"+tableConfig(src, dst, "film", "id"))
	d := bin.Start(t, nil, "run", "--config", cfg, "--state", filepath.Join(dir, "state.db"), "--listen", "")
	equal := func(n int) {
		t.Helper()
		d.Eventually(t, 30*time.Second, fmt.Sprintf("the copy equal to the source (%d rows)", n), func() bool {
			diff := testutil.DiffTables(t, src.Pool, "film", dst.Pool, "film")
			return diff.Equal() && diff.SourceRows == n
		})
	}
	equal(100)
	prev := "PG"
	for i := 1; i <= 5; i++ {
		label := fmt.Sprintf("L%d", i)
		src.Exec(t, fmt.Sprintf(`ALTER TYPE mpaa_rating ADD VALUE '%s' AFTER '%s'`, label, prev))
		src.Exec(t, fmt.Sprintf(`INSERT INTO film (id, rating, ratings) SELECT g, '%s', ARRAY['%s', 'G']::mpaa_rating[] FROM generate_series(%d, %d) g`, label, label, 100*i+1, 100*i+100))
		src.Exec(t, fmt.Sprintf(`UPDATE film SET rating = '%s', updated_at = clock_timestamp() WHERE id %% 10 = %d`, label, i))
		equal(100*i + 100)
		prev = label
	}
	if d.Output.Contains("invalid input value") || d.Output.Count("", "level", "ERROR") > 0 {
		t.Fatalf("a run failed:\n%s", d.Output)
	}
	if r := d.Stop(t, 30*time.Second); r.Code != 0 {
		t.Fatalf("daemon exit after SIGTERM: %s", r)
	}
}
