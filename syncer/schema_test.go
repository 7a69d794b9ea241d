package syncer_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// TestBackfillResumesFromState: a run stopped after it added a column to
// the copy leaves the backfill in the state file; the next run resumes it
// from the recorded key (rows before it are not read again), finishes it
// before reading new rows, and the copy equals the source.
func TestBackfillResumesFromState(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	if _, err := e.src.Pool.Exec(ctx, `
CREATE TABLE src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text NOT NULL);
INSERT INTO src SELECT i, now() - interval '1 hour' + i * interval '1 s', 'n' || i FROM generate_series(1, 700) i`); err != nil {
		t.Fatal(err)
	}
	c := e.config(t, "public.src", 100, "")
	e.run(t, c, syncer.Options{})
	if _, err := e.src.Pool.Exec(ctx, `ALTER TABLE src ADD COLUMN tier text NOT NULL DEFAULT 'gold'`); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	close(stop)
	if _, err := syncer.Run(ctx, syncer.Options{Config: c, Store: e.store, Stop: stop}); !errors.Is(err, syncer.ErrStopped) {
		t.Fatalf("stopped run: %v", err)
	}
	st, _, err := e.store.Get(c.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Backfill == nil || !slices.Equal(st.Backfill.Columns, []string{"tier"}) {
		t.Fatalf("the stopped run left no backfill to resume: %+v", st.Backfill)
	}
	// As if the stopped run had backfilled the first 300 rows by key.
	if _, err := e.dst.Pool.Exec(ctx, `UPDATE copy SET tier = 'gold' WHERE id <= 300`); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Update(c.Name, func(s *watermark.State) error {
		s.Backfill.After, s.Backfill.Rows = []string{"300"}, 300
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	res := e.run(t, c, syncer.Options{})
	if res.Rows > 1 {
		t.Errorf("the run after the backfill read %d rows; want none new", res.Rows)
	}
	if st, _, _ = e.store.Get(c.Name); st.Backfill != nil || st.LastBackfill == nil || st.LastBackfill.Rows != 700 {
		t.Errorf("backfill after resume: unfinished %+v, last %+v; want finished with 300 + 400 rows read", st.Backfill, st.LastBackfill)
	}
	src, dst := tableText(t, e.src, "src", "id, updated_at, name, tier"), tableText(t, e.dst, "copy", "id, updated_at, name, tier")
	if len(src) != 700 || !slices.Equal(src, dst) {
		t.Fatalf("copy differs from the source: %d source rows, %d copy rows", len(src), len(dst))
	}
}

// TestAddedColumnOfNewTypes: a column added to the source with an enum type
// the sink does not have, and a label added to an enum the copy already
// uses, reach the copy's types before the backfill writes them; the copy
// equals the source value by value.
func TestAddedColumnOfNewTypes(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	if _, err := e.src.Pool.Exec(ctx, `
CREATE TYPE size AS ENUM ('s', 'm');
CREATE TABLE src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, sz size NOT NULL);
INSERT INTO src SELECT i, now() - interval '1 hour' + i * interval '1 s', 's' FROM generate_series(1, 300) i`); err != nil {
		t.Fatal(err)
	}
	c := e.config(t, "public.src", 100, "")
	e.run(t, c, syncer.Options{})
	if _, err := e.src.Pool.Exec(ctx, `CREATE TYPE mood AS ENUM ('calm', 'busy')`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.src.Pool.Exec(ctx, `ALTER TYPE size ADD VALUE 'l'`); err != nil {
		t.Fatal(err)
	}
	// The new label is used by rows the cursor does not see again, so only
	// the types created before the ALTER make the backfill possible.
	if _, err := e.src.Pool.Exec(ctx, `ALTER TABLE src ADD COLUMN m mood NOT NULL DEFAULT 'busy', ADD COLUMN s2 size NOT NULL DEFAULT 'l'`); err != nil {
		t.Fatal(err)
	}
	e.run(t, c, syncer.Options{})
	cols := "id, updated_at, sz::text, m::text, s2::text"
	src, dst := tableText(t, e.src, "src", cols), tableText(t, e.dst, "copy", cols)
	if len(src) != 300 || !slices.Equal(src, dst) {
		t.Fatalf("copy differs from the source after the added columns (%d source rows):\nsource %v\ncopy   %v", len(src), src[:3], dst[:min(3, len(dst))])
	}
}
