package reliability

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// identityCopy is i_src (1,000 rows: a, b, v) copied by one run --once;
// it returns the config, the state file and a run function.
func identityCopy(t *testing.T, db *pgtest.DB, extra string) (cfg, state string) {
	t.Helper()
	db.Exec(t, `
CREATE TABLE i_src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, a text NOT NULL, b text NOT NULL, v integer NOT NULL, name varchar(50) NOT NULL);
CREATE INDEX ON i_src (updated_at, id); -- else the run also warns of the missing cursor index
INSERT INTO i_src SELECT i, now() - interval '1 hour' + i * interval '1 ms', 'a' || i, 'b' || i, i, 'n' || i FROM generate_series(1, 1000) i`)
	dir := t.TempDir()
	cfg = writeFile(t, dir, "i.yaml", tableConfig{Name: "i", SourceDSN: db.URL, Table: "public.i_src", Cursor: "[updated_at, id]",
		SinkDSN: db.URL, SinkTable: "public.i_copy", PageSize: 300}.YAML()+extra)
	state = filepath.Join(dir, "state.db")
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("first run: %s", r)
	}
	return cfg, state
}

func sameCopy(t *testing.T, db *pgtest.DB, cols []string, want int) {
	t.Helper()
	src, dst := schemaRows(t, db.Pool, "i_src", cols), schemaRows(t, db.Pool, "i_copy", cols)
	if len(src) != want || !slices.Equal(src, dst) {
		t.Fatalf("copy differs from the source on %v: %d source rows (want %d), %d copy rows; first source %q copy %q",
			cols, len(src), want, len(dst), firstRow(src), firstRow(dst))
	}
}

func firstRow(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// run --once follows a column dropped and added again with another type
// (exit 0, the copy's column takes the new type, every row the source's
// value) and stops at a swap of two names (exit 1, one line with the
// statements that follow it); once they ran on the sink, run --once exits
// 0 with the 1,000 rows holding the swapped values; validate agrees with
// each run.
func TestRunOnceColumnIdentity(t *testing.T) {
	db := pgtest.NewDB(t)
	cfg, state := identityCopy(t, db, "")
	run := func() result { t.Helper(); return bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state) }
	db.Exec(t, `ALTER TABLE i_src DROP COLUMN v, ADD COLUMN v text NOT NULL DEFAULT 'seven'`)
	if r := bin.Run(t, nil, "validate", "--config", cfg, "--state", state); r.Code != 0 || !strings.Contains(r.Stdout, `column "v" was dropped and added again (text)`) {
		t.Fatalf("validate after drop and add: %s", r)
	}
	if r := run(); r.Code != 0 {
		t.Fatalf("run after drop and add: %s", r)
	}
	cols := []string{"id", "a", "b", "v"}
	sameCopy(t, db, cols, 1000)
	if got := copyColumns(t, db.Pool, "i_copy")["v"]; got != "text" {
		t.Fatalf("copy column v is %s, want text", got)
	}

	db.Exec(t, `BEGIN; ALTER TABLE i_src RENAME COLUMN a TO tmp; ALTER TABLE i_src RENAME COLUMN b TO a; ALTER TABLE i_src RENAME COLUMN tmp TO b; COMMIT`)
	if r := bin.Run(t, nil, "validate", "--config", cfg, "--state", state); r.Code != 2 || !strings.Contains(r.Stderr, "renamed") {
		t.Fatalf("validate after a swap: %s", r)
	}
	r := run()
	fix := regexp.MustCompile("run `([^`]*)` on the sink").FindStringSubmatch(r.Stderr)
	if r.Code != 1 || fix == nil || len(lines(r.Stderr)) != 1 {
		t.Fatalf("run after a swap: want exit 1 and one line with the fix, got %s", r)
	}
	db.Exec(t, fix[1])
	if r := run(); r.Code != 0 {
		t.Fatalf("run after the fix: %s", r)
	}
	sameCopy(t, db, cols, 1000)
	if got := schemaRows(t, db.Pool, "i_copy", []string{"a", "b"})[0]; got != "b1|a1" {
		t.Fatalf("copy row 1 after the swap: %q, want b1|a1", got)
	}
}

// Under schema_changes: fail a column dropped and added again and a swap
// stop run --once (exit 1, as any refused change) and validate (exit 2),
// and the copy keeps what it held.
func TestRunOnceColumnIdentityUnderFail(t *testing.T) {
	db := pgtest.NewDB(t)
	cfg, state := identityCopy(t, db, "schema_changes: fail\n")
	before := schemaRows(t, db.Pool, "i_copy", []string{"id", "a", "b", "v"})
	db.Exec(t, `ALTER TABLE i_src DROP COLUMN v, ADD COLUMN v integer DEFAULT 7`)
	for _, args := range [][]string{{"validate"}, {"run", "--once"}} {
		r := bin.Run(t, nil, append(args, "--config", cfg, "--state", state)...)
		want := map[string]int{"validate": 2, "run": 1}[args[0]]
		if r.Code != want || !strings.Contains(r.Stderr, `column "v" was dropped and added again`) || !strings.Contains(r.Stderr, "schema_changes is fail") {
			t.Fatalf("%s after drop and add under fail: want exit %d, got %s", args[0], want, r)
		}
	}
	db.Exec(t, `ALTER TABLE i_src DROP COLUMN v; ALTER TABLE i_src ADD COLUMN v integer NOT NULL DEFAULT 1;
BEGIN; ALTER TABLE i_src RENAME COLUMN a TO tmp; ALTER TABLE i_src RENAME COLUMN b TO a; ALTER TABLE i_src RENAME COLUMN tmp TO b; COMMIT`)
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 1 || !strings.Contains(r.Stderr, "renamed") {
		t.Fatalf("run after a swap under fail: %s", r)
	}
	if after := schemaRows(t, db.Pool, "i_copy", []string{"id", "a", "b", "v"}); !slices.Equal(before, after) {
		t.Fatalf("schema_changes: fail changed the copy: %q -> %q", firstRow(before), firstRow(after))
	}
}
