package syncer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// A writer whose session calls itself syncd is a writer like any other: the
// bound must not leave it out. It opens its transaction, others commit rows
// stamped later, and only then it writes rows stamped with its start.
func TestWriterNamedLikeSyncdHoldsBound(t *testing.T) {
	f := newFixture(t)
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, now() - interval '1 minute' + g * interval '1 ms', 'v' || g FROM generate_series(1, 20) g`)
	c := f.config(t, f.db.URL, "lookback: 0s")
	f.run(t, c)

	late := begin(t, f.db.URL+"&application_name="+pgutil.AppName)
	// The rows committed next are stamped after its start, which is what
	// the bound must hold back.
	f.clockPast(t, late.since)
	f.db.Exec(t, `UPDATE src SET v = 'early', updated_at = DEFAULT WHERE id IN (2, 3)`)
	held := f.run(t, c)
	if held.Holder.PID != late.pid || held.Rows != 0 {
		t.Fatalf("run while the syncd-named transaction is open: holder pid %d, %d rows; want pid %d and nothing read", held.Holder.PID, held.Rows, late.pid)
	}
	late.exec(t, `UPDATE src SET v = 'late', updated_at = now() WHERE id = 1`)
	late.exec(t, `INSERT INTO src (id, v) VALUES (100, 'late insert')`)
	// Written now: it has an xid, and still holds the bound.
	if res := f.run(t, c); res.Holder.PID != late.pid {
		t.Fatalf("run after it wrote: holder pid %d, want %d", res.Holder.PID, late.pid)
	}
	late.exec(t, "COMMIT")
	f.run(t, c)
	f.assertSame(t)
}

// With bound: off, rows stamped 'infinity' and in 2099 must not carry the
// watermark past the source's clock plus source.ClockAllowance: rows
// written later are still synced. The same after resync --from and with a
// lookback window.
func TestWatermarkNeverPassesSourceClock(t *testing.T) {
	f := newFixture(t)
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, now() - interval '1 minute' + g * interval '1 ms', 'v' || g FROM generate_series(1, 10) g`)
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) VALUES (1000, 'infinity', 'infinity'), (1001, '2099-01-01', 'typo')`)
	for i, keys := range [][]string{{"bound: off", "lookback: 0s"}, {"bound: off", "lookback: 5s"}, {"bound: off", "lookback: 0s"}} {
		c := f.config(t, f.db.URL, keys...)
		if i == 2 {
			// resync --from a time in the past.
			if err := f.store.Update(f.name, func(st *watermark.State) error {
				st.Cursor, st.From = nil, time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		res := f.run(t, c)
		assertBelowClock(t, f, res)
		f.db.Exec(t, fmt.Sprintf(`INSERT INTO src (id, v) VALUES (%d, 'later')`, 20+i))
		res = f.run(t, c)
		assertBelowClock(t, f, res)
		// Every row stamped before the line is in the copy, equal.
		for id, v := range f.rows(t, "src") {
			if id < 1000 && f.rows(t, "dst")[id] != v {
				t.Fatalf("pass %d (%v): row %d is %q in the source and %q in the copy", i, keys, id, v, f.rows(t, "dst")[id])
			}
		}
	}
}

// assertBelowClock checks the stored watermark against the clock the run
// saw plus the allowance.
func assertBelowClock(t *testing.T, f *fixture, res syncer.Result) {
	t.Helper()
	w := f.watermark(t)
	if len(w) == 0 {
		t.Fatal("no watermark")
	}
	at, ok := pgutil.ParseTime(w[0])
	if !ok || res.BoundAt.IsZero() || at.After(res.BoundAt.Add(source.ClockAllowance)) {
		t.Fatalf("watermark %v is past the source clock %v plus %s", w, res.BoundAt, source.ClockAllowance)
	}
}

// A transaction holding the bound is warned about once, not at
// every run; another transaction is a new cause.
func TestHoldWarnedOncePerCause(t *testing.T) {
	f := newFixture(t)
	c := f.config(t, f.db.URL, "lookback: 0s")
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// Any transaction open when a run starts is old enough to warn about:
	// the threshold is what the test sets, so no clock has to pass it.
	const warnAfter = time.Microsecond
	run := func() {
		t.Helper()
		if _, err := syncer.Run(context.Background(), syncer.Options{Config: c, Store: f.store, Logger: log, HoldWarnAfter: warnAfter}); err != nil {
			t.Fatal(err)
		}
	}
	var pids []int32
	for range 2 {
		open := begin(t, f.db.URL)
		pids = append(pids, open.pid)
		open.exec(t, "SELECT 1")
		f.db.Exec(t, `INSERT INTO src (id, v) SELECT coalesce(max(id), 0) + 1, 'x' FROM src`)
		for range 4 {
			run()
		}
		open.exec(t, "COMMIT")
	}
	run()
	f.assertSame(t)
	var warned []int32
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			PID   int32  `json:"pid"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Level == "WARN" {
			if !strings.HasPrefix(rec.Msg, "bound held back by a transaction") {
				t.Fatalf("unexpected warning: %s", line)
			}
			warned = append(warned, rec.PID)
		}
	}
	if !slices.Equal(warned, pids) {
		t.Fatalf("warnings name pids %v over 9 runs, want one per holding transaction %v\nlog:\n%s", warned, pids, logs.String())
	}
}
