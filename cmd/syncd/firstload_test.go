package main_test

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
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
	src.Exec(t, `INSERT INTO orders SELECT g, now() - interval '1 day' + g * interval '1 ms', repeat('x', 300) FROM generate_series(1, 40000) g`)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, "  first_load: {workers: 2, chunk_size: 128kB, min_table_size: 0}\n"))
	state := filepath.Join(dir, "state.db")
	var env []string
	ctx := context.Background()

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
	run := func() *exec.Cmd {
		cmd := exec.Command(binary, "run", "--once", "--config", cfg, "--state", state)
		cmd.Env = append(os.Environ(), env...)
		return cmd
	}
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
		cmd := run()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		killed := false
	poll:
		for {
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("run %d: %v", attempt+1, err)
				}
				break poll
			case <-time.After(5 * time.Millisecond):
			}
			var n int
			if dst.Pool.QueryRow(ctx, "SELECT count(*) FROM orders_copy").Scan(&n) == nil && n >= at {
				cmd.Process.Kill()
				<-exited
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
		if r := syncd(t, env, "status", "--config", cfg, "--state", state); r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("status after kill %d: exit %d, want a line with %q:\n%s%s", kills, r.code, want, r.stdout, r.stderr)
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
	if r := syncd(t, env, "run", "--once", "--config", cfg, "--state", state); r.code != 0 {
		t.Fatalf("run after %d kills: exit %d: %s", kills, r.code, r.stderr)
	}
	check("the last run")
	if got, want := rowsText(t, dst, "orders_copy"), rowsText(t, src, "orders"); got != want {
		t.Fatalf("after %d kills the copy differs from the source (%d and %d bytes of rows)", kills, len(got), len(want))
	}
	t.Logf("%d kills", kills)
}
