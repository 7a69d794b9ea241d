package main_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// A bigserial cursor whose sequence is set back below the watermark
// (setval): the 20 rows inserted since get ids below the watermark. `run
// --once` refuses with exit 2 and one line naming the table, the sequence,
// its last value, the watermark and the fixes, and leaves the watermark
// where it was; `validate` reports the same instead of "ok". The fix it
// names (resync --from-start) copies the rows. (Before: both exited 0 and
// the rows were skipped by every run.)
func TestSequenceSetBackBelowWatermarkIsRefused(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE items (id bigserial PRIMARY KEY, v text)`)
	src.Exec(t, `INSERT INTO items (v) SELECT 'a' || g FROM generate_series(1, 100) g`)
	dir := t.TempDir()
	state := filepath.Join(dir, "state.db")
	cfg := writeConfig(t, dir, "items.yaml", fmt.Sprintf(`name: items
source:
  dsn: %s
  table: public.items
  cursor: [id]
  page_size: 50
sink:
  dsn: %s
  table: public.items_copy
  key: [id]
`, src.URL, dst.URL))
	env := []string{"SYNCD_STATE=" + state}
	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("first run: exit %d: %s", r.Code, r.Stderr)
	}
	// The rows above 10 are archived and the sequence set back: new rows
	// get ids 11 to 30, below the watermark (100).
	src.Exec(t, `DELETE FROM items WHERE id > 10`)
	src.Exec(t, `SELECT setval('items_id_seq', 10)`)
	src.Exec(t, `INSERT INTO items (v) SELECT 'b' || g FROM generate_series(1, 20) g`)

	want := []string{"items.yaml:5: source.cursor: sequence items_id_seq of public.items was set back below the watermark: its last value is 30 but the watermark is at id 100",
		"run `syncd resync --source items --from-start`", "SELECT setval('items_id_seq', 100)"}
	check := func(what string, r testutil.Result) {
		t.Helper()
		line := strings.TrimSpace(r.Stderr)
		ok := r.Code == 2 && !strings.Contains(line, "\n")
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if !ok {
			t.Fatalf("%s after setval: exit %d, want 2 and one line containing %q:\n%s%s", what, r.Code, want, r.Stdout, r.Stderr)
		}
	}
	check("run --once", bin.Run(t, env, "run", "--config", cfg, "--once"))
	r := bin.Run(t, env, "status", "--config", cfg, "--json")
	if !strings.Contains(r.Stdout, `"watermark": "100"`) {
		t.Fatalf("the refused run moved the watermark:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stdout, `"last_status": "failed"`) {
		t.Fatalf("status does not show the refused run as failed:\n%s", r.Stdout)
	}
	check("validate", bin.Run(t, env, "validate", "--config", cfg))

	// The fix it names copies the 20 new rows.
	if r := bin.Run(t, env, "resync", "--config", cfg, "--source", "items", "--from-start"); r.Code != 0 {
		t.Fatalf("resync --from-start: exit %d: %s", r.Code, r.Stderr)
	}
	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("run after resync: exit %d: %s", r.Code, r.Stderr)
	}
	if n := count(t, dst, `SELECT count(*) FROM items_copy WHERE v LIKE 'b%'`); n != 20 {
		t.Fatalf("after the resync the copy holds %d of the 20 rows inserted after setval", n)
	}
}
