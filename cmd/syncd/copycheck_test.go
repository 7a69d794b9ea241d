package main_test

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// validateLists runs validate on cfg and requires exit 2, no "ok", and one
// line on stderr holding every part of want.
func validateLists(t *testing.T, cfg string, want ...string) {
	t.Helper()
	r := bin.Run(t, nil, "validate", "--config", cfg)
	if r.Code != 2 || strings.Contains(r.Stdout, "ok") {
		t.Fatalf("validate: exit %d, want 2 and no ok\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
	if len(lines) != 1 {
		t.Fatalf("validate: want one line on stderr, got %d:\n%s", len(lines), r.Stderr)
	}
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Errorf("validate: stderr %q\ndoes not contain %q", lines[0], w)
		}
	}
}

// A copy restored by hand (pg_dump -s) with a foreign key, a BEFORE UPDATE
// trigger that rewrites a column and a check the source does not have made
// runs fail mid-run or rewrote rows so reconcile never converged. validate
// names all three with what they do and how to remove them (exit 2), a
// check the source has too is not reported, and run refuses before writing
// a row or the state file. Once they are removed, the copy is exact.
func TestHandMadeCopyWithForeignKeyTriggerCheckRefused(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE items (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, parent_id bigint,
  name text, qty integer CHECK (qty >= 0));
INSERT INTO items SELECT g, '2026-10-01 09:00:00+00'::timestamptz + g * interval '1 second', g + 1000, 'n' || g, g FROM generate_series(1, 300) g`)
	dst.Exec(t, `CREATE TABLE parents (id bigint PRIMARY KEY);
CREATE TABLE items (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL,
  parent_id bigint CONSTRAINT items_parent REFERENCES parents (id),
  name text, qty integer CHECK (qty >= 0) CONSTRAINT qty_small CHECK (qty < 100));
CREATE FUNCTION stamp() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN NEW.name := upper(NEW.name); RETURN NEW; END$$;
CREATE TRIGGER stamp BEFORE UPDATE ON items FOR EACH ROW EXECUTE FUNCTION stamp();
CREATE TABLE audit (at timestamptz DEFAULT now());
CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN INSERT INTO audit DEFAULT VALUES; RETURN NULL; END$$;
CREATE TRIGGER audit AFTER INSERT OR UPDATE ON items FOR EACH STATEMENT EXECUTE FUNCTION audit()`)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "items.yaml", tableConfig(src, dst, "items", "id"))
	state := filepath.Join(dir, "state.db")

	validateLists(t, cfg, cfg+":9: sink.table: ",
		`foreign key "items_parent" (FOREIGN KEY (parent_id) REFERENCES parents(id)) of the copy rejects rows that arrive before the rows they reference`,
		`ALTER TABLE "public"."items" DROP CONSTRAINT "items_parent"`,
		`trigger "stamp" runs before each row syncd inserts, updates or deletes and can rewrite or drop it, so the copy differs from the source and reconcile never converges (ALTER TABLE "public"."items" DISABLE TRIGGER "stamp")`,
		`check constraint "qty_small" (CHECK ((qty < 100))) of the copy is not in the source, so rows the source accepts are rejected (ALTER TABLE "public"."items" DROP CONSTRAINT "qty_small")`)
	r := bin.Run(t, nil, "validate", "--config", cfg)
	if strings.Contains(r.Stderr, "items_qty_check") {
		t.Errorf("validate reported the check the source has too: %s", r.Stderr)
	}
	// An AFTER statement trigger (an audit log) leaves the rows as written.
	if strings.Contains(r.Stderr, `trigger "audit"`) {
		t.Errorf("validate reported an AFTER statement trigger that cannot change the copy's rows: %s", r.Stderr)
	}
	refused(t, cfg, state, "sink.table", `foreign key "items_parent"`, `trigger "stamp"`, `check constraint "qty_small"`)
	if n := count(t, dst, "SELECT count(*) FROM items"); n != 0 {
		t.Fatalf("a refused run wrote %d rows", n)
	}

	dst.Exec(t, `ALTER TABLE items DROP CONSTRAINT items_parent; ALTER TABLE items DISABLE TRIGGER stamp; ALTER TABLE items DROP CONSTRAINT qty_small`)
	for i := 0; i < 2; i++ {
		if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
			t.Fatalf("run after the fix: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
		}
		if s, d := rowHashes(t, src, "items", "id"), rowHashes(t, dst, "items", "id"); s != d || !strings.HasPrefix(s, "300:") {
			t.Fatalf("copy differs from the source:\nsource %.200s\ncopy   %.200s", s, d)
		}
		src.Exec(t, `UPDATE items SET name = 'm' || id, qty = qty + 200, updated_at = updated_at + interval '1 day' WHERE id % 3 = 0`)
	}
}

// A hand-made copy that keeps a generated column's expression rejected
// every row mid-run (column "length_hours" is a generated column).
// validate reports it with the fix, as it does a NOT NULL the source does
// not have; run refuses before writing.
func TestGeneratedColumnInCopyReported(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE film (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, length integer, note text,
  length_hours numeric GENERATED ALWAYS AS (length / 60.0) STORED);
INSERT INTO film (id, updated_at, length) SELECT g, now(), g FROM generate_series(1, 10) g`)
	dst.Exec(t, `CREATE TABLE film (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, length integer, note text NOT NULL,
  length_hours numeric GENERATED ALWAYS AS (length / 60.0) STORED)`)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "film.yaml", tableConfig(src, dst, "film", "id"))
	validateLists(t, cfg, cfg+":9: sink.table: ",
		`column "length_hours" is a generated column in the copy, and PostgreSQL rejects every row syncd writes into it (ALTER TABLE "public"."film" ALTER COLUMN "length_hours" DROP EXPRESSION)`,
		`column "note" is NOT NULL in the copy and allows NULL in the source, so rows with NULL are rejected (ALTER TABLE "public"."film" ALTER COLUMN "note" DROP NOT NULL)`)
	refused(t, cfg, filepath.Join(dir, "state.db"), `column "length_hours" is a generated column`)
	dst.Exec(t, `ALTER TABLE film ALTER COLUMN length_hours DROP EXPRESSION; ALTER TABLE film ALTER COLUMN note DROP NOT NULL`)
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", filepath.Join(dir, "state.db")); r.Code != 0 {
		t.Fatalf("run after the fix: exit %d\nstderr: %s", r.Code, r.Stderr)
	}
	if s, d := rowHashes(t, src, "film", "id"), rowHashes(t, dst, "film", "id"); s != d {
		t.Fatalf("copy differs from the source:\nsource %s\ncopy   %s", s, d)
	}
}

