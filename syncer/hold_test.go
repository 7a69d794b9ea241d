package syncer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/cli"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/ops"
	"github.com/syncd/syncd/syncer"
)

// holdWarn is the runs' Options.HoldWarnAfter in these tests: the default,
// which `syncd status` also uses to name a holder.
const holdWarn = syncer.DefaultHoldWarnAfter

func holdLines(logs string) int {
	return strings.Count(logs, "bound held back by a transaction open since")
}

// bothModes runs test with fresh sessions (run --once) and with the
// daemon's pooled sessions and schema cache, where every run after the
// first reads its bound in the round trip of the table's fingerprint.
func bothModes(t *testing.T, test func(t *testing.T, f *fixture)) {
	for _, mode := range []string{"fresh", "pooled"} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t)
			if mode == "pooled" {
				f.pooled(t)
			}
			test(t, f)
		})
	}
}

func TestOpenTransactionHoldsBoundAndCatchesUp(t *testing.T) {
	bothModes(t, testOpenTransactionHoldsBound)
}

func testOpenTransactionHoldsBound(t *testing.T, f *fixture) {
	f.holdWarn = holdWarn
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, now() - interval '10 minutes' + g * interval '1 ms', 'old' FROM generate_series(1, 10) g`)
	c := f.config(t, f.db.URL, "lookback: 0s")

	// A report transaction stays open for the whole test; it never writes.
	open := begin(t, f.db.URL)
	open.exec(t, "SELECT count(*) FROM src")
	f.db.Exec(t, `INSERT INTO src (id, v) SELECT g, 'after its start' FROM generate_series(11, 15) g`)
	f.db.Exec(t, fmt.Sprintf(`INSERT INTO src (id, updated_at, v) SELECT g, '%s'::timestamptz - interval '1 minute' + g * interval '1 ms', 'before its start' FROM generate_series(16, 18) g`, open.since.Format(time.RFC3339Nano)))
	// The transaction's age is what the warning is about, and status
	// names a holder only past the same default threshold, a constant:
	// wait until the source's clock says it is that old.
	f.clockPast(t, open.since.Add(holdWarn))

	res := f.run(t, c)
	if res.Holder.PID != open.pid || !res.Holder.Since.Equal(open.since) || !res.Bound.Equal(open.since) {
		t.Fatalf("result: holder pid %d since %v, bound %v; want pid %d and bound = its start %v", res.Holder.PID, res.Holder.Since, res.Bound, open.pid, open.since)
	}
	if res.HeldBack < holdWarn {
		t.Errorf("held back %s, want at least %s", res.HeldBack, holdWarn)
	}
	if d := f.diff(t); !slices.Equal(d, []int{11, 12, 13, 14, 15}) {
		t.Fatalf("while held: ids that differ = %v, want exactly the rows stamped after the open transaction began [11..15]", d)
	}
	logs := f.logs.String()
	if holdLines(logs) != 1 || !strings.Contains(logs, fmt.Sprintf("pid=%d", open.pid)) || !strings.Contains(logs, "level=WARN") {
		t.Fatalf("want one warning naming pid %d, log:\n%s", open.pid, logs)
	}

	// Rows older than its start keep flowing while it stays open.
	f.db.Exec(t, fmt.Sprintf(`INSERT INTO src (id, updated_at, v) SELECT g, '%s'::timestamptz - interval '30 seconds' + g * interval '1 ms', 'older, later' FROM generate_series(19, 20) g`, open.since.Format(time.RFC3339Nano)))
	res = f.run(t, c)
	// The same transaction holds it again: warned about once per cause,
	// not once per run.
	if res.Rows != 2 || holdLines(f.logs.String()) != 1 {
		t.Fatalf("second held run read %d rows (want 2) and logged %d hold lines (want one for this transaction, 1)", res.Rows, holdLines(f.logs.String()))
	}
	if d := f.diff(t); !slices.Equal(d, []int{11, 12, 13, 14, 15}) {
		t.Fatalf("second held run: ids that differ = %v, want [11..15]", d)
	}

	// syncd status shows the bound, its holder and the newest row's age.
	st := status(t, f, c)
	if st.Bound != open.since.Format("2006-01-02T15:04:05.000000Z07:00") || st.BoundHolderPID != open.pid || st.NewestRowAgeSeconds == nil || *st.NewestRowAgeSeconds < 30 {
		t.Fatalf("status while held: %+v; want bound %v, holder pid %d, newest row age >= 30 s", st, open.since, open.pid)
	}
	text := statusText(t, f, c)
	if !strings.Contains(text, fmt.Sprintf("bound held back by pid %d", open.pid)) {
		t.Fatalf("status text does not name the holder:\n%s", text)
	}

	open.exec(t, "COMMIT")
	res = f.run(t, c)
	if res.Holder.PID != 0 || res.Rows != 5 {
		t.Fatalf("after it ended: holder pid %d, %d rows; want none and the 5 held rows", res.Holder.PID, res.Rows)
	}
	f.assertSame(t)
	if st := status(t, f, c); st.BoundHolderPID != 0 || st.Bound == "" || *st.NewestRowAgeSeconds > 60 {
		t.Fatalf("status after it ended: %+v; want no holder, a bound and a small newest row age", st)
	}
	if strings.Contains(statusText(t, f, c), "held back") {
		t.Fatal("status text still reports a holder after it ended")
	}
}

func status(t *testing.T, f *fixture, c *config.Config) ops.SourceStatus {
	t.Helper()
	var doc ops.Status
	if err := json.Unmarshal([]byte(printStatus(t, f, c, true)), &doc); err != nil {
		t.Fatalf("status --json: %v", err)
	}
	return doc.Sources[0]
}

func statusText(t *testing.T, f *fixture, c *config.Config) string {
	t.Helper()
	return printStatus(t, f, c, false)
}

// printStatus prints what `syncd status` (--json) prints for one source.
func printStatus(t *testing.T, f *fixture, c *config.Config, asJSON bool) string {
	t.Helper()
	st, err := ops.BuildStatus(f.store, nil, []*config.Config{c})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := cli.PrintStatus(&cli.Env{Stdout: &out}, st, asJSON); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestBoundWritersIgnoresReaders(t *testing.T) { bothModes(t, testBoundWritersIgnoresReaders) }

func testBoundWritersIgnoresReaders(t *testing.T, f *fixture) {
	c := f.config(t, f.db.URL, "lookback: 0s", "bound: writers")
	f.db.Exec(t, `INSERT INTO src (id, v) SELECT g, 'first' FROM generate_series(1, 5) g`)

	reader := begin(t, f.db.URL)
	reader.exec(t, "SELECT count(*) FROM src")
	f.db.Exec(t, `INSERT INTO src (id, v) SELECT g, 'after the reader began' FROM generate_series(6, 10) g`)
	res := f.run(t, c)
	if res.Holder.PID != 0 || res.Rows != 10 {
		t.Fatalf("read-only transaction open: holder pid %d, %d rows; bound: writers must ignore it and read all 10", res.Holder.PID, res.Rows)
	}
	f.assertSame(t)

	writer := begin(t, f.db.URL)
	writer.exec(t, `UPDATE src SET v = 'writer', updated_at = now() WHERE id = 1`)
	f.db.Exec(t, `INSERT INTO src (id, v) SELECT g, 'after the writer began' FROM generate_series(11, 12) g`)
	res = f.run(t, c)
	if res.Holder.PID != writer.pid || res.Rows != 0 {
		t.Fatalf("writing transaction open: holder pid %d, %d rows; want pid %d and nothing read", res.Holder.PID, res.Rows, writer.pid)
	}
	if d := f.diff(t); !slices.Equal(d, []int{11, 12}) {
		t.Fatalf("ids that differ = %v, want the rows stamped after the writer began [11 12]", d)
	}

	// The old reader now writes: the bound drops below the watermark. The
	// run reads nothing and the watermark stays where it was.
	before := f.watermark(t)
	reader.exec(t, `UPDATE src SET v = 'reader wrote', updated_at = clock_timestamp() WHERE id = 2`)
	res = f.run(t, c)
	if res.Holder.PID != reader.pid || res.Rows != 0 || !slices.Equal(f.watermark(t), before) {
		t.Fatalf("bound below the watermark: holder pid %d, %d rows, watermark %v -> %v; want pid %d, nothing read, watermark unchanged", res.Holder.PID, res.Rows, before, f.watermark(t), reader.pid)
	}
	// The same with a lookback window: rows behind the watermark are
	// re-read, and the watermark still does not move back.
	res = f.run(t, f.config(t, f.db.URL, "lookback: 5s", "bound: writers"))
	if res.Holder.PID != reader.pid || !slices.Equal(f.watermark(t), before) {
		t.Fatalf("bound below the watermark with lookback: holder pid %d, watermark %v -> %v; want pid %d and the watermark unchanged", res.Holder.PID, before, f.watermark(t), reader.pid)
	}
	writer.exec(t, "COMMIT")
	reader.exec(t, "COMMIT")
	f.run(t, c)
	f.assertSame(t)
}

func TestRoleWithoutStatsPrivilege(t *testing.T) {
	f := newFixture(t)
	role := "syncd_blind_" + strings.TrimPrefix(f.db.Name, "syncd_test_")
	f.db.Exec(t, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() {
		ctx := context.Background()
		// Revoke what the role holds here, then drop it (roles are cluster-wide).
		if _, err := f.db.Pool.Exec(ctx, "DROP OWNED BY "+role); err != nil {
			t.Errorf("drop owned by %s: %v", role, err)
		}
		if _, err := f.db.Pool.Exec(ctx, "DROP ROLE "+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	f.db.Exec(t, "GRANT SELECT ON src TO "+role)
	u, err := url.Parse(f.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	c := f.config(t, u.String(), "lookback: 5s")
	f.db.Exec(t, `INSERT INTO src (id, v) SELECT g, 'first' FROM generate_series(1, 5) g`)
	f.run(t, c)

	// A superuser session's open transaction is invisible to this role.
	late := begin(t, f.db.URL)
	late.exec(t, `UPDATE src SET v = 'late', updated_at = now() WHERE id = 1`)
	f.clockPast(t, late.since) // the rows committed next are stamped after its start
	f.db.Exec(t, `UPDATE src SET v = 'early', updated_at = now() WHERE id IN (2, 3)`)
	res := f.run(t, c)
	if !res.BoundBlind || res.Holder.PID != 0 {
		t.Fatalf("blind role: blind %v, holder pid %d; want blind and no holder", res.BoundBlind, res.Holder.PID)
	}
	// Without the bound the run read past the open transaction's start.
	if got := f.rows(t, "dst")[2]; !strings.HasSuffix(got, "|early") {
		t.Fatalf("blind role: copy of row 2 = %q, want the committed update read past the invisible open transaction", got)
	}
	late.exec(t, "COMMIT")
	f.run(t, c)
	// Lookback (5 s) re-read the window and found the late commit.
	f.assertSame(t)

	logs := f.logs.String()
	want := "GRANT pg_read_all_stats TO " + role
	if strings.Count(logs, want) != 1 || !strings.Contains(logs, "cannot see other roles' transactions") {
		t.Fatalf("want the privilege warning exactly once over three runs, log:\n%s", logs)
	}

	// syncd validate prints the same warning and still succeeds.
	var out, errOut bytes.Buffer
	if err := cli.Run(context.Background(), &cli.Env{Stdout: &out, Stderr: &errOut}, []string{"validate", "--config", c.File}); err != nil {
		t.Fatalf("validate: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), c.Name+": warning: source role \""+role+"\" cannot see other roles' transactions") || !strings.Contains(out.String(), want) {
		t.Fatalf("validate output lacks the privilege warning:\n%s", out.String())
	}

	// A superuser source has no such warning.
	f.config(t, f.db.URL, "lookback: 5s")
	out.Reset()
	if err := cli.Run(context.Background(), &cli.Env{Stdout: &out, Stderr: &errOut}, []string{"validate", "--config", c.File}); err != nil {
		t.Fatalf("validate: %v\n%s", err, errOut.String())
	}
	if strings.Contains(out.String(), "pg_read_all_stats") {
		t.Fatalf("validate warns for a superuser source:\n%s", out.String())
	}
}

// A transaction that failed inside a savepoint is not over: it can roll
// back to the savepoint and commit the rows it wrote before, stamped at its
// start. It holds the bound like any open transaction, and its row is
// copied by the run after it commits.
func TestSavepointFailureHoldsBound(t *testing.T) {
	f := newFixture(t)
	c := f.config(t, f.db.URL, "lookback: 0s")
	w := begin(t, f.db.URL)
	w.exec(t, `INSERT INTO src (id, v) VALUES (100, 'written before the failure')`)
	w.exec(t, `SAVEPOINT s`)
	if _, err := w.conn.Exec(context.Background(), "SELECT 1/0"); err == nil {
		t.Fatal("division by zero succeeded")
	}
	f.db.Exec(t, `INSERT INTO src (id, v) SELECT g, 'after it began' FROM generate_series(1, 3) g`)
	res := f.run(t, c)
	if res.Holder.PID != w.pid || res.Rows != 0 {
		t.Fatalf("transaction failed inside a savepoint: holder pid %d, %d rows; want pid %d and 0 rows", res.Holder.PID, res.Rows, w.pid)
	}
	w.exec(t, `ROLLBACK TO SAVEPOINT s`)
	w.exec(t, `COMMIT`)
	f.run(t, c)
	f.assertSame(t)
}

// A transaction that failed can only roll back: it holds nothing back.
func TestAbortedTransactionDoesNotHoldBound(t *testing.T) {
	f := newFixture(t)
	c := f.config(t, f.db.URL, "lookback: 0s")
	failed := begin(t, f.db.URL)
	failed.exec(t, `UPDATE src SET v = 'never' WHERE id = 1`)
	if _, err := failed.conn.Exec(context.Background(), "SELECT 1/0"); err == nil {
		t.Fatal("division by zero succeeded")
	}
	f.db.Exec(t, `INSERT INTO src (id, v) SELECT g, 'after it began' FROM generate_series(1, 3) g`)
	res := f.run(t, c)
	if res.Holder.PID != 0 || res.Rows != 3 {
		t.Fatalf("aborted transaction open: holder pid %d, %d rows; want none and 3 rows", res.Holder.PID, res.Rows)
	}
	f.assertSame(t)
}
