package main_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/reconcile"
	"github.com/syncd/syncd/watermark"
)

// TestReconcileAll checks every source of a config in one command: one
// summary line per source (sorted by name), one exit code, a JSON array, repair of all of
// them, and a source that cannot be reconciled not stopping the others.
func TestReconcileAll(t *testing.T) {
	src, dst := setupOrders(t)
	src.Exec(t, `CREATE TABLE items (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text)`)
	src.Exec(t, `INSERT INTO items SELECT g, '2026-10-01 09:00:00+00'::timestamptz + g * interval '1 second', 'i' || g FROM generate_series(1, 300) g`)
	dir := t.TempDir()
	writeConfig(t, dir, "a-orders.yaml", orders(t, src, dst, ""))
	items := strings.NewReplacer("name: orders", "name: items", "public.orders_copy", "public.items_copy", "public.orders", "public.items").Replace(orders(t, src, dst, ""))
	writeConfig(t, dir, "b-items.yaml", items)
	state := filepath.Join(dir, "state.db")
	env := []string{"SYNCD_STATE=" + state}
	if r := bin.Run(t, env, "run", "--config", dir, "--once"); r.Code != 0 {
		t.Fatalf("run --once exited %d: %s", r.Code, r.Stderr)
	}

	r := bin.Run(t, env, "reconcile", "--config", dir, "--all")
	if r.Code != 0 {
		t.Fatalf("reconcile --all of two equal copies exited %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	want := "items: equal: 300 rows compared, public.items -> public.items_copy\norders: equal: 1000 rows compared, public.orders -> public.orders_copy\n" +
		"reconcile --all: 2 sources: 2 equal, 0 differ, 0 not covered, 0 failed\n"
	if r.Stdout != want {
		t.Fatalf("reconcile --all printed\n%s\nwant\n%s", r.Stdout, want)
	}

	dst.Exec(t, `DELETE FROM orders_copy WHERE id IN (5, 500, 999)`)
	dst.Exec(t, `UPDATE items_copy SET name = 'changed' WHERE id = 7`)
	r = bin.Run(t, env, "reconcile", "--config", dir, "--all")
	if r.Code != 1 {
		t.Fatalf("reconcile --all with differences exited %d, want 1\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 3 || lines[2] != "reconcile --all: 2 sources: 0 equal, 2 differ, 0 not covered, 0 failed" || !strings.HasPrefix(lines[1], "orders: public.orders and public.orders_copy differ: 3 missing, 0 extra, 0 changed") ||
		!strings.HasPrefix(lines[0], "items: public.items and public.items_copy differ: 0 missing, 0 extra, 1 changed") {
		t.Fatalf("reconcile --all summary lines:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stderr, "2 of 2 sources are not proven equal to their source (items, orders)") {
		t.Fatalf("stderr does not sum up the outcome: %s", r.Stderr)
	}

	r = bin.Run(t, env, "reconcile", "--config", dir, "--all", "--json")
	if r.Code != 1 {
		t.Fatalf("reconcile --all --json exited %d, want 1: %s", r.Code, r.Stderr)
	}
	var got []struct {
		Source  string `json:"source"`
		Outcome string `json:"outcome"`
		Report  *struct {
			Missing int64 `json:"missing"`
			Changed int64 `json:"changed"`
		} `json:"report"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatalf("reconcile --all --json is not a JSON array: %v\n%s", err, r.Stdout)
	}
	if len(got) != 2 || got[1].Source != "orders" || got[1].Outcome != "differences" || got[1].Report == nil || got[1].Report.Missing != 3 ||
		got[0].Source != "items" || got[0].Outcome != "differences" || got[0].Report == nil || got[0].Report.Changed != 1 {
		t.Fatalf("reconcile --all --json: %+v", got)
	}
	if !strings.Contains(r.Stderr, "reconcile --all: 2 sources: 0 equal, 2 differ, 0 not covered, 0 failed\n") {
		t.Fatalf("reconcile --all --json: no summary line on stderr: %s", r.Stderr)
	}

	if r = bin.Run(t, env, "reconcile", "--config", dir, "--all", "--repair"); r.Code != 0 {
		t.Fatalf("reconcile --all --repair exited %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	for _, tbl := range []string{"orders", "items"} {
		if rowsText(t, dst, tbl+"_copy") != rowsText(t, src, tbl) {
			t.Fatalf("%s_copy differs from %s after reconcile --all --repair", tbl, tbl)
		}
	}

	// A source whose sink cannot be reached is an error line; the others
	// are still reconciled, and the command exits 1. Rows past items'
	// watermark are not compared yet: items is not covered, not equal.
	src.Exec(t, `INSERT INTO items SELECT g, '2026-10-01 10:00:00+00'::timestamptz + g * interval '1 second', 'i' || g FROM generate_series(301, 305) g`)
	broken := strings.NewReplacer("name: orders", "name: broken", dst.URL, strings.Replace(dst.URL, dst.Name, dst.Name+"_missing", 1)).Replace(orders(t, src, dst, ""))
	writeConfig(t, dir, "c-broken.yaml", broken)
	r = bin.Run(t, env, "reconcile", "--config", dir, "--all")
	if r.Code != 1 {
		t.Fatalf("reconcile --all with an unreachable sink exited %d, want 1\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	lines = strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "broken: error: ") || !strings.HasPrefix(lines[1], "items: 5 rows of public.items not compared yet") ||
		!strings.HasPrefix(lines[2], "orders: equal:") || lines[3] != "reconcile --all: 3 sources: 1 equal, 0 differ, 1 not covered, 1 failed" {
		t.Fatalf("reconcile --all lines with one broken source:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stderr, "2 of 3 sources are not proven equal to their source (broken, items)") {
		t.Fatalf("stderr: %s", r.Stderr)
	}
	// One at a time prints the same lines in the same order.
	if one := bin.Run(t, env, "reconcile", "--config", dir, "--all", "--concurrency", "1"); one.Code != 1 || one.Stdout != r.Stdout {
		t.Fatalf("reconcile --all --concurrency 1 exited %d and printed\n%s\nwant (as with the default)\n%s", one.Code, one.Stdout, r.Stdout)
	}
	if r = bin.Run(t, env, "reconcile", "--config", dir, "--all", "--concurrency", "0"); r.Code != 2 || !strings.Contains(r.Stderr, "--concurrency 0: give at least 1") {
		t.Fatalf("reconcile --all --concurrency 0 exited %d: %s", r.Code, r.Stderr)
	}

	if r = bin.Run(t, env, "reconcile", "--config", dir, "--all", "--source", "orders"); r.Code != 2 || !strings.Contains(r.Stderr, "--all and --source exclude each other") {
		t.Fatalf("reconcile --all --source exited %d: %s", r.Code, r.Stderr)
	}
	if r = bin.Run(t, env, "reconcile", "--config", dir); r.Code != 2 || !strings.Contains(r.Stderr, "--source or --all is required") {
		t.Fatalf("reconcile without --source or --all exited %d: %s", r.Code, r.Stderr)
	}
}

// TestStatusShowsLastReconcile: a reconcile that records its outcome in the
// state file (the daemon's scheduled one) shows in status: a copy that has
// diverged names its differences and the repair command, a clean one the
// time it was proven equal; --json carries both.
func TestStatusShowsLastReconcile(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	path := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, ""))
	state := filepath.Join(dir, "state.db")
	env := []string{"SYNCD_STATE=" + state}
	if r := bin.Run(t, env, "run", "--config", path, "--once"); r.Code != 0 {
		t.Fatalf("run --once exited %d: %s", r.Code, r.Stderr)
	}
	cfg, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	reconcileRecorded := func(repair bool) {
		t.Helper()
		store, err := watermark.Open(state, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		if _, err := reconcile.Run(context.Background(), cfg, store, reconcile.Options{Repair: repair}); err != nil {
			t.Fatal(err)
		}
	}

	dst.Exec(t, `DELETE FROM orders_copy WHERE id IN (1, 2)`)
	dst.Exec(t, `UPDATE orders_copy SET name = 'x' WHERE id = 3`)
	reconcileRecorded(false)
	r := bin.Run(t, env, "status", "--config", path)
	if !strings.Contains(r.Stdout, "orders: the copy has diverged: the last reconcile (") ||
		!strings.Contains(r.Stdout, ") found 2 missing, 1 changed; last clean reconcile never; run `syncd reconcile --source orders --repair`") {
		t.Fatalf("status after a reconcile that found differences:\n%s", r.Stdout)
	}

	reconcileRecorded(true)
	if rowsText(t, dst, "orders_copy") != rowsText(t, src, "orders") {
		t.Fatal("the copy differs from the source after the repair")
	}
	r = bin.Run(t, env, "status", "--config", path, "--json")
	var st struct {
		Sources []struct {
			LastClean     string `json:"last_clean_reconcile_at"`
			LastReconcile *struct {
				At          time.Time        `json:"at"`
				Differences map[string]int64 `json:"differences"`
				Repaired    bool             `json:"repaired"`
			} `json:"last_reconcile"`
		} `json:"sources"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.Stdout)
	}
	if len(st.Sources) != 1 || st.Sources[0].LastClean == "" || st.Sources[0].LastReconcile == nil ||
		!st.Sources[0].LastReconcile.Repaired || len(st.Sources[0].LastReconcile.Differences) != 0 {
		t.Fatalf("status --json after a clean repair: %s", r.Stdout)
	}
	r = bin.Run(t, env, "status", "--config", path)
	if !strings.Contains(r.Stdout, "orders: last clean reconcile "+st.Sources[0].LastClean+"\n") {
		t.Fatalf("status after a clean reconcile:\n%s", r.Stdout)
	}
}

// TestOneOffReconcileRecordsItsOutcome: `syncd reconcile` run by hand or by
// cron records what it found in the state file when the file is free, so
// status shows it like a scheduled one (differences, then the clean
// repair); while another process holds the file, the reconcile still
// reports and exits as usual and leaves the file alone.
func TestOneOffReconcileRecordsItsOutcome(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	path := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, ""))
	state := filepath.Join(dir, "state.db")
	env := []string{"SYNCD_STATE=" + state}
	if r := bin.Run(t, env, "run", "--config", path, "--once"); r.Code != 0 {
		t.Fatalf("run --once exited %d: %s", r.Code, r.Stderr)
	}
	dst.Exec(t, `DELETE FROM orders_copy WHERE id IN (1, 2)`)
	if r := bin.Run(t, env, "reconcile", "--config", path, "--source", "orders"); r.Code != 1 {
		t.Fatalf("reconcile of a copy missing 2 rows exited %d: %s%s", r.Code, r.Stdout, r.Stderr)
	}
	r := bin.Run(t, env, "status", "--config", path)
	if !strings.Contains(r.Stdout, ") found 2 missing; last clean reconcile never; run `syncd reconcile --source orders --repair`") {
		t.Fatalf("status after a one-off reconcile that found 2 missing:\n%s", r.Stdout)
	}

	// Held by another process: the repair still runs and exits 0, the
	// state file keeps the earlier outcome.
	store, err := watermark.Open(state, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r = bin.Run(t, env, "reconcile", "--config", path, "--source", "orders", "--repair")
	store.Close()
	if r.Code != 0 || !strings.Contains(r.Stderr, "reconcile outcome not recorded in the state file") {
		t.Fatalf("reconcile --repair with the state file held exited %d: %s%s", r.Code, r.Stdout, r.Stderr)
	}
	if rowsText(t, dst, "orders_copy") != rowsText(t, src, "orders") {
		t.Fatal("the copy differs from the source after the repair")
	}
	if r := bin.Run(t, env, "status", "--config", path); !strings.Contains(r.Stdout, "last clean reconcile never") {
		t.Fatalf("status changed while the state file was held:\n%s", r.Stdout)
	}

	if r := bin.Run(t, env, "reconcile", "--config", path, "--source", "orders"); r.Code != 0 {
		t.Fatalf("reconcile of an equal copy exited %d: %s%s", r.Code, r.Stdout, r.Stderr)
	}
	r = bin.Run(t, env, "status", "--config", path)
	if !strings.Contains(r.Stdout, "orders: last clean reconcile ") || strings.Contains(r.Stdout, "never") {
		t.Fatalf("status after a clean one-off reconcile:\n%s", r.Stdout)
	}
}