// validate predicts the first run: for a sink role without CREATE on the
// schema and a sink domain that differs from the source's, it reports both
// in one pass (exit 2), and its rolled-back trial of the DDL leaves no type
// or table behind. The run's error names the missing grant, not a guess.
func TestValidatePredictsFirstRun(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TYPE mpaa_rating AS ENUM ('G', 'PG', 'R');
CREATE DOMAIN year AS numeric(4,0) CHECK (VALUE >= 1901);
CREATE TABLE film (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, rating mpaa_rating, release_year year);
INSERT INTO film SELECT g, now(), 'PG', 2000 + g FROM generate_series(1, 10) g`)
	dst.Exec(t, `CREATE DOMAIN year AS integer`)
	role := pgtest.NewRole(t, dst, "syncd_nocreate")
	dst.Exec(t, "REVOKE CREATE ON SCHEMA public FROM PUBLIC")
	dst.Exec(t, "CREATE SCHEMA syncd AUTHORIZATION "+role) // syncd's catalog (docs/PRIVILEGES.md)
	u, err := url.Parse(dst.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	cfgText := strings.Replace(tableConfig(src, dst, "film", "id"), "dsn: "+dst.URL, "dsn: "+u.String(), 1)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "film.yaml", cfgText)
	objects := `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'`
	types := `SELECT string_agg(typname, ',' ORDER BY typname) FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = 'public' AND t.typtype IN ('e', 'd')`
	validateLists(t, cfg, cfg+":9: sink.table: ", "2 problem(s)",
		"the sink role "+role+" lacks USAGE and CREATE on schema public, which creating the copy needs (GRANT USAGE, CREATE ON SCHEMA \"public\" TO \""+role+"\")",
		`type "public"."year" differs in the sink: base type integer, source numeric(4,0), constraints [], source [CHECK ((VALUE >= (1901)::numeric))]`)

	dst.Exec(t, "DROP DOMAIN year")
	r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", filepath.Join(dir, "state.db"))
	if r.Code != 1 || !strings.Contains(r.Stderr, "permission denied for schema public") ||
		!strings.Contains(r.Stderr, `GRANT USAGE, CREATE ON SCHEMA "public" TO "`+role+`"`) {
		t.Fatalf("run without CREATE: exit %d, want 1 with the grant\nstderr: %s", r.Code, r.Stderr)
	}

	dst.Exec(t, "GRANT CREATE ON SCHEMA public TO "+role)
	before := count(t, dst, objects)
	if r := bin.Run(t, nil, "validate", "--config", cfg); r.Code != 0 || !strings.Contains(r.Stdout, "film: ok") {
		t.Fatalf("validate with CREATE: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	if after := count(t, dst, objects); after != before {
		t.Fatalf("validate left %d objects behind in the sink", after-before)
	}
	var left *string
	if err := dst.Pool.QueryRow(t.Context(), types).Scan(&left); err != nil || left != nil {
		t.Fatalf("validate left types behind: %v (%v)", left, err)
	}
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", filepath.Join(dir, "state.db")); r.Code != 0 {
		t.Fatalf("run with CREATE: exit %d\nstderr: %s", r.Code, r.Stderr)
	}
	if s, d := rowHashes(t, src, "film", "id"), rowHashes(t, dst, "film", "id"); s != d {
		t.Fatalf("copy differs from the source:\nsource %s\ncopy   %s", s, d)
	}
}

