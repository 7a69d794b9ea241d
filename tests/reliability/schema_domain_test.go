package reliability

import (
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// domainDefs is each domain's base type, NOT NULL, default and CHECK
// constraints (without NOT VALID) in public, one line each.
const domainDefs = `SELECT string_agg(t.typname || ' ' || format_type(t.typbasetype, t.typtypmod) || ' ' || t.typnotnull || ' ' ||
  coalesce(pg_get_expr(t.typdefaultbin, 0), '') || ' ' ||
  coalesce((SELECT string_agg(replace(pg_get_constraintdef(c.oid), ' NOT VALID', ''), ',' ORDER BY 1) FROM pg_constraint c WHERE c.contypid = t.oid), ''),
  E'\n' ORDER BY t.typname)
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = 'public' AND t.typtype = 'd'`

// domainCopy is Pagila's year domain (1901-2155) and 300 films in src,
// copied by one run --once into dst.
func domainCopy(t *testing.T, src, dst *pgtest.DB, extra string) (run func() result, cfg, state string) {
	t.Helper()
	src.Exec(t, `CREATE DOMAIN year AS integer CONSTRAINT year_check CHECK (VALUE >= 1901 AND VALUE <= 2155);
CREATE TABLE film (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, title text NOT NULL, release_year year);
CREATE INDEX ON film (updated_at, id); -- else the run also warns of the missing cursor index
INSERT INTO film SELECT i, now() - interval '1 hour' + i * interval '1 s', 'film ' || i, 1901 + i % 250 FROM generate_series(1, 300) i`)
	dir := t.TempDir()
	cfg = writeFile(t, dir, "film.yaml", tableConfig{Name: "film", SourceDSN: src.URL, Table: "public.film", Cursor: "[updated_at, id]",
		SinkDSN: dst.URL, SinkTable: "public.film", PageSize: 100}.YAML()+extra)
	state = filepath.Join(dir, "state.db")
	run = func() result { t.Helper(); return bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state) }
	if r := run(); r.Code != 0 {
		t.Fatalf("first run: %s", r)
	}
	// The migration that widens the domain, and rows that need it.
	src.Exec(t, `BEGIN;
ALTER DOMAIN year DROP CONSTRAINT year_check;
ALTER DOMAIN year ADD CONSTRAINT year_check CHECK (VALUE >= 1800 AND VALUE <= 2200);
ALTER DOMAIN year SET DEFAULT 2000;
COMMIT;
UPDATE film SET release_year = 1850, updated_at = now() WHERE id % 10 = 0;
INSERT INTO film SELECT i, now(), 'film ' || i, 2190 FROM generate_series(301, 320) i`)
	return run, cfg, state
}

func sameFilms(t *testing.T, src, dst *pgtest.DB) {
	t.Helper()
	ctx := context.Background()
	cols := []string{"id", "updated_at", "title", "release_year"}
	if s, d := schemaRows(t, src.Pool, "film", cols), schemaRows(t, dst.Pool, "film", cols); len(s) != 320 || !slices.Equal(s, d) {
		t.Fatalf("copy differs from the source: %d source rows (want 320), %d copy rows", len(s), len(d))
	}
	var want, got string
	if err := src.Pool.QueryRow(ctx, domainDefs).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if err := dst.Pool.QueryRow(ctx, domainDefs).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want != got {
		t.Fatalf("the sink's domain differs from the source's:\nsource %s\nsink   %s", want, got)
	}
}

// A domain whose CHECK was widened in the source (Pagila's year, from
// 1901-2155 to 1800-2200) and given a default is followed under evolve:
// validate names the ALTER DOMAIN statements the next run runs (exit 0),
// run --once exits 0, the 320 rows (30 of them with 1850, 20 with 2190)
// equal the source's and the sink's domain is the source's.
func TestDomainWidenedIsFollowed(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	run, cfg, state := domainCopy(t, src, dst, "")
	r := bin.Run(t, nil, "validate", "--config", cfg, "--state", state)
	if r.Code != 0 || !strings.Contains(r.Stdout, `domain "public"."year" differs in the sink`) || !strings.Contains(r.Stdout, `ALTER DOMAIN "public"."year" ADD CONSTRAINT "year_check" CHECK`) {
		t.Fatalf("validate after the domain change: %s", r)
	}
	if r := run(); r.Code != 0 {
		t.Fatalf("run after the domain change: %s", r)
	}
	sameFilms(t, src, dst)
	if r := bin.Run(t, nil, "validate", "--config", cfg, "--state", state); r.Code != 0 || strings.Contains(r.Stdout, "domain") {
		t.Fatalf("validate after the run: %s", r)
	}
}

// Under schema_changes: fail the widened domain stops validate (exit 2)
// and run --once (exit 1, one line) with the exact ALTER DOMAIN statements;
// once they ran on the sink, run --once exits 0 and the copy equals the
// source.
func TestDomainWidenedUnderFail(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	run, cfg, state := domainCopy(t, src, dst, "schema_changes: fail\n")
	if r := bin.Run(t, nil, "validate", "--config", cfg, "--state", state); r.Code != 2 || !strings.Contains(r.Stderr, `ALTER DOMAIN "public"."year"`) || len(lines(r.Stderr)) != 1 {
		t.Fatalf("validate under fail: want exit 2 naming ALTER DOMAIN, got %s", r)
	}
	r := run()
	fix := regexp.MustCompile("run `([^`]*)` on the sink").FindStringSubmatch(r.Stderr)
	if r.Code != 1 || fix == nil || len(lines(r.Stderr)) != 1 || !strings.Contains(fix[1], "ALTER DOMAIN") {
		t.Fatalf("run under fail: want exit 1 and one line with ALTER DOMAIN statements, got %s", r)
	}
	dst.Exec(t, fix[1])
	if r := run(); r.Code != 0 {
		t.Fatalf("run after the statements ran: %s", r)
	}
	sameFilms(t, src, dst)
}
