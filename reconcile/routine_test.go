package reconcile_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/watermark"
)

// TestDaemonRoutineRepairUnderWrites runs the real daemon (sync every 1 s,
// reconcile every 2 s with repair) while a writer, in rounds that each wait
// for a sync of the daemon, inserts rows stamped behind the watermark
// (which no sync can see), edits rows behind it in place, hard-deletes
// rows, and inserts ordinary new rows. Once the writer stops, the first
// reconcile begun after that must leave the copy equal to the source row
// by row (the test's own comparison) and record itself as clean in the
// state file.
func TestDaemonRoutineRepairUnderWrites(t *testing.T) {
	bin := buildBinary(t)
	f := newFixture(t, 500, "schedule: \"@every 1s\"\nreconcile:\n  schedule: \"@every 2s\"\n  repair: true")
	f.closeStore(t)
	ctx := context.Background()

	d := bin.Start(t, nil, "run", "--config", f.cfgFile, "--state", f.stateFile, "--listen", "")
	out := d.Output
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		if r := d.Stop(t, 60*time.Second); r.Code != 0 {
			t.Errorf("daemon exit after SIGTERM: %s", r)
		}
	}
	defer stop()

	state := func() watermark.State {
		t.Helper()
		st, _, err := watermark.ReadState(f.stateFile, "items", 5*time.Second)
		if err != nil {
			t.Fatalf("read the state: %v", err)
		}
		return st
	}
	// poll reads the state until ok says yes, at most limit.
	poll := func(what string, limit time.Duration, ok func(watermark.State) bool) watermark.State {
		t.Helper()
		deadline := time.Now().Add(limit)
		for {
			st := state()
			if ok(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s\n%s", what, limit, out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The daemon's first scheduled reconcile proves the synced copy equal.
	poll("a first clean reconcile", time.Minute, func(st watermark.State) bool { return !st.LastCleanReconcile.IsZero() })

	const rounds = 6
	for r := range rounds {
		base := 10_000 + r*10
		// Behind the watermark (rows 1..500 are stamped 00:00:01..00:08:20):
		// a sync never reads these.
		f.src.Exec(t, fmt.Sprintf(`INSERT INTO public.items (id, updated_at, t) VALUES
  (%d, '2026-01-01 00:00:00.5+00', 'back-dated a'), (%d, '2026-01-01 00:03:00.25+00', 'back-dated b'), (%d, '2026-01-01 00:07:00.75+00', 'back-dated c')`,
			base, base+1, base+2))
		f.src.Exec(t, fmt.Sprintf(`UPDATE public.items SET t = 'edited in place %d' WHERE id = %d`, r, 20+r*7))
		f.src.Exec(t, fmt.Sprintf(`DELETE FROM public.items WHERE id IN (%d, %d)`, 100+r*13, 300+r*17))
		// An ordinary new row, which the sync copies.
		f.src.Exec(t, fmt.Sprintf(`INSERT INTO public.items (id, updated_at, t) VALUES (%d, '2026-06-01 00:00:00+00'::timestamptz + %d * interval '1 second', 'new')`, base+3, r))
		// Let a sync of the daemon run between rounds.
		before := state().LastRunAt
		poll(fmt.Sprintf("a sync after round %d", r+1), time.Minute, func(st watermark.State) bool { return st.LastRunAt.After(before) })
	}
	writerStopped := time.Now()
	// The reconcile running now (if any) may have read the source before
	// the last writes; the first one begun after them must leave the copy
	// equal and record itself as clean. How soon it begins depends on the
	// machine's load, so the test waits for it rather than timing it.
	st := poll("a reconcile begun after the writer stopped", 2*time.Minute, func(st watermark.State) bool {
		return st.LastReconcile != nil && st.LastReconcile.At.After(writerStopped)
	})
	t.Logf("the first reconcile after the writer stopped began %s later: %+v",
		st.LastReconcile.At.Sub(writerStopped).Round(time.Millisecond), *st.LastReconcile)
	if !st.LastCleanReconcile.Equal(st.LastReconcile.At) || len(st.LastReconcile.Differences) != 0 || len(st.LastReconcile.NotCovered) != 0 {
		t.Errorf("the reconcile begun after the writer stopped was not clean: last clean %s, last %+v\n%s",
			st.LastCleanReconcile, *st.LastReconcile, out.String())
	}
	f.assertSameRows(t)

	var srcRows, copyRows int
	if err := f.src.Pool.QueryRow(ctx, "SELECT count(*) FROM public.items").Scan(&srcRows); err != nil {
		t.Fatal(err)
	}
	if err := f.dst.Pool.QueryRow(ctx, "SELECT count(*) FROM public.items_copy").Scan(&copyRows); err != nil {
		t.Fatal(err)
	}
	if want := 500 + rounds*(4-2); srcRows != want || copyRows != want {
		t.Fatalf("source has %d rows, copy %d; want %d", srcRows, copyRows, want)
	}
	stop()
	if log := out.String(); !strings.Contains(log, "scheduled reconcile found differences") && !strings.Contains(log, `repaired":true`) &&
		!strings.Contains(log, "repaired=true") {
		t.Errorf("the daemon logged no repair:\n%s", out.String())
	}
}