// A copy the user partitioned the same way as a partitioned source is
// accepted: validate says ok, and runs keep it equal while the source gains
// a partition (the copy gets one too, as the user would add it).
func TestPartitionedCopyAccepted(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	ddl := `CREATE TABLE payment (payment_id bigint NOT NULL, updated_at timestamptz NOT NULL, amount numeric(5,2),
  PRIMARY KEY (payment_id), UNIQUE (updated_at, payment_id)) PARTITION BY RANGE (payment_id);
CREATE TABLE payment_p1 PARTITION OF payment FOR VALUES FROM (1) TO (1001);
CREATE TABLE payment_p2 PARTITION OF payment FOR VALUES FROM (1001) TO (2001)`
	src.Exec(t, ddl)
	dst.Exec(t, ddl)
	rows := `INSERT INTO payment SELECT g, '2026-10-01 09:00:00+00'::timestamptz + g * interval '1 second', g %% 1000 / 10.0 FROM generate_series(%d, %d) g`
	src.Exec(t, fmt.Sprintf(rows, 1, 1500))
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "payment.yaml", tableConfig(src, dst, "payment", "payment_id"))
	if r := bin.Run(t, nil, "validate", "--config", cfg); r.Code != 0 || !strings.Contains(r.Stdout, "payment: ok") {
		t.Fatalf("validate: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	state := filepath.Join(dir, "state.db")
	for _, n := range []int{1500, 2500} {
		if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
			t.Fatalf("run: exit %d\nstderr: %s", r.Code, r.Stderr)
		}
		if s, d := rowHashes(t, src, "payment", "payment_id"), rowHashes(t, dst, "payment", "payment_id"); s != d || !strings.HasPrefix(s, fmt.Sprint(n, ":")) {
			t.Fatalf("copy differs from the source (want %d rows):\nsource %.200s\ncopy   %.200s", n, s, d)
		}
		if n == 1500 {
			p3 := `CREATE TABLE payment_p3 PARTITION OF payment FOR VALUES FROM (2001) TO (3001)`
			src.Exec(t, p3)
			dst.Exec(t, p3)
			src.Exec(t, fmt.Sprintf(rows, 1501, 2500))
		}
	}
}
