package syncer_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/catalog"
)

// The sink's record of a copy says how its last run ended, cheaply: the
// run's end travels with its last page when it has one, and an idle run
// writes the record at most once per interval (max(30s, the schedule's
// period): here the default schedule's minute), or at once when it has
// something new to say (another process took the copy over). Every write
// of the record is counted by a trigger.
func TestRunEndRecordedAtMostOncePerInterval(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, now() - interval '1 hour' + g * interval '1 s', 'v' || g FROM generate_series(1, 25) g`)
	conn, err := pgx.Connect(ctx, f.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := catalog.Ensure(ctx, conn); err != nil {
		t.Fatal(err)
	}
	f.db.Exec(t, `CREATE TABLE record_writes (n serial, run_at timestamptz, caught_up timestamptz, writer text)`)
	f.db.Exec(t, `CREATE FUNCTION log_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.record_writes (run_at, caught_up, writer) VALUES (NEW.run_at, NEW.caught_up, NEW.writer);
  RETURN NULL;
END $$`)
	f.db.Exec(t, `CREATE TRIGGER log_record AFTER UPDATE ON syncd.copies FOR EACH ROW EXECUTE FUNCTION public.log_record()`)
	writes := func() int {
		var n int
		if err := f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM record_writes`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	record := func() catalog.Record {
		t.Helper()
		rec, ok, err := catalog.Read(ctx, conn, "public.dst")
		if err != nil || !ok {
			t.Fatalf("the copy's record: %v %v", ok, err)
		}
		return rec
	}
	c := f.config(t, f.db.URL)

	// The first run: one page, which records the run's end with its mark
	// (the record's registration is an INSERT, not counted).
	res := f.run(t, c)
	f.assertSame(t)
	rec := record()
	if n := writes(); n != 1 || res.Pages != 1 {
		t.Fatalf("the first run (%d pages) wrote the record %d times, want once, with its page", res.Pages, n)
	}
	if r := rec.Run; r.At.IsZero() || !r.CaughtUp || !r.Bound.Equal(res.Bound.Truncate(time.Microsecond)) || !r.Fresh.Equal(res.CaughtUp.Truncate(time.Microsecond)) || r.Every != time.Minute {
		t.Fatalf("the first run's end: %+v, want caught up to %s at bound %s, every 1m", r, res.CaughtUp, res.Bound)
	}
	first := rec.Run

	// Idle runs within the interval write nothing.
	for range 10 {
		if res := f.run(t, c); res.Pages != 0 || res.CaughtUp.IsZero() {
			t.Fatalf("an idle run: %+v", res)
		}
	}
	if n := writes(); n != 1 {
		t.Fatalf("10 idle runs within the interval wrote the record %d times, want none", n-1)
	}
	if r := record().Run; r != first {
		t.Fatalf("the record moved without a write: %+v, was %+v", r, first)
	}

	// The interval has passed (the recorded run made older by hand): the
	// next idle run writes the record, once; the ones after it, not again.
	f.db.Exec(t, `UPDATE syncd.copies SET run_at = run_at - interval '61 seconds', caught_up = caught_up - interval '61 seconds'`)
	base := writes()
	aged := record().Run
	for range 5 {
		f.run(t, c)
	}
	if n := writes() - base; n != 1 {
		t.Fatalf("5 idle runs once the interval passed wrote the record %d times, want once", n)
	}
	if r := record().Run; !r.At.After(aged.At) || !r.Fresh.After(aged.Fresh) || !r.CaughtUp {
		t.Fatalf("the idle run's end: %+v, want a later end and freshness than %+v", r, aged)
	}

	// A run with pages records its end with its last page: one write.
	f.db.Exec(t, `INSERT INTO src (id, v) SELECT g, 'new' FROM generate_series(26, 30) g`)
	base = writes()
	if res := f.run(t, c); res.Pages != 1 {
		t.Fatalf("a run of 5 new rows: %d pages", res.Pages)
	}
	f.assertSame(t)
	if n := writes() - base; n != 1 {
		t.Fatalf("a run with one page wrote the record %d times, want once", n)
	}

	// Another process ran the copy last: this one's first run records its
	// end at once, idle as it is, so that the fleet shows who runs it.
	f.db.Exec(t, `UPDATE syncd.copies SET writer = 'elsewhere pid 1'`)
	base = writes()
	before := record().Run
	f.run(t, c)
	rec = record()
	if rec.Writer == "elsewhere pid 1" || !rec.Run.At.After(before.At) {
		t.Fatalf("after a hand-over: writer %q, run %+v (was %+v), want this process and its run recorded", rec.Writer, rec.Run, before)
	}
	if n := writes() - base; n != 2 {
		t.Fatalf("a hand-over's idle run wrote the record %d times, want 2 (the claim, the run's end)", n)
	}
}
