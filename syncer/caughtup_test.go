package syncer_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/syncd/syncd/syncer"
)

// The point a run records as caught up (freshness is measured from it) is
// its read bound: an open transaction holds it at the transaction's start,
// and it moves on once that ends. Without a bound it is the source's clock
// when the run began reading. A run stopped before it caught up leaves it
// where it was.
func TestCaughtUpPoint(t *testing.T) {
	f := newFixture(t)
	f.db.Exec(t, `INSERT INTO src (id, v) SELECT g, 'v' FROM generate_series(1, 10) g`)
	c := f.config(t, f.db.URL, "lookback: 0s")
	caughtUp := func() time.Time {
		st, _, err := f.store.Get(f.name)
		if err != nil {
			t.Fatal(err)
		}
		return st.CaughtUp
	}

	open := begin(t, f.db.URL)
	open.exec(t, "SELECT 1")
	res := f.run(t, c)
	if !res.CaughtUp.Equal(open.since) || !caughtUp().Equal(open.since) {
		t.Fatalf("caught up at %v (stored %v) while a transaction open since %v holds the bound; want its start", res.CaughtUp, caughtUp(), open.since)
	}
	open.exec(t, "COMMIT")
	res = f.run(t, c)
	if !res.CaughtUp.After(open.since) || !caughtUp().Equal(res.CaughtUp) || !res.CaughtUp.Equal(res.Bound) {
		t.Fatalf("after the transaction ended: caught up %v (stored %v), bound %v; want the new bound, later than %v", res.CaughtUp, caughtUp(), res.Bound, open.since)
	}
	held := caughtUp()

	// A run stopped before its first page has not caught up.
	stop := make(chan struct{})
	close(stop)
	log := slog.New(slog.NewTextHandler(f.logs, nil))
	if _, err := syncer.Run(context.Background(), syncer.Options{Config: c, Store: f.store, Logger: log, Stop: stop}); !errors.Is(err, syncer.ErrStopped) {
		t.Fatalf("stopped run: %v", err)
	}
	if !caughtUp().Equal(held) {
		t.Fatalf("a stopped run moved the caught-up point from %v to %v", held, caughtUp())
	}

	// Without a bound: the source's clock when the run began reading.
	off := f.config(t, f.db.URL, "lookback: 0s", "bound: off")
	var before, after time.Time
	if err := f.db.Pool.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&before); err != nil {
		t.Fatal(err)
	}
	res = f.run(t, off)
	if err := f.db.Pool.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if !res.Bound.IsZero() || res.CaughtUp.Before(before) || res.CaughtUp.After(after) || !caughtUp().Equal(res.CaughtUp) {
		t.Fatalf("run without a bound: bound %v, caught up %v (stored %v); want the source clock between %v and %v", res.Bound, res.CaughtUp, caughtUp(), before, after)
	}
}
