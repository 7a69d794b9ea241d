package syncer_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// rowsRead is how many rows of public.src the server has read so far (by
// sequential and index scans), once every syncd session of the database
// has ended and so flushed its counters.
func (f *fixture) rowsRead(t *testing.T) int64 {
	t.Helper()
	ctx := context.Background()
	// The test's own reads (assertSame) are flushed by its sessions at
	// their next idle moment once forced.
	for _, c := range f.db.Pool.AcquireAllIdle(ctx) {
		_, err := c.Exec(ctx, "SELECT pg_stat_force_next_flush()")
		c.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	conn, err := f.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// A backend flushes its counters before it leaves pg_stat_activity.
	testutil.Eventually(t, 10*time.Second, "the run's syncd sessions to end", func() bool {
		var open int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, pgutil.AppName).Scan(&open); err != nil {
			t.Fatal(err)
		}
		return open == 0
	})
	var n int64
	if _, err := conn.Exec(ctx, "SELECT pg_stat_force_next_flush(), pg_stat_clear_snapshot()"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables WHERE relid = 'public.src'::regclass`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// runErr runs once and returns the run's error.
func (f *fixture) runErr(o syncer.Options) (syncer.Result, error) {
	o.Store = f.store
	o.Logger = slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return syncer.Run(context.Background(), o)
}

func (f *fixture) state(t *testing.T) watermark.State {
	t.Helper()
	st, _, err := f.store.Get(f.name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A bulk load stamps 40% of the table with one timestamp, the newest one:
// the lookback window behind the watermark holds all of them. A run when
// nothing has changed since reads (almost) none of them, counted by the
// server's own tuple counters; a state file without the stored bound (an
// older syncd) still re-reads the window once, then stops.
func TestIdleRunAfterBulkLoadReadsNothing(t *testing.T) {
	const total, bulk = 20000, 8000
	f := newFixture(t)
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, now() - interval '1 hour' + g * interval '1 ms', 'v' || g FROM generate_series(1, $1::int) g`, total-bulk)
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, now() - interval '1 minute', 'bulk' || g FROM generate_series($1::int, $2::int) g`, total-bulk+1, total)
	f.db.Exec(t, `ANALYZE src`)
	c := f.config(t, f.db.URL, "lookback: 5s", "page_size: 1000")
	if res := f.run(t, c); res.Rows != total {
		t.Fatalf("first run read %d rows, want %d", res.Rows, total)
	}
	f.assertSame(t)

	before := f.rowsRead(t)
	res := f.run(t, c)
	read := f.rowsRead(t) - before
	if res.Rows != 0 || read >= total/100 {
		t.Fatalf("idle run: %d rows in pages, the server read %d rows of src; want 0 and fewer than %d (1%%): the %d rows sharing the watermark's timestamp are older than the last run's bound minus lookback", res.Rows, read, total/100, bulk)
	}
	t.Logf("idle run read %d of %d rows (%d sharing the newest timestamp)", read, total, bulk)

	// A state written by a syncd that did not store the bound re-reads the
	// window behind the watermark as before, once.
	if err := f.store.Update(f.name, func(st *watermark.State) error { st.LookbackBound = ""; return nil }); err != nil {
		t.Fatal(err)
	}
	if res := f.run(t, c); res.Rows != bulk {
		t.Fatalf("run on a state without the stored bound read %d rows, want the %d rows of the lookback window", res.Rows, bulk)
	}
	before = f.rowsRead(t)
	if res := f.run(t, c); res.Rows != 0 {
		t.Fatalf("idle run after that read %d rows in pages, want 0", res.Rows)
	}
	if read := f.rowsRead(t) - before; read >= total/100 {
		t.Fatalf("idle run after that: the server read %d rows of src, want fewer than %d", read, total/100)
	}

	// A later change is copied by the next run as usual.
	f.db.Exec(t, `UPDATE src SET v = 'changed', updated_at = now() WHERE id IN (1, 19000)`)
	if res := f.run(t, c); res.Rows != 2 {
		t.Fatalf("run after 2 updates read %d rows, want 2", res.Rows)
	}
	f.assertSame(t)
}

// A writer whose clock is 20 s behind the database's (lookback 30 s)
// commits a row stamped below the watermark after an idle run: the next
// run still re-reads far enough back to find it.
func TestLateCommitBehindWatermarkAfterIdleRun(t *testing.T) {
	f := newFixture(t)
	c := f.config(t, f.db.URL, "lookback: 30s")
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, clock_timestamp(), 'db clock' FROM generate_series(1, 5) g`)
	f.run(t, c)
	f.run(t, c) // idle: stores its bound
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) VALUES (6, clock_timestamp() - interval '20 seconds', 'app clock')`)
	w := f.watermark(t)
	var below bool
	if err := f.db.Pool.QueryRow(context.Background(), `SELECT updated_at < $1::timestamptz FROM src WHERE id = 6`, w[0]).Scan(&below); err != nil {
		t.Fatal(err)
	}
	if !below {
		t.Fatalf("the late row is not stamped below the watermark %v: the test proves nothing", w)
	}
	f.run(t, c)
	f.assertSame(t)
}

// With bound: writers, a transaction that stamps now() (its start) and
// writes after an idle run has read past its start is found, as long as
// the gap between its start and its write is within lookback.
func TestWritersGapWithinLookbackAfterIdleRun(t *testing.T) {
	f := newFixture(t)
	c := f.config(t, f.db.URL, "lookback: 30s", "bound: writers")
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, now() - interval '1 minute', 'old' FROM generate_series(1, 5) g`)
	f.run(t, c)
	late := begin(t, f.db.URL) // has not written: the bound does not wait for it
	f.db.Exec(t, `INSERT INTO src (id, v) VALUES (10, 'after the late start')`)
	f.run(t, c) // reads row 10, past the late transaction's start
	f.run(t, c) // idle
	late.exec(t, `INSERT INTO src (id, v) VALUES (11, 'late')`)
	late.exec(t, "COMMIT")
	f.run(t, c)
	f.assertSame(t)
}

