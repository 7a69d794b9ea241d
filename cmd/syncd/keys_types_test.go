package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// keyConfig is a source on src.table copied into dst.copy, keyed by key; the
// sink.key line is line 10 and the sink.table line is line 9.
func keyConfig(src, dst *pgtest.DB, table, copy, key string) string {
	return fmt.Sprintf(`name: %s
source:
  dsn: %s
  table: public.%s
  cursor: [updated_at, id]
  lookback: 0s
sink:
  dsn: %s
  table: public.%s
  key: [%s]
`, table, src.URL, table, dst.URL, copy, key)
}

// refused runs validate and run --once on cfg and requires, for both, exit
// 2 and one line on stderr holding every part of want; the state file must
// not exist afterwards.
func refused(t *testing.T, cfg, state string, want ...string) {
	t.Helper()
	for _, args := range [][]string{
		{"validate", "--config", cfg},
		{"run", "--once", "--config", cfg, "--state", state},
	} {
		r := bin.Run(t, nil, args...)
		if r.Code != 2 {
			t.Fatalf("%s: exit %d, want 2\nstdout: %s\nstderr: %s", args[0], r.Code, r.Stdout, r.Stderr)
		}
		lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
		if len(lines) != 1 {
			t.Fatalf("%s: want one line on stderr, got %d:\n%s", args[0], len(lines), r.Stderr)
		}
		for _, w := range want {
			if !strings.Contains(lines[0], w) {
				t.Errorf("%s: stderr %q\ndoes not contain %q", args[0], lines[0], w)
			}
		}
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("a refused run created the state file (%v)", err)
	}
}

