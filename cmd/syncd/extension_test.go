package main_test

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// extensionSource makes a source table whose columns use citext and
// hstore: directly, as an array and through a domain.
func extensionSource(t *testing.T) *pgtest.DB {
	t.Helper()
	src := pgtest.NewDB(t)
	src.Exec(t, `CREATE EXTENSION citext; CREATE EXTENSION hstore;
CREATE DOMAIN email AS citext CHECK (VALUE LIKE '%@%');
CREATE TABLE people (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name citext, mail email, aliases citext[], attrs hstore);
INSERT INTO people SELECT g, now() - interval '1 hour' + g * interval '1 ms', 'MiXeD Case ' || g, 'Some.One' || g || '@Example.COM',
	ARRAY['Ab' || g, 'aB' || g]::citext[], hstore('Key', 'Value ' || g) FROM generate_series(1, 300) g`)
	return src
}

// rowTexts is each row of table as text, in id order.
func rowTexts(t *testing.T, db *pgtest.DB, table string) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), "SELECT t::text FROM "+table+" t ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	return out
}

// A source whose columns use citext and hstore, into an empty sink: by
// default validate and run refuse (exit 2) before writing anything, naming
// each column, its type, the extension, the CREATE EXTENSION to run on the
// sink and sink.create_extensions; with sink.create_extensions: true the run
// creates both extensions and the copy, with the same types, and the copy
// equals the source row by row, citext values in their own case.
func TestExtensionTypesNeedTheirExtension(t *testing.T) {
	src, dst := extensionSource(t), pgtest.NewDB(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "people.yaml", tableConfig(src, dst, "people", "id"))
	state := filepath.Join(dir, "state.db")
	wants := []string{
		`column "name" (type "public"."citext"), column "mail" (type "public"."citext"), column "aliases" (type "public"."citext") need extension citext (version 1.6 in the source)`,
		`run CREATE EXTENSION IF NOT EXISTS "citext" SCHEMA "public" on the sink database, or set sink.create_extensions: true to let syncd run it`,
		`column "attrs" (type "public"."hstore") needs extension hstore (version 1.8 in the source)`,
		`run CREATE EXTENSION IF NOT EXISTS "hstore" SCHEMA "public" on the sink database, or set sink.create_extensions: true`,
	}
	nothing := func(when string) {
		t.Helper()
		if n := count(t, dst, `SELECT count(*) FROM pg_extension WHERE extname IN ('citext', 'hstore')`); n != 0 {
			t.Errorf("%s: %d of the extensions were created in the sink", when, n)
		}
		if n := count(t, dst, `SELECT count(*) FROM pg_class WHERE relname = 'people'`); n != 0 {
			t.Errorf("%s: the copy was created", when)
		}
	}
	for _, args := range [][]string{{"validate", "--config", cfg}, {"run", "--once", "--config", cfg, "--state", state}} {
		r := bin.Run(t, nil, args...)
		out := r.Stdout + r.Stderr
		if r.Code != 2 {
			t.Errorf("%s: exit %d, want 2:\n%s", args[0], r.Code, out)
		}
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s: no %q in:\n%s", args[0], w, out)
			}
		}
		nothing(args[0])
	}

	// Allowed, validate tries it all in a transaction it rolls back; run
	// creates the extensions and the copy.
	cfg = writeConfig(t, dir, "people.yaml", strings.Replace(tableConfig(src, dst, "people", "id"), "sink:\n", "sink:\n  create_extensions: true\n", 1))
	if r := bin.Run(t, nil, "validate", "--config", cfg); r.Code != 0 {
		t.Fatalf("validate with create_extensions: exit %d:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	nothing("validate with create_extensions")
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("run with create_extensions: exit %d:\n%s", r.Code, r.Stderr)
	}
	if n := count(t, dst, `SELECT count(*) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE extname IN ('citext', 'hstore') AND nspname = 'public'`); n != 2 {
		t.Errorf("%d of citext and hstore created in schema public of the sink, want 2", n)
	}
	typesOf := func(db *pgtest.DB) string {
		var s string
		if err := db.Pool.QueryRow(context.Background(), `SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
			FROM pg_attribute WHERE attrelid = 'people'::regclass AND attnum > 0 AND NOT attisdropped`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got, want := typesOf(dst), typesOf(src); got != want {
		t.Errorf("copy's columns %s, source's %s", got, want)
	}
	got, want := rowTexts(t, dst, "people"), rowTexts(t, src, "people")
	if len(got) != len(want) || len(want) != 300 {
		t.Fatalf("%d rows in the copy, %d in the source", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("row %d differs:\ncopy   %s\nsource %s", i+1, got[i], want[i])
		}
	}
	var name, mail string
	if err := dst.Pool.QueryRow(context.Background(), `SELECT name::text, mail::text FROM people WHERE id = 7`).Scan(&name, &mail); err != nil {
		t.Fatal(err)
	}
	if name != "MiXeD Case 7" || mail != "Some.One7@Example.COM" {
		t.Errorf("citext values %q, %q: want their case kept", name, mail)
	}
}

// When the sink has the extension in a schema the copy's DDL does not
// find, creating the copy fails; the error shows the whole CREATE TABLE on
// one line, not its first words.
func TestDDLErrorShowsTheWholeStatement(t *testing.T) {
	src, dst := extensionSource(t), pgtest.NewDB(t)
	src.Exec(t, `ALTER TABLE people DROP COLUMN mail`)
	dst.Exec(t, `CREATE SCHEMA ext; CREATE EXTENSION citext SCHEMA ext; CREATE EXTENSION hstore SCHEMA ext`)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "people.yaml", tableConfig(src, dst, "people", "id"))
	stmt := `CREATE TABLE IF NOT EXISTS "public"."people" ("id" bigint NOT NULL, "updated_at" timestamp with time zone NOT NULL, "name" citext, "aliases" citext[], "attrs" hstore, PRIMARY KEY ("id"))`
	for _, args := range [][]string{{"validate", "--config", cfg}, {"run", "--once", "--config", cfg, "--state", filepath.Join(dir, "state.db")}} {
		r := bin.Run(t, nil, args...)
		out := r.Stdout + r.Stderr
		if r.Code == 0 || !strings.Contains(out, `type "citext" does not exist`) {
			t.Errorf("%s: exit %d, want the sink's error:\n%s", args[0], r.Code, out)
		}
		if !strings.Contains(out, stmt) {
			t.Errorf("%s: the whole statement %s is not in:\n%s", args[0], stmt, out)
		}
	}
}

// sink.create_extensions as a sink role that is not a superuser: citext
// and hstore are trusted extensions, which need CREATE on the database;
// without it validate and run refuse with the GRANT, with it run creates
// both.
func TestCreateExtensionsAsSinkRole(t *testing.T) {
	src, dst := extensionSource(t), pgtest.NewDB(t)
	role := pgtest.NewRole(t, dst, "syncd_ext")
	dst.Exec(t, "GRANT CREATE ON SCHEMA public TO "+role)
	dst.Exec(t, "CREATE SCHEMA syncd AUTHORIZATION "+role) // syncd's catalog (docs/PRIVILEGES.md)
	u, err := url.Parse(dst.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	text := strings.Replace(tableConfig(src, dst, "people", "id"), "dsn: "+dst.URL, "dsn: "+u.String(), 1)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "people.yaml", strings.Replace(text, "sink:\n", "sink:\n  create_extensions: true\n", 1))
	state := filepath.Join(dir, "state.db")
	want := "sink.create_extensions is set, but the sink role " + role + " lacks CREATE on database " + dst.Name +
		`, which a trusted extension needs: run CREATE EXTENSION IF NOT EXISTS "citext" SCHEMA "public" on the sink database as a role that has it, or GRANT CREATE ON DATABASE "` + dst.Name + `" TO "` + role + `"`
	for _, args := range [][]string{{"validate", "--config", cfg}, {"run", "--once", "--config", cfg, "--state", state}} {
		if r := bin.Run(t, nil, args...); r.Code != 2 || !strings.Contains(r.Stdout+r.Stderr, want) {
			t.Errorf("%s without CREATE on the database: exit %d, want 2 and %q:\n%s%s", args[0], r.Code, want, r.Stdout, r.Stderr)
		}
	}
	dst.Exec(t, "GRANT CREATE ON DATABASE "+dst.Name+" TO "+role)
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("run with CREATE on the database: exit %d:\n%s", r.Code, r.Stderr)
	}
	if got, want := rowTexts(t, dst, "people"), rowTexts(t, src, "people"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the copy differs from the source (%d and %d rows)", len(got), len(want))
	}
}
