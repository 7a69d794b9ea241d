package main_test

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/syncer"
)

// A daemon stopped while pages are in flight says what it waits for: the
// stop's first line lists each source and what its run does, and each time
// one of them ends, a line lists the ones left. Once the last page
// commits it exits 0. The pages are held by advisory locks the test
// holds (the source's where clause takes them), not by time.
func TestStopSaysWhatItWaitsFor(t *testing.T) {
	src, dst := setupOrders(t)
	src.Exec(t, `CREATE FUNCTION gate(k int) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN PERFORM pg_advisory_xact_lock_shared(k); RETURN true; END $$`)
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, src.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock(1), pg_advisory_lock(2)"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, s := range []struct {
		name string
		gate int
	}{{"orders_a", 1}, {"orders_b", 2}} {
		writeConfig(t, dir, s.name+".yaml", fmt.Sprintf(`name: %s
schedule: "@every 1h"
source:
  dsn: %s
  table: public.orders
  cursor: [updated_at, id]
  page_size: 50
  where: gate(%d)
sink:
  dsn: %s
  table: public.%s_copy
  key: [id]
`, s.name, src.URL, s.gate, dst.URL, s.name))
	}
	d := bin.Start(t, nil, "run", "--config", dir, "--state", filepath.Join(dir, "state.db"), "--listen", "")
	waitFor(t, 60*time.Second, "both sources' first page waiting for its gate", func() bool {
		return count(t, src, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid IN (1, 2) AND database = (SELECT oid FROM pg_database WHERE datname = current_database())") == 2
	})

	d.Signal(t, syscall.SIGTERM)
	e := d.WaitLog(t, 30*time.Second, "stopping: no new page is taken; pages in flight commit and write their watermark")
	if !e.Match("", "waiting_for", []string{"orders_a (page in flight)", "orders_b (page in flight)"}, "force", "a second SIGTERM or SIGINT") {
		t.Fatalf("the stop's first line should list both pages in flight and how to force the exit: %v", e)
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock(1)"); err != nil {
		t.Fatal(err)
	}
	e = d.WaitLog(t, 30*time.Second, "still waiting for the jobs in flight; a second SIGTERM or SIGINT forces the exit", "waiting_for", []string{"orders_b (page in flight)"})
	if e.Text("after") == "" || e.Text("timeout_in") == "" {
		t.Fatalf("the line should say how long the stop has waited and how long it still may: %v", e)
	}
	if d.Exited() {
		t.Fatal("the daemon exited with a page still in flight")
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock(2)"); err != nil {
		t.Fatal(err)
	}
	if r := d.Wait(t, 30*time.Second); r.Code != 0 {
		t.Fatalf("exit after the last page committed: %s", r)
	}
	if e, ok := d.Output.Find("stopped"); !ok || e.Text("after") == "" {
		t.Fatalf("no stopped line with the time the stop took:\n%s", d.Output)
	}
	// Each page in flight committed with its watermark.
	for _, c := range []string{"orders_a_copy", "orders_b_copy"} {
		if n := count(t, dst, "SELECT count(*) FROM "+c); n != 50 {
			t.Errorf("%s has %d rows, want the 50 of the page in flight", c, n)
		}
	}
}

// A stop during a first load names it: the chunks in flight commit, then
// the daemon exits 0.
func TestStopDuringFirstLoadSaysSo(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, note text)`)
	src.Exec(t, `INSERT INTO orders SELECT g, now() - interval '1 day' + g * interval '1 ms', repeat('x', 300) FROM generate_series(1, 1000) g`)
	// The chunks' COPY waits while the test holds lock 4343.
	src.Exec(t, `CREATE FUNCTION copy_gate() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
	IF current_query() LIKE 'COPY%' THEN PERFORM pg_advisory_xact_lock_shared(4343); END IF;
	RETURN true;
END $$`)
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, src.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock(4343)"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", "schedule: \"@every 1h\"\n"+
		orders(t, src, dst, "  where: copy_gate()\n  first_load: {workers: 2, chunk_size: 32kB, min_table_size: 0}\n"))
	d := bin.Start(t, nil, "run", "--config", cfg, "--state", filepath.Join(dir, "state.db"), "--listen", "")
	waitFor(t, 60*time.Second, "a first load chunk waiting for its gate", func() bool {
		return count(t, src, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = 4343 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())") > 0
	})
	d.Signal(t, syscall.SIGTERM)
	e := d.WaitLog(t, 30*time.Second, "stopping: no new page is taken; pages in flight commit and write their watermark")
	if !e.Match("", "waiting_for", []string{"orders (" + syncer.PhaseFirstLoad + ")"}) {
		t.Fatalf("the stop's first line should name the first load: %v", e)
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock(4343)"); err != nil {
		t.Fatal(err)
	}
	if r := d.Wait(t, 60*time.Second); r.Code != 0 {
		t.Fatalf("exit once the chunks in flight committed: %s", r)
	}
}
