package main_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/testutil"
)

// validate, run --once and status report the rows the cursor cannot reach
// (NULL cursor, stamped past the source's clock), and the run copies them:
// before, validate named only the NULL rows and the run failed on them.
func TestBinaryReportsRowsOutsideCursor(t *testing.T) {
	src, dst := setupOrders(t)
	src.Exec(t, `ALTER TABLE orders ALTER COLUMN updated_at DROP NOT NULL`)
	src.Exec(t, `CREATE INDEX ON orders (updated_at, id)`)
	src.Exec(t, `UPDATE orders SET updated_at = NULL WHERE id IN (10, 20, 30)`)
	src.Exec(t, `UPDATE orders SET updated_at = 'infinity' WHERE id = 40`)
	src.Exec(t, `UPDATE orders SET updated_at = '2099-01-01' WHERE id = 50`)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, ""))
	env := []string{"SYNCD_STATE=" + filepath.Join(dir, "state.db")}

	r := bin.Run(t, env, "validate", "--config", cfg)
	if r.Code != 0 || !strings.Contains(r.Stdout, "orders: warning: 3 rows of public.orders have a NULL cursor column (updated_at, id)") ||
		!strings.Contains(r.Stdout, "orders: warning: 2 rows of public.orders have updated_at past the source's clock plus 1m0s") {
		t.Fatalf("validate exited %d without both counts:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}

	r = bin.Run(t, env, "run", "--config", cfg, "--once")
	if r.Code != 0 {
		t.Fatalf("run --once exited %d: %s", r.Code, r.Stderr)
	}
	warned := false
	for _, e := range testutil.ParseLines(r.Stderr) {
		warned = warned || e.Level() == "WARN" && e.Match("", "rows_null_cursor", 3, "rows_ahead_of_clock", 2)
	}
	if !warned {
		t.Fatalf("run --once does not warn with both counts:\n%s", r.Stderr)
	}
	if got, want := rowsText(t, dst, "orders_copy"), rowsText(t, src, "orders"); got != want {
		t.Fatalf("copy differs from the source:\ncopy:\n%s\nsource:\n%s", got, want)
	}

	r = bin.Run(t, env, "status", "--config", cfg)
	if r.Code != 0 || !strings.Contains(r.Stdout, "orders: 3 rows with a NULL cursor column") || !strings.Contains(r.Stdout, "orders: 2 rows stamped past the source's clock") {
		t.Fatalf("status exited %d without both counts:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	r = bin.Run(t, env, "status", "--config", cfg, "--json")
	var st struct {
		Sources []struct {
			Null  int64 `json:"rows_null_cursor"`
			Ahead int64 `json:"rows_ahead_of_clock"`
		} `json:"sources"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil || len(st.Sources) != 1 || st.Sources[0].Null != 3 || st.Sources[0].Ahead != 2 {
		t.Fatalf("status --json: %v, want rows_null_cursor 3 and rows_ahead_of_clock 2:\n%s", err, r.Stdout)
	}
}
