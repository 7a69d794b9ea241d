package sink_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// TestFastPathRun drives the fast path through real runs (binary pages,
// reading one page ahead, asynchronous commits whose watermark waits for
// durability) while a writer changes the source between pages, and checks
// that the copy converges row by row and the watermark ends at the last
// row read.
func TestFastPathRun(t *testing.T) {
	e := newFastEnv(t, 5000, 300)
	e.src.Close(context.Background())
	store, err := watermark.Open(filepath.Join(t.TempDir(), "state.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	write := func(_ context.Context, at syncer.Commit) error {
		if at.Page%3 != 0 {
			return nil
		}
		// Move copied rows to the end of the cursor order and add new ones.
		e.db.Exec(t, `UPDATE src SET updated_at = clock_timestamp(), name = 'changed ' || $1 WHERE id IN (SELECT id FROM src ORDER BY id LIMIT 10 OFFSET $1 * 10)`, at.Page)
		e.db.Exec(t, `INSERT INTO src SELECT max(id) + 1, clock_timestamp(), 'new', 1, NULL, NULL FROM src`)
		return nil
	}
	res, err := syncer.Run(ctx, syncer.Options{Config: e.cfg, Store: store, Test: syncer.TestSignals{AfterCommit: write}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Pages < 17 {
		t.Fatalf("first run applied %d pages, want at least 17", res.Pages)
	}
	// The run filled an empty copy: it leaves it analyzed.
	var analyzed bool
	if err := e.db.Pool.QueryRow(ctx, "SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'copy'").Scan(&analyzed); err != nil || !analyzed {
		t.Fatalf("the freshly filled copy was not analyzed (%v)", err)
	}
	// Writes after the last page are picked up by the next run.
	if _, err := syncer.Run(ctx, syncer.Options{Config: e.cfg, Store: store}); err != nil {
		t.Fatal(err)
	}
	sameRows(t, e.db)
	st, _, err := store.Get("fast")
	if err != nil {
		t.Fatal(err)
	}
	var ts, id string
	if err := e.db.Pool.QueryRow(ctx, "SELECT updated_at::text, id::text FROM src ORDER BY updated_at DESC, id DESC LIMIT 1").Scan(&ts, &id); err != nil {
		t.Fatal(err)
	}
	// The reader's session is UTC; compare the instants.
	var same bool
	if err := e.db.Pool.QueryRow(ctx, "SELECT $1::timestamptz = $2::timestamptz", st.Cursor[0], ts).Scan(&same); err != nil {
		t.Fatal(err)
	}
	if !same || !slices.Equal(st.Cursor[1:], []string{id}) {
		t.Fatalf("watermark %v, want the last row (%s, %s)", st.Cursor, ts, id)
	}
}

// TestStoppedRunSkipsAnalyze: a run stopped gracefully before it caught up
// leaves the copy it began to fill to autovacuum (no ANALYZE when the run
// ends, which a stop would wait for); the next run goes on from the
// watermark. TestFastPathRun checks that a run that catches up analyzes.
func TestStoppedRunSkipsAnalyze(t *testing.T) {
	e := newFastEnv(t, 2000, 300)
	e.src.Close(context.Background())
	store, err := watermark.Open(filepath.Join(t.TempDir(), "state.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	lastAnalyze := func() bool {
		t.Helper()
		var analyzed bool
		if err := e.db.Pool.QueryRow(ctx, "SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'copy'").Scan(&analyzed); err != nil {
			t.Fatal(err)
		}
		return analyzed
	}
	stop := make(chan struct{})
	stopAfter := func(_ context.Context, at syncer.Commit) error {
		if at.Page == 2 {
			close(stop)
		}
		return nil
	}
	res, err := syncer.Run(ctx, syncer.Options{Config: e.cfg, Store: store, Stop: stop, Test: syncer.TestSignals{AfterCommit: stopAfter}})
	if !errors.Is(err, syncer.ErrStopped) || res.Pages != 2 || !res.Stopped {
		t.Fatalf("stopped run: %d pages, stopped %v, err %v; want 2 pages and ErrStopped", res.Pages, res.Stopped, err)
	}
	var n int
	if err := e.db.Pool.QueryRow(ctx, "SELECT count(*) FROM copy").Scan(&n); err != nil || n != 600 {
		t.Fatalf("the copy holds %d rows after two pages of 300 (%v), want 600", n, err)
	}
	if lastAnalyze() {
		t.Fatal("a run stopped before it caught up analyzed the copy")
	}
	if _, err := syncer.Run(ctx, syncer.Options{Config: e.cfg, Store: store}); err != nil {
		t.Fatal(err)
	}
	sameRows(t, e.db)
}