// A copy keyed by a column that allows NULL duplicated the NULL-keyed rows
// on every run (a unique index allows many NULLs) and reconcile said equal.
// The key must be NOT NULL in the source, even when it holds no NULL today,
// and in an existing copy: validate and run exit 2 with the fix, and write
// nothing. Once both are NOT NULL, repeated runs keep the copy exact.
func TestNullableKeyRefused(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE items (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, code text UNIQUE, val text)`)
	src.Exec(t, `INSERT INTO items SELECT g, '2026-10-01 09:00:00+00'::timestamptz + g * interval '1 second',
		CASE WHEN g % 25 = 0 THEN NULL ELSE 'c' || g END, 'v' || g FROM generate_series(1, 100) g`)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "items.yaml", keyConfig(src, dst, "items", "items_copy", "code"))
	state := filepath.Join(dir, "state.db")
	sourceKey := []string{cfg + ":10: sink.key: ", `key column "code" of source table public.items (source items) allows NULL`,
		`ALTER TABLE "public"."items" ALTER COLUMN "code" SET NOT NULL on the source, or choose NOT NULL key columns`}
	noCopy := func() {
		t.Helper()
		if n := count(t, dst, "SELECT count(*) FROM pg_tables WHERE tablename = 'items_copy'"); n != 0 {
			t.Fatal("a refused run created the copy")
		}
	}

	t.Run("source key holding NULLs", func(t *testing.T) {
		refused(t, cfg, state, sourceKey...)
		noCopy()
	})
	t.Run("source key nullable without NULLs", func(t *testing.T) {
		src.Exec(t, `UPDATE items SET code = 'n' || id WHERE code IS NULL`)
		refused(t, cfg, state, sourceKey...)
		noCopy()
	})
	t.Run("the line of source.cursor when sink.key is the default", func(t *testing.T) {
		src.Exec(t, `CREATE TABLE loose (id bigint, updated_at timestamptz NOT NULL, val text)`)
		src.Exec(t, `CREATE UNIQUE INDEX ON loose (updated_at, id)`)
		body := strings.Replace(keyConfig(src, dst, "loose", "loose_copy", "id"), "  key: [id]\n", "", 1)
		c := writeConfig(t, t.TempDir(), "loose.yaml", body)
		refused(t, c, state, c+":5: sink.key: ", `key column "id" of source table public.loose (source loose) allows NULL`)
	})
	t.Run("every nullable column of a composite key", func(t *testing.T) {
		src.Exec(t, `CREATE TABLE pairs (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, tenant int, code text, UNIQUE (tenant, code))`)
		c := writeConfig(t, t.TempDir(), "pairs.yaml", keyConfig(src, dst, "pairs", "pairs_copy", "tenant, code"))
		refused(t, c, state, c+":10: sink.key: ", `key column "tenant", "code" of source table public.pairs (source pairs) allows NULL`,
			`run ALTER TABLE "public"."pairs" ALTER COLUMN "tenant" SET NOT NULL; ALTER TABLE "public"."pairs" ALTER COLUMN "code" SET NOT NULL on the source`)
	})
	t.Run("copy key nullable", func(t *testing.T) {
		src.Exec(t, `ALTER TABLE items ALTER COLUMN code SET NOT NULL`)
		dst.Exec(t, `CREATE TABLE items_copy (id bigint NOT NULL, updated_at timestamptz NOT NULL, code text UNIQUE, val text)`)
		dst.Exec(t, `INSERT INTO items_copy VALUES (1, '2026-10-01 09:00:01+00', 'c1', 'old'), (2, '2026-10-01 09:00:02+00', 'c2', 'old')`)
		refused(t, cfg, state, cfg+":10: sink.key: ", `key column "code" of the copy public.items_copy (source items) allows NULL`,
			`ALTER TABLE "public"."items_copy" ALTER COLUMN "code" SET NOT NULL on the sink`)
		if got := rowsText(t, dst, "items_copy"); got != "(1,\"2026-10-01 09:00:01+00\",c1,old)\n(2,\"2026-10-01 09:00:02+00\",c2,old)" {
			t.Fatalf("a refused run changed the copy:\n%s", got)
		}
	})
	t.Run("both NOT NULL", func(t *testing.T) {
		dst.Exec(t, `ALTER TABLE items_copy ALTER COLUMN code SET NOT NULL`)
		env := []string{"SYNCD_STATE=" + state}
		for i := 0; i < 5; i++ {
			if r := bin.Run(t, env, "run", "--once", "--config", cfg); r.Code != 0 {
				t.Fatalf("run %d: exit %d: %s", i+1, r.Code, r.Stderr)
			}
			src.Exec(t, `UPDATE items SET updated_at = updated_at + ($1 + 1) * interval '1 day', val = val || '+' WHERE id % 10 = $1`, i)
		}
		if r := bin.Run(t, env, "run", "--once", "--config", cfg); r.Code != 0 {
			t.Fatalf("last run: exit %d: %s", r.Code, r.Stderr)
		}
		if n := count(t, dst, "SELECT count(*) FROM items_copy"); n != 100 {
			t.Fatalf("copy has %d rows, want the source's 100", n)
		}
		if got, want := rowsText(t, dst, "items_copy"), rowsText(t, src, "items"); got != want {
			t.Fatalf("copy differs from the source:\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("a copy syncd creates has a NOT NULL primary key", func(t *testing.T) {
		dir := t.TempDir()
		c := writeConfig(t, dir, "made.yaml", keyConfig(src, dst, "items", "items_made", "code"))
		if r := bin.Run(t, nil, "run", "--once", "--config", c, "--state", filepath.Join(dir, "state.db")); r.Code != 0 {
			t.Fatalf("run: exit %d: %s", r.Code, r.Stderr)
		}
		if n := count(t, dst, `SELECT count(*) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
			WHERE i.indrelid = 'items_made'::regclass AND i.indisprimary AND i.indnatts = 1 AND a.attname = 'code' AND a.attnotnull`); n != 1 {
			t.Fatal("the copy syncd created has no NOT NULL primary key on code")
		}
		if got, want := rowsText(t, dst, "items_made"), rowsText(t, src, "items"); got != want {
			t.Fatalf("copy differs from the source")
		}
	})
}

// A copy column narrower than the source's rounded every value, silently
// and for good (numeric(12,2) for numeric(12,4), timestamptz(0)), or would
// fail mid-run (varchar(10) for varchar(50)). validate and run exit 2 and
// name every such column in the one line, and nothing is written.
func TestNarrowCopyColumnsRefused(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE prices (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, amount numeric(12,4), paid_at timestamptz, label varchar(50))`)
	src.Exec(t, `INSERT INTO prices SELECT g, '2026-10-01 09:00:00+00'::timestamptz + g * interval '1 second', g + 0.1234,
		'2026-10-01 09:00:00.123456+00', 'label ' || g FROM generate_series(1, 1000) g`)
	dst.Exec(t, `CREATE TABLE prices_copy (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, amount numeric(12,2), paid_at timestamptz(0), label varchar(10))`)
	dst.Exec(t, `INSERT INTO prices_copy VALUES (7, '2026-10-01 09:00:07+00', 7.12, '2026-10-01 09:00:00+00', 'old')`)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "prices.yaml", keyConfig(src, dst, "prices", "prices_copy", "id"))
	refused(t, cfg, filepath.Join(dir, "state.db"),
		cfg+":9: sink.table: public.prices_copy cannot hold the source's rows exactly: ",
		`column "amount" is numeric(12,2) but numeric(12,4) in the source: it rounds to 2 decimal places and the source keeps 4 (ALTER it to numeric(12,4))`,
		`column "paid_at" is timestamp(0) with time zone but timestamp with time zone in the source: it rounds to 0 fractional digits of a second and the source keeps 6`,
		`column "label" is character varying(10) but character varying(50) in the source: it holds at most 10 characters and the source up to 50`)
	if got := rowsText(t, dst, "prices_copy"); got != `(7,"2026-10-01 09:00:07+00",7.12,"2026-10-01 09:00:00+00",old)` {
		t.Fatalf("a refused run changed the copy:\n%s", got)
	}
}

