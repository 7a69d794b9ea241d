package main_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/ops"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// The first load of an empty copy is killed (SIGKILL) several times at
// random points; each rerun resumes it. Afterwards the copy equals the
// source row by row, and no chunk recorded as done before a kill was
// written again (its rows keep the sink transaction that wrote them).
func TestFirstLoadSurvivesKills(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, note text)`)
	src.Exec(t, `CREATE INDEX ON orders (updated_at, id)`)
	// A transaction of another session, open with a transaction id from
	// before the rows were written to the end of the test, holds every
	// snapshot's xmin below the rows' versions, as any long transaction on
	// the server does: a resumed load then reads its chunks done again
	// for versions it cannot tell older than its first snapshot, and must
	// leave the rows the copy holds already as they are.
	ctx := context.Background()
	holder, err := src.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		t.Fatal(err)
	}
	src.Exec(t, `INSERT INTO orders SELECT g, now() - interval '1 day' + g * interval '1 ms', repeat('x', 300) FROM generate_series(1, 40000) g`)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, "  first_load: {workers: 2, chunk_size: 128kB, min_table_size: 0}\n"))
	state := filepath.Join(dir, "state.db")
	var env []string

	blockOf := map[int64]uint32{} // the source is not written: ctids stay
	rows, err := src.Pool.Query(ctx, "SELECT id, (ctid::text::point)[0]::int FROM orders")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var b uint32
		if err := rows.Scan(&id, &b); err != nil {
			t.Fatal(err)
		}
		blockOf[id] = b
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	xmins := func() map[int64]string {
		m := map[int64]string{}
		rows, err := dst.Pool.Query(ctx, "SELECT id, xmin::text FROM orders_copy")
		if err != nil {
			return m // not created yet
		}
		for rows.Next() {
			var id int64
			var x string
			if err := rows.Scan(&id, &x); err != nil {
				t.Fatal(err)
			}
			m[id] = x
		}
		return m
	}
	total := count(t, src, "SELECT count(*) FROM orders")
	var prevDone func(id int64) bool // the chunks done at the last kill
	var prevX map[int64]string       // and the copy's xmins then
	check := func(when string) {
		t.Helper()
		if prevDone == nil {
			return
		}
		now, redone := xmins(), 0
		for id, x := range prevX {
			if prevDone(id) && now[id] != x {
				redone++
			}
		}
		if redone > 0 {
			t.Fatalf("%s: %d rows of chunks recorded as done were written again", when, redone)
		}
	}
	kills := 0
	for attempt := 0; attempt < 10 && kills < 3; attempt++ {
		// Kill once the copy holds a random number of rows more.
		have := len(xmins())
		at := have + 1 + rand.IntN(max(1, (total-have)/2))
		p := bin.Start(t, env, "run", "--once", "--config", cfg, "--state", state)
		killed := false
	poll:
		for {
			select {
			case <-p.Done():
				if r := p.Wait(t, time.Minute); r.Code != 0 {
					t.Fatalf("run %d: %s", attempt+1, r)
				}
				break poll
			case <-time.After(5 * time.Millisecond):
			}
			var n int
			if dst.Pool.QueryRow(ctx, "SELECT count(*) FROM orders_copy").Scan(&n) == nil && n >= at {
				p.Kill(t)
				killed = true
				break
			}
		}
		check("after kill " + strconv.Itoa(kills+1))
		if !killed {
			break
		}
		kills++
		store, err := watermark.Open(state, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		st, _, err := store.Get("orders")
		store.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.FirstLoad == nil {
			break // killed after the load, in the page loop
		}
		if st.Cursor != nil {
			t.Fatalf("kill %d: the watermark %q was written before the first load finished", kills, st.Cursor)
		}
		chunks := st.FirstLoad.Chunks
		done, rowsDone := 0, int64(0)
		for _, ch := range chunks {
			if ch.Done {
				done++
				rowsDone += ch.Rows
			}
		}
		// status says how far the unfinished load got.
		want := "orders: first load unfinished: " + strconv.Itoa(done) + " of " + strconv.Itoa(len(chunks)) + " chunks committed (" + strconv.FormatInt(rowsDone, 10) + " rows)"
		if r := bin.Run(t, env, "status", "--config", cfg, "--state", state); r.Code != 0 || !strings.Contains(r.Stdout, want) {
			t.Fatalf("status after kill %d: exit %d, want a line with %q:\n%s%s", kills, r.Code, want, r.Stdout, r.Stderr)
		}
		prevDone = func(id int64) bool {
			b := blockOf[id]
			for _, ch := range chunks {
				if ch.Done && b >= ch.From && (ch.To == 0 || b < ch.To) {
					return true
				}
			}
			return false
		}
		prevX = xmins()
	}
	if kills == 0 {
		t.Fatal("the first load always finished before it could be killed")
	}
	if r := bin.Run(t, env, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("run after %d kills: exit %d: %s", kills, r.Code, r.Stderr)
	}
	check("the last run")
	if got, want := rowsText(t, dst, "orders_copy"), rowsText(t, src, "orders"); got != want {
		t.Fatalf("after %d kills the copy differs from the source (%d and %d bytes of rows)", kills, len(got), len(want))
	}
	t.Logf("%d kills", kills)
}

// A first load shows its progress while it runs: a daemon logs "first
// load progress" every $SYNCD_PROGRESS_EVERY with the chunks done of all
// and the rows, and status (live, from the daemon) says `loading: N of M
// chunks` with the counts in --json; once the daemon is killed mid-load,
// status reads the same chunks from the state file. The load is held
// mid-way by a gate: the source's where calls a function that, inside the
// load's COPY only, waits on an advisory lock the test holds for every row
// past block 7, so the first two chunks (4 blocks each) commit and the
// others wait.
func TestFirstLoadShowsProgress(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, note text)`)
	src.Exec(t, `CREATE INDEX ON orders (updated_at, id)`)
	src.Exec(t, `INSERT INTO orders SELECT g, now() - interval '1 day' + g * interval '1 ms', repeat('x', 300) FROM generate_series(1, 1000) g`)
	src.Exec(t, `ANALYZE orders`)
	src.Exec(t, `CREATE FUNCTION load_gate(t tid) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	IF current_query() LIKE 'COPY%' AND (t::text::point)[0] >= 8 THEN
		PERFORM pg_advisory_lock_shared(4242);
		PERFORM pg_advisory_unlock_shared(4242);
	END IF;
	RETURN true;
