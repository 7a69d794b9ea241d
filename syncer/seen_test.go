package syncer_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// Under steady writes every run re-read the whole lookback window behind
// the watermark: with 5 s of lookback and a run a second, each changed row
// was read, staged and compared about five times. A run now reads from the
// window only the row versions written since the last run read its bound
// (syncer/idle.go): new rows, changes that move the cursor, changes that
// do not, and late commits stamped below the watermark. A stored
// transaction id the source may have handed out again (another server
// start) or one from ahead of the source turns that off for a run, which
// reads the whole window as before.
func TestLookbackWindowReadsOnlyNewVersions(t *testing.T) {
	const window = 200
	f := newFixture(t)
	c := f.config(t, f.db.URL, "lookback: 1h", "page_size: 50")
	// Transaction ids are the cluster's: a writing transaction of another
	// test, in another database, open across a run, lowers the id the run
	// stores, and the next run then reads more of the window than the rows
	// this test changed (more, never fewer). Each counted run starts once
	// every transaction older than the test's last write has ended.
	run := func() syncer.Result {
		t.Helper()
		f.settled(t)
		return f.run(t, c)
	}
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, clock_timestamp(), 'v' || g FROM generate_series(1, $1::int) g`, window)
	if res := run(); res.Rows != window {
		t.Fatalf("first run read %d rows, want %d", res.Rows, window)
	}
	st := f.state(t)
	if st.LookbackBound == "" || st.LookbackXmin == 0 || st.LookbackServer.IsZero() {
		t.Fatalf("a complete run stored bound %q, xmin %d, server start %v: want all three", st.LookbackBound, st.LookbackXmin, st.LookbackServer)
	}

	// The window holds every row: an idle run reads none of them.
	if res := run(); res.Rows != 0 {
		t.Fatalf("idle run read %d rows, want 0", res.Rows)
	}
	f.db.Exec(t, `UPDATE src SET v = 'moved', updated_at = clock_timestamp() WHERE id IN (1, 2, 3)`)
	f.db.Exec(t, `UPDATE src SET v = 'in place' WHERE id IN (50, 51)`) // the cursor does not move
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) VALUES (1001, clock_timestamp(), 'new'), (1002, clock_timestamp() - interval '20 minutes', 'app clock behind')`)
	if res := run(); res.Rows != 7 {
		t.Fatalf("run after 3 moved rows, 2 changed in place and 2 inserts (one stamped below the watermark) read %d rows, want 7", res.Rows)
	}
	f.assertSame(t)
	if res := run(); res.Rows != 0 {
		t.Fatalf("idle run after that read %d rows, want 0", res.Rows)
	}

	// A row written by a transaction that was open when the last run read
	// its bound, committed after that run, stamped below its watermark.
	open := begin(t, f.db.URL)
	open.exec(t, `INSERT INTO src (id, updated_at, v) VALUES (2001, clock_timestamp() - interval '10 minutes', 'open across a run')`)
	f.db.Exec(t, `UPDATE src SET v = 'during', updated_at = clock_timestamp() WHERE id = 4`)
	f.run(t, c) // reads row 4 (the open transaction holds the bound at its start: maybe not yet)
	open.exec(t, "COMMIT")
	run()
	f.assertSame(t)

	total := int64(window + 3)
	for _, tc := range []struct {
		name string
		edit func(st *watermark.State)
	}{
		{"a source server that started at another time", func(st *watermark.State) { st.LookbackServer = st.LookbackServer.Add(-time.Hour) }},
		{"a transaction id ahead of the source's", func(st *watermark.State) { st.LookbackXmin += 1 << 20 }},
		{"a transaction id older than every row", func(st *watermark.State) { st.LookbackXmin = 3 }},
		{"no stored transaction id (an older syncd)", func(st *watermark.State) { st.LookbackXmin, st.LookbackServer = 0, time.Time{} }},
	} {
		if err := f.store.Update(f.name, func(st *watermark.State) error { tc.edit(st); return nil }); err != nil {
			t.Fatal(err)
		}
		if res := run(); res.Rows != total {
			t.Fatalf("%s: run read %d rows, want the whole window's %d", tc.name, res.Rows, total)
		}
		if res := run(); res.Rows != 0 {
			t.Fatalf("%s: the run after read %d rows, want 0", tc.name, res.Rows)
		}
	}
	f.assertSame(t)
}

// settled waits until every transaction that was running when it was
// called has ended, in any database of the cluster.
func (f *fixture) settled(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	var next uint64
	if err := f.db.Pool.QueryRow(ctx, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::int8").Scan(&next); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the transactions open in the cluster to end", func() bool {
		var xmin uint64
		if err := f.db.Pool.QueryRow(ctx, "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8").Scan(&xmin); err != nil {
			t.Fatal(err)
		}
		return xmin >= next
	})
}

// A role granted only the table's columns cannot read a row's xmin: the
// run reads the whole window instead of failing.
func TestLookbackWindowWithColumnGrants(t *testing.T) {
	f := newFixture(t)
	role := "syncd_cols_" + strings.TrimPrefix(f.db.Name, "syncd_test_")
	f.db.Exec(t, "CREATE ROLE "+role+" LOGIN IN ROLE pg_read_all_stats")
	t.Cleanup(func() {
		ctx := context.Background()
		if _, err := f.db.Pool.Exec(ctx, "DROP OWNED BY "+role); err != nil {
			t.Errorf("drop owned by %s: %v", role, err)
		}
		if _, err := f.db.Pool.Exec(ctx, "DROP ROLE "+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	f.db.Exec(t, "GRANT SELECT (id, updated_at, v) ON src TO "+role)
	u, err := url.Parse(f.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	c := f.config(t, u.String(), "lookback: 1h")
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, clock_timestamp(), 'v' || g FROM generate_series(1, 20) g`)
	f.run(t, c)
	f.db.Exec(t, `UPDATE src SET v = 'changed', updated_at = clock_timestamp() WHERE id = 1`)
	if res := f.run(t, c); res.Rows != 20 {
		t.Fatalf("run read %d rows, want the whole window's 20", res.Rows)
	}
	f.assertSame(t)
}
