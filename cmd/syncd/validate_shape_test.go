package main_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// oneShape is a source database with n tables app.t000... of one shape (so
// validate tries to create one copy for all of them), and the pattern
// source of them into schema copy of dst as role (empty: dst's own).
func oneShape(t *testing.T, n int, dst *pgtest.DB, role string) (src *pgtest.DB, cfg string) {
	t.Helper()
	src = pgtest.NewDB(t)
	var b strings.Builder
	b.WriteString("CREATE SCHEMA app;\n")
	for i := range n {
		fmt.Fprintf(&b, "CREATE TABLE app.t%03[1]d (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT '2026-01-01', v text); CREATE INDEX ON app.t%03[1]d (updated_at, id);\n", i)
	}
	src.Exec(t, b.String())
	sinkURL := dst.URL
	if role != "" {
		u, err := url.Parse(dst.URL)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(role)
		sinkURL = u.String()
	}
	cfg = writeConfig(t, t.TempDir(), "app.yaml", fmt.Sprintf(`name: app
source:
  dsn: %s
  table: app.t*
  cursor: [updated_at, id]
sink:
  dsn: %s
  table: copy.*
`, src.URL, sinkURL))
	return src, cfg
}

// validateLines runs validate on cfg and returns its output lines by the
// table they are about ("app.t003"); every table's line must say ok
// exactly when it is not in refused, and validate must exit 1 naming the
// number refused, or 0 when none is.
func validateLines(t *testing.T, cfg string, n int, refused ...int) map[string]string {
	t.Helper()
	r := bin.Run(t, nil, "validate", "--config", cfg)
	wantCode, wantErr := 0, ""
	if len(refused) > 0 {
		wantCode, wantErr = 1, fmt.Sprintf("%d tables matched by a pattern source would be skipped", len(refused))
	}
	if r.Code != wantCode || !strings.Contains(r.Stderr, wantErr) {
		t.Fatalf("validate: exit %d, want %d and %q\nstdout: %s\nstderr: %s", r.Code, wantCode, wantErr, r.Stdout, r.Stderr)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(r.Stdout, "\n") {
		name, rest, ok := strings.Cut(l, ": ")
		if ok && strings.HasPrefix(name, "app.t") && !strings.HasPrefix(rest, "warning: ") {
			if lines[name] != "" {
				t.Fatalf("validate says two things of %s:\n%s\n%s", name, lines[name], l)
			}
			lines[name] = rest
		}
	}
	for i := range n {
		name := fmt.Sprintf("app.t%03d", i)
		isRefused := false
		for _, j := range refused {
			isRefused = isRefused || j == i
		}
		if ok := strings.HasPrefix(lines[name], "ok ("); ok == isRefused {
			t.Errorf("validate's line of %s: %q; want it refused: %v\n%s", name, lines[name], isRefused, r.Stdout)
		}
	}
	return lines
}

// wantLine fails unless validate's line of table (validateLines) says
// want.
func wantLine(t *testing.T, lines map[string]string, table, want string) {
	t.Helper()
	if !strings.Contains(lines[table], want) {
		t.Errorf("validate's line of %s:\n%s\ndoes not say:\n%s", table, lines[table], want)
	}
}

// Copies of one shape share one trial creation in validate, but each
// copy's own name is still checked: a view, an enum type, or a table of
// another shape holding a copy's name refuses that copy alone, naming it;
// the trial leaves nothing behind.
func TestValidateOneShapeRefusesATakenName(t *testing.T) {
	dst := pgtest.NewDB(t)
	dst.Exec(t, `CREATE SCHEMA copy;
CREATE VIEW copy.t004 AS SELECT 1::bigint AS id;
CREATE TABLE copy.t006 (id integer PRIMARY KEY, name text);
CREATE TYPE copy.t008 AS ENUM ('a')`)
	_, cfg := oneShape(t, 10, dst, "")
	objects := `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'copy'`
	before := count(t, dst, objects)
	lines := validateLines(t, cfg, 10, 4, 6, 8)
	wantLine(t, lines, "app.t004", "skipped: sink.table: the copy copy.t004 (source app.t004) has 1 problem(s): copy.t004 in the sink is a view, not a table, so the copy cannot be created there: drop or rename it, or choose another sink.table")
	wantLine(t, lines, "app.t006", `skipped: sink.table: copy.t006 cannot hold the source's rows exactly: column "id" is integer but bigint in the source`)
	wantLine(t, lines, "app.t006", `column "updated_at" of the source is missing (add it as timestamp with time zone)`)
	wantLine(t, lines, "app.t008", "skipped: sink.table: the copy copy.t008 (source app.t008) has 1 problem(s): copy.t008 in the sink is the name of an enum type, not a table, so the copy cannot be created there: drop or rename it, or choose another sink.table")
	if after := count(t, dst, objects); after != before {
		t.Errorf("validate left %d objects in schema copy, want the %d made by hand", after, before)
	}
}

// A sink role that may not create the copies' schema, then one that may
// not create tables in it: every copy of the shape is refused with the
// GRANT it needs, and with that GRANT every one is ok.
func TestValidateOneShapeRefusesWithoutCreate(t *testing.T) {
	dst := pgtest.NewDB(t)
	role := pgtest.NewRole(t, dst, "syncd_shape")
	dst.Exec(t, "CREATE SCHEMA syncd AUTHORIZATION "+role) // syncd's catalog (docs/PRIVILEGES.md)
	_, cfg := oneShape(t, 6, dst, role)
	all := []int{0, 1, 2, 3, 4, 5}

	// No schema copy, no CREATE on the database.
	lines := validateLines(t, cfg, 6, all...)
	for i := range all {
		name := fmt.Sprintf("app.t%03d", i)
		wantLine(t, lines, name, fmt.Sprintf("skipped: sink.table: the copy copy.t%03d (source %s) has 1 problem(s): the sink role %s lacks CREATE on database %s to create schema copy (GRANT CREATE ON DATABASE %q TO %q)",
			i, name, role, dst.Name, dst.Name, role))
	}

	// Schema copy exists, with USAGE but not CREATE.
	dst.Exec(t, "CREATE SCHEMA copy; GRANT USAGE ON SCHEMA copy TO "+role)
	lines = validateLines(t, cfg, 6, all...)
	for i := range all {
		name := fmt.Sprintf("app.t%03d", i)
		wantLine(t, lines, name, fmt.Sprintf("skipped: sink.table: the copy copy.t%03d (source %s) has 1 problem(s): the sink role %s lacks USAGE and CREATE on schema copy, which creating the copy needs (GRANT USAGE, CREATE ON SCHEMA \"copy\" TO %q)",
			i, name, role, role))
	}

	dst.Exec(t, "GRANT CREATE ON SCHEMA copy TO "+role)
	validateLines(t, cfg, 6)
	if n := count(t, dst, `SELECT count(*) FROM pg_tables WHERE schemaname = 'copy'`); n != 0 {
		t.Errorf("validate left %d tables in schema copy, want none", n)
	}
}

// A trial creation that fails for a shape is run again for each copy of
// it, so that every copy's message shows its own statement: here an event
// trigger of the sink refuses every CREATE TABLE.
func TestValidateOneShapeFailedTrialNamesEachCopy(t *testing.T) {
	dst := pgtest.NewDB(t)
	dst.Exec(t, `CREATE SCHEMA copy;
CREATE FUNCTION no_tables() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'no new tables here'; END $$;
CREATE EVENT TRIGGER no_tables ON ddl_command_start WHEN TAG IN ('CREATE TABLE') EXECUTE FUNCTION no_tables()`)
	_, cfg := oneShape(t, 4, dst, "")
	lines := validateLines(t, cfg, 4, 0, 1, 2, 3)
	for i := range 4 {
		wantLine(t, lines, fmt.Sprintf("app.t%03d", i), fmt.Sprintf(`creating the copy fails: CREATE TABLE IF NOT EXISTS "copy"."t%03d" ("id" bigint NOT NULL, "updated_at" timestamp with time zone NOT NULL, "v" text, PRIMARY KEY ("id")): ERROR: no new tables here`, i))
	}
}