END $$`)
	ctx := context.Background()
	gate, err := src.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Release()
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_lock(4242)`); err != nil {
		t.Fatal(err)
	}
	var blocks int
	if err := src.Pool.QueryRow(ctx, "SELECT pg_relation_size('orders') / 8192").Scan(&blocks); err != nil {
		t.Fatal(err)
	}
	chunks := (blocks + 3) / 4
	if chunks < 4 {
		t.Fatalf("%d heap blocks, want at least 13 for 4 chunks", blocks)
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", "schedule: \"@every 1h\"\n"+
		orders(t, src, dst, "  where: load_gate(ctid)\n  first_load: {workers: 2, chunk_size: 32kB, min_table_size: 0}\n"))
	state := filepath.Join(dir, "state.db")
	env := []string{"SYNCD_PROGRESS_EVERY=50ms"}
	p := bin.Start(t, env, "run", "--config", cfg, "--state", state, "--listen", "", "--log-format", "json")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon output:\n%s", p.Output)
		}
	})
	// Two chunks commit, then the load waits at the gate: the progress
	// line says so (the first ones may come before the chunks commit).
	if _, ok := p.Output.AwaitEntry(30*time.Second, "first load progress", "chunks_done", 2, "chunks", chunks); !ok {
		t.Fatalf("no progress line with 2 of %d chunks done", chunks)
	}
	rec, _ := p.Output.Find("first load progress", "chunks_done", 2)
	if rows := rec.Int("rows"); rows < 100 || rows > 300 {
		t.Errorf("progress line %v: want the rows of 2 chunks of 4 blocks (about 200)", rec)
	}
	for _, k := range []string{"rows_per_second", "eta", "rows_estimate"} {
		if _, ok := rec.Get(k); !ok {
			t.Errorf("progress line %v has no %s", rec, k)
		}
	}
	if rec.Text("eta") == "unknown" {
		t.Errorf("progress line %v: no ETA after 2 chunks", rec)
	}
	// status asks the daemon: the load, live.
	var st ops.Status
	r := bin.Run(t, nil, "status", "--config", cfg, "--state", state, "--json")
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &st) != nil || len(st.Sources) != 1 || st.Sources[0].Running == nil {
		t.Fatalf("status --json from the daemon: exit %d: %s%s", r.Code, r.Stdout, r.Stderr)
	}
	run := st.Sources[0].Running
	if run.Phase != syncer.PhaseFirstLoad || run.ChunksDone != 2 || run.Chunks != chunks || run.Rows != rec.Int("rows") || run.Estimate != 1000 || run.ETASeconds < 0 {
		t.Errorf("running = %+v; want the first load, 2 of %d chunks, %d rows, 1000 estimated, an ETA", *run, chunks, rec.Int("rows"))
	}
	want := "loading: 2 of " + strconv.Itoa(chunks) + " chunks, " + strconv.FormatInt(run.Rows, 10) + " rows, "
	if r := bin.Run(t, nil, "status", "--config", cfg, "--state", state); r.Code != 0 || !strings.Contains(r.Stdout, want) || !strings.Contains(r.Stdout, "rows/s, ETA ") {
		t.Errorf("status from the daemon: exit %d, want %q...rows/s, ETA:\n%s%s", r.Code, want, r.Stdout, r.Stderr)
	}
	// Killed mid-load, the state file keeps the chunks done: status shows
	// the load, not "never run".
	p.Signal(t, syscall.SIGKILL)
	p.Wait(t, 10*time.Second)
	want = "loading: 2 of " + strconv.Itoa(chunks) + " chunks, " + strconv.FormatInt(run.Rows, 10) + " rows, stopped"
	if r := bin.Run(t, nil, "status", "--config", cfg, "--state", state); r.Code != 0 || !strings.Contains(r.Stdout, want) || strings.Contains(r.Stdout, "never run") {
		t.Errorf("status after the kill: exit %d, want %q:\n%s%s", r.Code, want, r.Stdout, r.Stderr)
	}
	st = ops.Status{}
	r = bin.Run(t, nil, "status", "--config", cfg, "--state", state, "--json")
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &st) != nil || st.Sources[0].FirstLoad == nil ||
		st.Sources[0].FirstLoad.ChunksDone != 2 || st.Sources[0].FirstLoad.Chunks != chunks || st.Sources[0].FirstLoad.Rows != run.Rows {
		t.Errorf("status --json after the kill: exit %d: %s", r.Code, r.Stdout)
	}
	// The gate opens: the next run finishes the load.
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_unlock(4242)`); err != nil {
		t.Fatal(err)
	}
	if r := bin.Run(t, env, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 || !strings.Contains(r.Stderr, "first load done") {
		t.Fatalf("run after the kill: exit %d: %s", r.Code, r.Stderr)
	}
	if got, want := rowsText(t, dst, "orders_copy"), rowsText(t, src, "orders"); got != want {
		t.Fatalf("the copy differs from the source (%d and %d bytes of rows)", len(got), len(want))
	}
}
