package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/ops"
)

// statusOf runs `syncd status --json` on a state file no daemon holds.
func statusOf(t *testing.T, cfg, state string) ops.Status {
	t.Helper()
	r := syncd.Run(t, nil, "status", "--config", cfg, "--state", state, "--json")
	if r.Code != 0 {
		t.Fatalf("syncd status: exit %d: %s", r.Code, r.Stderr)
	}
	var st ops.Status
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		t.Fatalf("status JSON: %v: %s", err, r.Stdout)
	}
	return st
}

// SIGTERM in the middle of a long run: the page in flight commits, its
// watermark is written, the process exits 0 quickly, and the copy holds
// exactly the rows up to the watermark. A restart continues from there.
func TestSIGTERMMidRunLeavesCopyAndWatermarkConsistent(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 3000)
	// 60 pages of 50 rows at 2 ms a row: about 6 s for the whole run.
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "page_size: 50\nwhere: slow(2)\n^schedule: \"@every 1h\"")
	state := filepath.Join(t.TempDir(), "state.db")
	p := syncd.Start(t, nil, "run", "--config", path, "--state", state, "--listen", testutil.FreeAddr(t), "--log-level", "debug")
	testutil.Eventually(t, 20*time.Second, "5 pages applied", func() bool { return p.Output.Count("page applied") >= 5 })
	sent := time.Now()
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 10*time.Second).Code; code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0; output:\n%s", code, p.Output.String())
	}
	if d := time.Since(sent); d > 3*time.Second {
		t.Errorf("exit took %s after SIGTERM; a page takes about 100 ms", d)
	}
	if !strings.Contains(p.Output.String(), "run stopped before catching up") {
		t.Errorf("no log line says the run stopped:\n%s", p.Output.String())
	}

	st := statusOf(t, path, state)
	cur := st.Sources[0].Cursor
	if len(cur) != 2 {
		t.Fatalf("no watermark after the stop: %+v", st)
	}
	copied := f.count(t, "copy")
	var upTo, diff int
	ctx := context.Background()
	if err := f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM src WHERE (updated_at, id) <= ($1::timestamptz, $2::bigint)`, cur[0], cur[1]).Scan(&upTo); err != nil {
		t.Fatal(err)
	}
	if err := f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT * FROM src WHERE (updated_at, id) <= ($1::timestamptz, $2::bigint)) s
FULL JOIN copy c ON c.id = s.id WHERE (s.id, s.updated_at, s.v) IS DISTINCT FROM (c.id, c.updated_at, c.v)`, cur[0], cur[1]).Scan(&diff); err != nil {
		t.Fatal(err)
	}
	if copied == 0 || copied >= 3000 || copied%50 != 0 {
		t.Errorf("copy has %d rows; want whole pages of 50 and fewer than 3000 (stopped mid-run)", copied)
	}
	if upTo != copied || diff != 0 {
		t.Errorf("watermark %v covers %d source rows, copy has %d, %d rows differ: copy and watermark disagree", cur, upTo, copied, diff)
	}

	// The restart continues from the watermark and catches up.
	f.catchUp(t, path, state)
}

// SIGKILL at random moments, under concurrent inserts and updates, then a
// restart: the copy equals the source row by row (nothing lost, nothing
// duplicated: the copy's primary key is the source's).
func TestSIGKILLAtRandomMomentsLosesNothing(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 4000)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "page_size: 50\nwhere: slow(1)\n^schedule: \"@every 1s\"")
	state := filepath.Join(t.TempDir(), "state.db")

	stopWriter := f.writer(t, "src", 4001)
	for i := 0; i < 6; i++ {
		p := syncd.Start(t, nil, "run", "--config", path, "--state", state, "--listen", testutil.FreeAddr(t), "--log-level", "debug")
		// The moment is random, but always after the process applied a
		// page or more: under load a kill at a random time could land
		// before anything was copied.
		pages := 1 + rand.IntN(3)
		testutil.EventuallyState(t, 30*time.Second, fmt.Sprintf("kill %d: %d pages applied", i, pages), func() (bool, string) {
			if p.Output.Count("page applied") >= pages {
				return true, ""
			}
			return false, "sessions on the database: " + f.sessions(t)
		})
		// A random moment within the next page (about 50 ms): the sleep is
		// the randomness under test, not a wait for something.
		time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
		p.Signal(t, syscall.SIGKILL)
		if r := p.Wait(t, 10*time.Second); r.Signal != syscall.SIGKILL {
			t.Fatalf("kill %d: %s; the process ended before the kill (it had more than 3000 rows to copy)", i, r)
		}
	}
	stopWriter()
	if c := f.count(t, "copy"); c == 0 || c >= f.count(t, "src") {
		t.Fatalf("the kills did not land mid-sync: copy has %d rows of %d", c, f.count(t, "src"))
	}
	f.catchUp(t, path, state)
}

