package syncer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
)

// seqConfig writes a source of table public.seq with cursor [id] (a
// bigserial) into the fixture's copy public.dst.
func (f *fixture) seqConfig(t *testing.T, keys ...string) *config.Config {
	t.Helper()
	return f.load(t, "seq.yaml", "public.seq", "[id]", f.db.URL, keys)
}

// tableRows is every row of table as text, in id order.
func (f *fixture) tableRows(t *testing.T, table string) string {
	t.Helper()
	var s string
	q := "SELECT coalesce(string_agg(t::text, E'\\n' ORDER BY id), '') FROM " + table + " t"
	if err := f.db.Pool.QueryRow(context.Background(), q).Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return s
}

func (f *fixture) assertCopyOf(t *testing.T, table string) {
	t.Helper()
	if src, dst := f.tableRows(t, table), f.tableRows(t, "dst"); src != dst {
		t.Fatalf("copy differs from %s\nsource:\n%s\ncopy:\n%s\nlog:\n%s", table, src, dst, f.logs)
	}
}

func seqHoldLines(logs string) int {
	return strings.Count(logs, "can still commit rows below")
}

// A transaction takes id N and stays open while another takes N+1 and
// commits: a run must not move the watermark past N until it ends.
func TestSequenceCursorLateCommit(t *testing.T) {
	f := newFixture(t)
	f.aheadWait = 300 * time.Millisecond
	f.db.Exec(t, `CREATE TABLE seq (id bigserial PRIMARY KEY, v text NOT NULL)`)
	f.db.Exec(t, `INSERT INTO seq (v) SELECT 'first ' || g FROM generate_series(1, 5) g`)
	c := f.seqConfig(t)
	f.run(t, c)
	f.assertCopyOf(t, "seq")

	late := begin(t, f.db.URL)
	late.exec(t, `INSERT INTO seq (v) VALUES ('late')`)  // id 6
	f.db.Exec(t, `INSERT INTO seq (v) VALUES ('early')`) // id 7, committed
	for i := 0; i < 2; i++ {
		res := f.run(t, c)
		if res.Rows != 0 || res.Holder.PID != late.pid {
			t.Fatalf("run %d while id 6 is uncommitted: %d rows, holder pid %d; want 0 rows and holder pid %d\nlog:\n%s", i+1, res.Rows, res.Holder.PID, late.pid, f.logs)
		}
	}
	if w := f.watermark(t); len(w) != 1 || w[0] != "5" {
		t.Fatalf("watermark %v while id 6 is uncommitted, want [5]", w)
	}
	if n := seqHoldLines(f.logs.String()); n != 1 || !strings.Contains(f.logs.String(), fmt.Sprintf("pid=%d", late.pid)) {
		t.Fatalf("want one warning naming pid %d over two held runs, got %d:\n%s", late.pid, n, f.logs)
	}
	late.exec(t, "COMMIT")
	res := f.run(t, c)
	if res.Rows != 2 || res.Holder.PID != 0 {
		t.Fatalf("after the commit: %d rows, holder pid %d; want ids 6 and 7 and no holder", res.Rows, res.Holder.PID)
	}
	f.assertCopyOf(t, "seq")
}

// A writer that ends while the run waits for it does not hold the run: the
// run reads up to the largest committed id.
func TestSequenceCursorWaitsForOpenWriter(t *testing.T) {
	f := newFixture(t)
	f.aheadWait = 5 * time.Second
	f.db.Exec(t, `CREATE TABLE seq (id bigserial PRIMARY KEY, v text NOT NULL)`)
	c := f.seqConfig(t)
	// nextval() before the INSERT, in the same transaction: the lock on the
	// sequence, not yet one on the table, marks it.
	late := begin(t, f.db.URL)
	late.exec(t, `SELECT nextval('seq_id_seq')`) // 1
	f.db.Exec(t, `INSERT INTO seq (v) VALUES ('early')`)
	done := make(chan error, 1)
	go func() {
		// The writer's pace, part of the scenario: it commits half a second
		// in, while the run waits for it (up to 5 s).
		time.Sleep(500 * time.Millisecond)
		_, err := late.conn.Exec(context.Background(), `INSERT INTO seq (id, v) VALUES (1, 'late'); COMMIT`)
		done <- err
	}()
	res := f.run(t, c)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if res.Rows != 2 || res.Holder.PID != 0 {
		t.Fatalf("run that waited for the writer: %d rows, holder pid %d; want both rows and no holder\nlog:\n%s", res.Rows, res.Holder.PID, f.logs)
	}
	f.assertCopyOf(t, "seq")
}

