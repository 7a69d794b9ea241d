package reliability

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// TestNumericKeySpelling rewrites a numeric key with another scale (1.0 to
// 1.00, with a new stamp). ON CONFLICT takes the two as the same key, and
// reconcile compares numerics without trailing zeros, so a copy that kept
// 1.0 was never noticed: the copy must hold the source's text, row by row.
func TestNumericKeySpelling(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE src (k numeric PRIMARY KEY, v text, updated_at timestamptz NOT NULL DEFAULT now())`)
	db.Exec(t, `INSERT INTO src (k, v) VALUES (1.0, 'a'), (2, 'b'), (3.50, 'c')`)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "num.yaml", tableConfig{Name: "num", SourceDSN: db.URL, Table: "src", Cursor: "[updated_at, k]",
		SinkDSN: db.URL, SinkTable: "dst"}.YAML())
	state := filepath.Join(dir, "state.db")
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("first run: %s", r)
	}
	db.Exec(t, `UPDATE src SET k = 1.00, v = 'a2', updated_at = clock_timestamp() WHERE k = 1`)
	db.Exec(t, `UPDATE src SET k = 3.5, updated_at = clock_timestamp() WHERE k = 3.5`)
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("second run: %s", r)
	}
	rows := func(table string) []string {
		return column[string](t, db, "SELECT x::text FROM "+table+" x ORDER BY k")
	}
	if got, want := rows("dst"), rows("src"); !slices.Equal(got, want) {
		t.Errorf("copy rows %q, want the source's %q", got, want)
	}
}
