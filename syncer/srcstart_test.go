package syncer_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/syncd/syncd/syncer"
)

// A daemon's run reads its bound in the round trip that reads the source
// table's fingerprint (source.Opening.Start). That bound is as safe as one
// read on its own: a transaction open since before rows other sessions
// committed holds it, and the rows wait until it ends. A table changed
// under the cache (a column added) is described again and its bound read
// again; a table renamed away fails the run with the error of a table
// that does not exist, and the next run after it is back catches up.
func TestPooledRunBoundReadWithFingerprint(t *testing.T) {
	f := newFixture(t)
	f.pooled(t)
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, now() - interval '1 minute' + g * interval '1 ms', 'v' || g FROM generate_series(1, 20) g`)
	c := f.config(t, f.db.URL, "lookback: 0s")
	for range 2 { // the second run takes the table from the cache
		f.run(t, c)
	}
	f.assertSame(t)

	w := begin(t, f.db.URL)
	w.exec(t, `INSERT INTO src (id, v) VALUES (100, 'open since before')`)
	f.clockPast(t, w.since)
	f.db.Exec(t, `INSERT INTO src (id, v) VALUES (200, 'committed after')`)
	held := f.run(t, c)
	if held.Holder.PID != w.pid || !held.Bound.Equal(w.since) || held.Rows != 0 {
		t.Fatalf("run while a transaction is open: holder pid %d, bound %s, %d rows; want pid %d, bound %s, nothing read",
			held.Holder.PID, held.Bound, held.Rows, w.pid, w.since)
	}
	w.exec(t, `COMMIT`)
	if res := f.run(t, c); res.Rows != 2 || res.Holder.PID != 0 {
		t.Fatalf("run after the transaction committed: %d rows, holder pid %d; want 2 rows, no holder", res.Rows, res.Holder.PID)
	}
	f.assertSame(t)

	f.db.Exec(t, `ALTER TABLE src ADD COLUMN note text DEFAULT 'n'`)
	f.db.Exec(t, `INSERT INTO src (id, v) VALUES (300, 'after the column')`)
	if res := f.run(t, c); res.Rows != 1 {
		t.Fatalf("run after a column was added: %d rows, want 1", res.Rows)
	}
	f.assertSame(t)

	f.db.Exec(t, `ALTER TABLE src RENAME TO src_away`)
	log := slog.New(slog.NewTextHandler(f.logs, nil))
	_, err := syncer.Run(context.Background(), f.options(c, log))
	if err == nil || !strings.Contains(err.Error(), "table public.src does not exist") {
		t.Fatalf("run with the table renamed away: %v; want the table named as missing", err)
	}
	f.db.Exec(t, `ALTER TABLE src_away RENAME TO src; INSERT INTO src (id, v) VALUES (400, 'back')`)
	if res := f.run(t, c); res.Rows != 1 {
		t.Fatalf("run with the table back: %d rows, want 1", res.Rows)
	}
	f.assertSame(t)
}
