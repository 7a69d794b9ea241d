package reliability

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// Under schema_changes: fail an added column stops run --once (exit 1)
// with the statement that adds it to the copy; once that statement ran on
// the sink, exactly as advised, the next run fills the column in all 200
// rows the copy holds (none left NULL) and exits 0.
func TestColumnAddedByHandIsFilled(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t)
	db.Exec(t, `
CREATE TABLE h_src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text NOT NULL);
CREATE INDEX ON h_src (updated_at, id); -- else the run also warns of the missing cursor index
INSERT INTO h_src SELECT i, now() - interval '1 hour' + i * interval '1 s', 'n' || i FROM generate_series(1, 200) i`)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "h.yaml", tableConfig{Name: "h", SourceDSN: db.URL, Table: "public.h_src", Cursor: "[updated_at, id]",
		SinkDSN: db.URL, SinkTable: "public.h_copy", PageSize: 50}.YAML()+"schema_changes: fail\n")
	state := filepath.Join(dir, "state.db")
	run := func() result { t.Helper(); return bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state) }
	if r := run(); r.Code != 0 {
		t.Fatalf("first run: %s", r)
	}
	db.Exec(t, `ALTER TABLE h_src ADD COLUMN tier text NOT NULL DEFAULT 'gold'`)
	r := run()
	hand := regexp.MustCompile("run `([^`]*)` on the sink").FindStringSubmatch(r.Stderr)
	if r.Code != 1 || hand == nil || !strings.Contains(r.Stderr, "schema_changes is fail") || len(lines(r.Stderr)) != 1 {
		t.Fatalf("run after the add under fail: want exit 1 and one line naming the statement, got %s", r)
	}
	if want := `ALTER TABLE "public"."h_copy" ADD COLUMN "tier" text`; hand[1] != want {
		t.Fatalf("advised %q, want %q", hand[1], want)
	}
	db.Exec(t, hand[1])
	if r := run(); r.Code != 0 {
		t.Fatalf("run after the column was added by hand: %s", r)
	}
	cols := []string{"id", "updated_at", "name", "tier"}
	if src, dst := schemaRows(t, db.Pool, "h_src", cols), schemaRows(t, db.Pool, "h_copy", cols); len(src) != 200 || !slices.Equal(src, dst) {
		t.Fatalf("copy differs from the source on %v: %d source rows, %d copy rows", cols, len(src), len(dst))
	}
	var nulls int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM h_copy WHERE tier IS NULL`).Scan(&nulls); err != nil || nulls != 0 {
		t.Fatalf("%d rows of the copy have NULL tier (%v), want 0", nulls, err)
	}
	// Filled once: the next run changes nothing and says nothing of it.
	if r := run(); r.Code != 0 || strings.Contains(r.Stderr, "added by hand") {
		t.Fatalf("the run after the fill: %s", r)
	}
}

// The state file lost, then a column added to the source with a default:
// run --once follows it from the sink's record of the copy's columns (adds
// it and fills the 200 rows the copy holds) and exits 0; the copy equals
// the source. Before, the run refused the copy ("add it as integer"), and
// the column added by hand as told stayed NULL in every row, exit 0.
func TestLostStateFileThenColumnAddedIsFollowed(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `
CREATE TABLE ls_src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text NOT NULL);
INSERT INTO ls_src SELECT i, now() - interval '1 hour' + i * interval '1 s', 'n' || i FROM generate_series(1, 200) i`)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "ls.yaml", tableConfig{Name: "ls", SourceDSN: db.URL, Table: "public.ls_src", Cursor: "[updated_at, id]",
		SinkDSN: db.URL, SinkTable: "public.ls_copy", PageSize: 50}.YAML())
	state := filepath.Join(dir, "state.db")
	run := func() result { t.Helper(); return bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state) }
	if r := run(); r.Code != 0 {
		t.Fatalf("first run: %s", r)
	}
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `ALTER TABLE ls_src ADD COLUMN tier integer NOT NULL DEFAULT 7`)
	if r := run(); r.Code != 0 {
		t.Fatalf("run with the state file lost, after the add: %s", r)
	}
	cols := []string{"id", "updated_at", "name", "tier"}
	if src, dst := schemaRows(t, db.Pool, "ls_src", cols), schemaRows(t, db.Pool, "ls_copy", cols); len(src) != 200 || !slices.Equal(src, dst) {
		t.Fatalf("copy differs from the source on %v: %d source rows, %d copy rows", cols, len(src), len(dst))
	}
}
