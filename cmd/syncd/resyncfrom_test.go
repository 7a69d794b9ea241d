package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	if r := syncd(t, env, "run", "--config", cfg, "--once"); r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	before, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	r := syncd(t, env, "resync", "--config", cfg, "--source", "orders", "--from", future)
	line := strings.TrimSpace(r.stderr)
	if r.code != 2 || strings.Contains(line, "\n") || !strings.Contains(line, "source orders: resync to "+future+" refused: it is ") || !strings.Contains(line, "past the source's clock") {
		t.Fatalf("resync --from %s: exit %d, want 2 with one line naming the source's clock:\n%s%s", future, r.code, r.stdout, r.stderr)
	}
	if after, _ := os.ReadFile(state); string(after) != string(before) {
		t.Fatal("the refused resync changed the state file")
	}

	// The source down: the local clock decides, and the line says so.
	down := writeConfig(t, dir, "down.yaml", strings.Replace(orders(t, src, dst, ""), src.URL, "postgres://postgres@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=2", 1))
	r = syncd(t, env, "resync", "--config", down, "--source", "orders", "--from", "2099-01-01T00:00:00Z")
	if r.code != 2 || !strings.Contains(r.stderr, "past the local clock, as the source could not be reached") {
		t.Fatalf("resync --from 2099 with the source down: exit %d:\n%s", r.code, r.stderr)
	}
	if after, _ := os.ReadFile(state); string(after) != string(before) {
		t.Fatal("the refused resync changed the state file")
	}
	// A time in the past still works.
	if r := syncd(t, env, "resync", "--config", cfg, "--source", "orders", "--from", "2026-10-01T00:00:00Z"); r.code != 0 {
		t.Fatalf("resync --from the past: exit %d: %s", r.code, r.stderr)
	}
}