// A copy column that PostgreSQL fills exactly (integer into bigint,
// varchar(20) into text, an enum into text, numeric(10,2) into numeric,
// timestamptz(3) into timestamptz) is accepted, and the copy equals the
// source value by value; reconcile agrees.
func TestWiderCopyColumnsAccepted(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')`)
	src.Exec(t, `CREATE TABLE wide (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, n integer, label varchar(20), m mood, amount numeric(10,2), at timestamptz(3))`)
	src.Exec(t, `INSERT INTO wide SELECT g, '2026-10-01 09:00:00+00'::timestamptz + g * interval '1 second',
		CASE WHEN g % 7 = 0 THEN NULL ELSE g * 1000 END, 'label ' || g, (ARRAY['sad', 'ok', 'happy'])[g % 3 + 1]::mood,
		g + 0.05, '2026-10-01 09:00:00.123+00'::timestamptz + g * interval '1 ms' FROM generate_series(1, 1000) g`)
	dst.Exec(t, `CREATE TABLE wide_copy (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, n bigint, label text, m text, amount numeric, at timestamptz)`)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "wide.yaml", keyConfig(src, dst, "wide", "wide_copy", "id"))
	env := []string{"SYNCD_STATE=" + filepath.Join(dir, "state.db")}
	if r := bin.Run(t, env, "validate", "--config", cfg); r.Code != 0 || !strings.Contains(r.Stdout, "wide: ok") {
		t.Fatalf("validate: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := bin.Run(t, env, "run", "--once", "--config", cfg); r.Code != 0 {
		t.Fatalf("run: exit %d: %s", r.Code, r.Stderr)
	}
	if got, want := rowsText(t, dst, "wide_copy"), rowsText(t, src, "wide"); got != want || count(t, dst, "SELECT count(*) FROM wide_copy") != 1000 {
		t.Fatalf("copy differs from the source")
	}
	if r := bin.Run(t, env, "reconcile", "--config", cfg, "--source", "wide"); r.Code != 0 {
		t.Fatalf("reconcile: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}
