package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
)

// `syncd resync --from` a time past the source's clock exits 2 with one
// line naming the source and the clock, and leaves the state file as it
// was; when the source cannot be reached the line says the local clock was
// used. (Before: "watermark moved back", exit 0, and the next runs skipped
// every row written until then.)
func TestResyncFromTheFutureExits2(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state.db")
	env := []string{"SYNCD_STATE=" + state}
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, ""))
	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("run: exit %d: %s", r.Code, r.Stderr)
	}
	before, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	r := bin.Run(t, env, "resync", "--config", cfg, "--source", "orders", "--from", future)
	line := strings.TrimSpace(r.Stderr)
	if r.Code != 2 || strings.Contains(line, "\n") || !strings.Contains(line, "source orders: resync to "+future+" refused: it is ") || !strings.Contains(line, "past the source's clock") {
		t.Fatalf("resync --from %s: exit %d, want 2 with one line naming the source's clock:\n%s%s", future, r.Code, r.Stdout, r.Stderr)
	}
	if after, _ := os.ReadFile(state); string(after) != string(before) {
		t.Fatal("the refused resync changed the state file")
	}

	// The source down: the local clock decides, and the line says so.
	down := writeConfig(t, dir, "down.yaml", strings.Replace(orders(t, src, dst, ""), src.URL, "postgres://postgres@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=2", 1))
	r = bin.Run(t, env, "resync", "--config", down, "--source", "orders", "--from", "2099-01-01T00:00:00Z")
	if r.Code != 2 || !strings.Contains(r.Stderr, "past the local clock, as the source could not be reached") {
		t.Fatalf("resync --from 2099 with the source down: exit %d:\n%s", r.Code, r.Stderr)
	}
	if after, _ := os.ReadFile(state); string(after) != string(before) {
		t.Fatal("the refused resync changed the state file")
	}
	// A time in the past still works.
	if r := bin.Run(t, env, "resync", "--config", cfg, "--source", "orders", "--from", "2026-10-01T00:00:00Z"); r.Code != 0 {
		t.Fatalf("resync --from the past: exit %d: %s", r.Code, r.Stderr)
	}
}

// `syncd resync --from` a time after the watermark would move it forward
// and the rows between would never be copied: exit 2 with one line saying
// so and how many rows, the state file unchanged, and the next run copies
// every row. The same time within the clock allowance is refused too.
// With --skip-rows the move is made and the line says it moved forward and
// how many rows were skipped; a move back says "moved back from". (Before:
// "watermark moved back to ...", exit 0, and those rows were never copied.)
func TestResyncForwardIsRefused(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text)`)
	// Row g is stamped 2026-10-01 09:00:00 plus g seconds.
	insert := func(from, to int) {
		src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-01 09:00:00+00'::timestamptz + g * interval '1 second', 'o' || g FROM generate_series($1::int, $2::int) g`, from, to)
	}
	insert(1, 100)
	dir := t.TempDir()
	state := filepath.Join(dir, "state.db")
	env := []string{"SYNCD_STATE=" + state}
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, ""))
	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("run: exit %d: %s", r.Code, r.Stderr)
	}
	insert(101, 150)
	before, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, rows string }{
		{"2026-10-01T09:03:20Z", "the 50 source rows between"},                                      // in the past, after the watermark (09:01:40)
		{time.Now().Add(20 * time.Second).UTC().Format(time.RFC3339), "the 50 source rows between"}, // within the clock allowance
	} {
		r := bin.Run(t, env, "resync", "--config", cfg, "--source", "orders", "--from", tc.from)
		line := strings.TrimSpace(r.Stderr)
		if r.Code != 2 || strings.Contains(line, "\n") || r.Stdout != "" ||
			!strings.Contains(line, "source orders: resync to ") || !strings.Contains(line, "refused: the watermark is at 2026-10-01T09:01:40.000000Z, so this would move it forward and 50 source rows between would never be copied") ||
			!strings.Contains(line, "--skip-rows") {
			t.Fatalf("resync --from %s after the watermark: exit %d, want 2 with one line saying it would skip %s:\n%s%s", tc.from, r.Code, tc.rows, r.Stdout, r.Stderr)
		}
		if after, _ := os.ReadFile(state); string(after) != string(before) {
			t.Fatalf("the refused resync --from %s changed the state file", tc.from)
		}
	}
	// Nothing was skipped: the next run copies all 150 rows.
	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("run: exit %d: %s", r.Code, r.Stderr)
	}
	if got, want := rowsText(t, dst, "orders_copy"), rowsText(t, src, "orders"); got != want || count(t, dst, "SELECT count(*) FROM orders_copy") != 150 {
		t.Fatalf("after the refused resyncs the copy differs from the source")
	}

	// With --skip-rows the operator skips rows 151..179 on purpose.
	insert(151, 200)
	r := bin.Run(t, env, "resync", "--config", cfg, "--source", "orders", "--from", "2026-10-01T09:03:00Z", "--skip-rows")
	if want := "source orders: watermark moved forward from 2026-10-01T09:02:30.000000Z to 2026-10-01T09:03:00.000000Z: 29 source rows between were skipped and will not be copied"; r.Code != 0 || !strings.Contains(r.Stdout, want) {
		t.Fatalf("resync --skip-rows: exit %d, want 0 and %q:\n%s%s", r.Code, want, r.Stdout, r.Stderr)
	}
	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("run: exit %d: %s", r.Code, r.Stderr)
	}
	if n, skipped := count(t, dst, "SELECT count(*) FROM orders_copy"), count(t, dst, "SELECT count(*) FROM orders_copy WHERE id BETWEEN 151 AND 179"); n != 171 || skipped != 0 {
		t.Fatalf("after resync --skip-rows the copy has %d rows, %d of the skipped ones; want 171 and 0", n, skipped)
	}
	// A move back says so, with both points.
	r = bin.Run(t, env, "resync", "--config", cfg, "--source", "orders", "--from", "2026-10-01T09:00:50Z")
	if want := "source orders: watermark moved back from 2026-10-01T09:03:20.000000Z to 2026-10-01T09:00:50.000000Z; the next run re-reads from there"; r.Code != 0 || !strings.Contains(r.Stdout, want) {
		t.Fatalf("resync back: exit %d, want 0 and %q:\n%s%s", r.Code, want, r.Stdout, r.Stderr)
	}
}