// The same with the transaction holding id N prepared (two-phase commit):
// it leaves pg_stat_activity, but not pg_locks. The shared server has
// max_prepared_transactions = 0, so this runs on a throwaway cluster.
func TestPreparedTransactionHoldsBound(t *testing.T) {
	ctx := context.Background()
	cl, err := pgtest.StartCluster(ctx, "max_prepared_transactions = 10")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Destroy(context.Background()) })

	t.Run("sequence", func(t *testing.T) {
		f := clusterFixture(t, cl)
		f.aheadWait = 300 * time.Millisecond
		f.db.Exec(t, `CREATE TABLE seq (id bigserial PRIMARY KEY, v text NOT NULL)`)
		f.db.Exec(t, `INSERT INTO seq (v) SELECT 'first ' || g FROM generate_series(1, 5) g`)
		c := f.seqConfig(t)
		f.run(t, c)
		gid := prepare(t, f, `INSERT INTO seq (v) VALUES ('late')`) // id 6
		f.db.Exec(t, `INSERT INTO seq (v) VALUES ('early')`)        // id 7
		assertPreparedHold(t, f, c, gid)
		f.db.Exec(t, "COMMIT PREPARED '"+gid+"'")
		if res := f.run(t, c); res.Rows != 2 || res.Holder.PID != 0 {
			t.Fatalf("after COMMIT PREPARED: %d rows, holder %d; want ids 6 and 7, no holder", res.Rows, res.Holder.PID)
		}
		f.assertCopyOf(t, "seq")
	})

	t.Run("timestamp", func(t *testing.T) {
		f := clusterFixture(t, cl)
		f.aheadWait = 300 * time.Millisecond
		f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, now() - interval '1 minute' + g * interval '1 ms', 'v' || g FROM generate_series(1, 20) g`)
		c := f.config(t, f.db.URL, "lookback: 0s")
		f.run(t, c)
		gid := prepare(t, f, `UPDATE src SET v = 'late', updated_at = DEFAULT WHERE id = 1; INSERT INTO src (id, v) VALUES (100, 'late insert')`)
		f.db.Exec(t, `UPDATE src SET v = 'early', updated_at = DEFAULT WHERE id IN (2, 3)`)
		assertPreparedHold(t, f, c, gid)
		st := status(t, f, c)
		if st.BoundHolderPID != -1 || st.BoundHolderApp != gid || st.BoundHolderSince == "" {
			t.Fatalf("status --json while prepared: holder pid %d application %q since %q; want -1, %q and the time it was prepared", st.BoundHolderPID, st.BoundHolderApp, st.BoundHolderSince, gid)
		}
		if text := statusText(t, f, c); !strings.Contains(text, fmt.Sprintf("prepared transaction %q", gid)) {
			t.Fatalf("status does not name the prepared transaction:\n%s", text)
		}
		f.db.Exec(t, "COMMIT PREPARED '"+gid+"'")
		if res := f.run(t, c); res.Holder.PID != 0 || res.Rows != 4 {
			t.Fatalf("after COMMIT PREPARED: %d rows, holder %d; want rows 1, 2, 3, 100 and no holder", res.Rows, res.Holder.PID)
		}
		f.assertSame(t)
	})
}

// assertPreparedHold runs twice while gid is prepared: nothing past the
// watermark is read, the watermark stays, the holder is the prepared
// transaction, and one warning names it.
func assertPreparedHold(t *testing.T, f *fixture, c *config.Config, gid string) {
	t.Helper()
	before := f.watermark(t)
	st, _, err := f.store.Get(f.name)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		res := f.run(t, c)
		if res.Rows != 0 || res.Holder.PID != -1 || res.Holder.App != gid {
			t.Fatalf("run %d while %s is prepared: %d rows, holder %+v; want 0 rows and the prepared transaction\nlog:\n%s", i+1, gid, res.Rows, res.Holder, f.logs)
		}
	}
	if after := f.watermark(t); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("watermark moved from %v to %v while %s was prepared", before, after, gid)
	}
	// Nothing past the watermark was read: the run did not catch up.
	if now, _, err := f.store.Get(f.name); err != nil || !now.CaughtUp.Equal(st.CaughtUp) {
		t.Fatalf("caught-up point moved from %v to %v (%v) while %s was prepared", st.CaughtUp, now.CaughtUp, err, gid)
	}
	logs := f.logs.String()
	if n := strings.Count(logs, "a prepared transaction holds a write lock"); n != 1 || !strings.Contains(logs, "gid="+gid) {
		t.Fatalf("want one warning naming gid %s over two runs, got %d:\n%s", gid, n, logs)
	}
}

// prepare runs sql in a transaction and prepares it; it is rolled back at
// the end of the test if still prepared.
func prepare(t *testing.T, f *fixture, sql string) string {
	t.Helper()
	gid := "syncd_test_" + f.db.Name
	s := begin(t, f.db.URL)
	s.exec(t, sql)
	s.exec(t, "PREPARE TRANSACTION '"+gid+"'")
	t.Cleanup(func() {
		_, _ = f.db.Pool.Exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'")
	})
	return gid
}

// clusterFixture is a fixture whose database lives on cl.
func clusterFixture(t *testing.T, cl *pgtest.Cluster) *fixture {
	t.Helper()
	return newFixtureOn(t, pgtest.NewDBOn(t, cl.URL()), "timestamptz NOT NULL DEFAULT now()")
}

// An id set by hand far above the sequence must not carry the watermark
// past the ids the sequence has yet to hand out.
func TestSequenceCursorExplicitIdAhead(t *testing.T) {
	f := newFixture(t)
	f.db.Exec(t, `CREATE TABLE seq (id bigserial PRIMARY KEY, v text NOT NULL)`)
	f.db.Exec(t, `INSERT INTO seq (v) SELECT 'first ' || g FROM generate_series(1, 5) g`)
	f.db.Exec(t, `INSERT INTO seq (id, v) VALUES (1000, 'set by hand')`)
	c := f.seqConfig(t)
	f.run(t, c)
	f.db.Exec(t, `INSERT INTO seq (v) VALUES ('six'), ('seven')`)
	f.run(t, c)
	// Every id the sequence handed out is copied; 1000 waits until the
	// sequence reaches it.
	f.assertCopyOf(t, "(SELECT * FROM seq WHERE id < 1000)")
	if w := f.watermark(t); len(w) != 1 || w[0] != "7" {
		t.Fatalf("watermark %v, want [7]", w)
	}
}