// A second signal forces the exit without waiting for the page in flight;
// what committed is still consistent with the watermark.
func TestSecondSignalForcesExit(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 1000)
	// Pages of 50 rows at 20 ms a row: a second per page.
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "page_size: 50\nwhere: slow(20)\n^schedule: \"@every 1h\"")
	state := filepath.Join(t.TempDir(), "state.db")
	p := syncd.Start(t, nil, "run", "--config", path, "--state", state, "--listen", testutil.FreeAddr(t), "--log-level", "debug")
	testutil.Eventually(t, 20*time.Second, "a page applied", func() bool { return p.Output.Count("page applied") >= 1 })
	p.Signal(t, syscall.SIGTERM)
	testutil.Eventually(t, 10*time.Second, "the graceful stop to begin", func() bool {
		return p.Output.Count("stopping: no new page is taken; pages in flight commit and write their watermark") == 1
	})
	sent := time.Now()
	p.Signal(t, syscall.SIGINT)
	code := p.Wait(t, 10*time.Second).Code
	if code != 1 || time.Since(sent) > 700*time.Millisecond {
		t.Errorf("exit %d %s after the second signal; want 1 at once", code, time.Since(sent))
	}
	if !strings.Contains(p.Output.String(), "stop forced") {
		t.Errorf("no line says the stop was forced:\n%s", p.Output.String())
	}
	st := statusOf(t, path, state)
	cur := st.Sources[0].Cursor
	var upTo int
	if err := f.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM src WHERE (updated_at, id) <= ($1::timestamptz, $2::bigint)`, cur[0], cur[1]).Scan(&upTo); err != nil {
		t.Fatal(err)
	}
	if c := f.count(t, "copy"); c < upTo || c%50 != 0 {
		t.Errorf("copy has %d rows but the watermark covers %d: the watermark got ahead of the copy, or a page was cut", c, upTo)
	}
}

// A page that outlasts --shutdown-timeout: the process exits 1 at the
// timeout with a line that says so, and the page that had not committed is
// simply read again by the next run.
func TestShutdownTimeout(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 200)
	// Pages of 50 rows at 100 ms a row: 5 s per page, well past the 1 s
	// timeout even on a loaded machine.
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "page_size: 50\nwhere: slow(100)\n^schedule: \"@every 1h\"")
	state := filepath.Join(t.TempDir(), "state.db")
	p := syncd.Start(t, nil, "run", "--config", path, "--state", state, "--listen", testutil.FreeAddr(t), "--shutdown-timeout", "1s")
	testutil.Eventually(t, 20*time.Second, "the first page's read in flight", func() bool {
		return f.count(t, "pg_stat_activity WHERE datname = current_database() AND application_name = 'syncd' AND state = 'active' AND query LIKE '%slow(100)%LIMIT%' AND query NOT LIKE 'EXPLAIN%'") > 0
	})
	sent := time.Now()
	p.Signal(t, syscall.SIGTERM)
	code := p.Wait(t, 10*time.Second).Code
	if took := time.Since(sent); code != 1 || took < time.Second || took > 4*time.Second {
		t.Errorf("exit %d after %s, want 1 after about 1s", code, took)
	}
	if !strings.Contains(p.Output.String(), "shutdown timed out after 1s; still going: orders (page in flight);") {
		t.Errorf("no line says the shutdown timed out:\n%s", p.Output.String())
	}
	f.catchUp(t, path, state)
}