// A transaction open across several runs holds the bound at its start:
// every run stores a bound no later than it, and its rows are copied by
// the run after it commits.
func TestLongTransactionAcrossIdleRuns(t *testing.T) {
	f := newFixture(t)
	c := f.config(t, f.db.URL, "lookback: 5s")
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, now() - interval '1 minute', 'old' FROM generate_series(1, 5) g`)
	f.run(t, c)
	long := begin(t, f.db.URL)
	long.exec(t, `INSERT INTO src (id, v) VALUES (100, 'long')`)
	f.db.Exec(t, `INSERT INTO src (id, v) VALUES (101, 'after it')`)
	for range 3 {
		res := f.run(t, c)
		if res.Holder.PID != long.pid {
			t.Fatalf("run while the transaction is open: holder pid %d, want %d", res.Holder.PID, long.pid)
		}
	}
	if st := f.state(t); st.LookbackBound == "" {
		t.Fatalf("no stored bound after runs held back by a transaction")
	} else if b, ok := pgutil.ParseTime(st.LookbackBound); !ok || b.After(long.since) {
		t.Fatalf("stored bound %q is past the open transaction's start %v", st.LookbackBound, long.since)
	}
	long.exec(t, "COMMIT")
	f.run(t, c)
	f.assertSame(t)
}

// A run that commits pages and then crashes keeps the stored bound of the
// last complete run; rows committed late behind the watermark it left (a
// writer whose clock is 20 s behind, lookback 30 s) are found by the next
// run.
func TestCrashMidRunKeepsLookbackSafe(t *testing.T) {
	f := newFixture(t)
	c := f.config(t, f.db.URL, "lookback: 30s", "page_size: 10")
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, now() - interval '1 minute', 'old' FROM generate_series(1, 5) g`)
	f.run(t, c)
	f.run(t, c)
	stored := f.state(t).LookbackBound
	if stored == "" {
		t.Fatal("no bound stored by a complete run")
	}
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT 100 + g, clock_timestamp(), 'new' FROM generate_series(1, 50) g`)
	crash := errors.New("injected crash")
	_, err := f.runErr(syncer.Options{Config: c, Test: syncer.TestSignals{AfterCommit: func(_ context.Context, at syncer.Commit) error {
		if at.Page == 4 {
			return crash
		}
		return nil
	}}})
	if !errors.Is(err, crash) {
		t.Fatalf("run error %v, want the injected crash", err)
	}
	st := f.state(t)
	if st.LookbackBound != stored {
		t.Fatalf("stored bound after the crash = %q, want the last complete run's %q", st.LookbackBound, stored)
	}
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) VALUES (7, clock_timestamp() - interval '20 seconds', 'app clock')`)
	var below bool
	if err := f.db.Pool.QueryRow(context.Background(), `SELECT updated_at < $1::timestamptz FROM src WHERE id = 7`, st.Cursor[0]).Scan(&below); err != nil {
		t.Fatal(err)
	}
	if !below {
		t.Fatalf("the late row is not stamped below the watermark %v: the test proves nothing", st.Cursor)
	}
	f.run(t, c)
	f.assertSame(t)
}
