package catalog_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/internal/pgtest"
)

// formatOne is the catalog as syncd wrote it at format 1, before the
// run columns: what an upgrade starts from.
const formatOne = `
CREATE SCHEMA syncd;
CREATE TABLE syncd.catalog_version (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  version integer NOT NULL
);
CREATE TABLE syncd.copies (
  copy_table      text PRIMARY KEY,
  source_name     text NOT NULL,
  source          jsonb NOT NULL,
  cursor          text[],
  pages           bigint NOT NULL DEFAULT 0,
  rows            bigint NOT NULL DEFAULT 0,
  writer          text NOT NULL DEFAULT '',
  state_file      text NOT NULL DEFAULT '',
  resynced_at     timestamptz,
  registered_at   timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now()
);
INSERT INTO syncd.catalog_version (version) VALUES (1);
INSERT INTO syncd.copies (copy_table, source_name, source, cursor, pages, rows, writer, state_file)
VALUES ('public.c', 's', '{"database": "d", "table": "public.t", "oid": 42, "heap": "42:42"}', '{2026-12-01 00:00:00+00,7}', 3, 30, 'host pid 1', '/var/lib/syncd/a.db')`

// A catalog of format 1 is read as it is by a process that does not
// upgrade it (status, validate), and upgraded in place by the first run of
// this build: every record kept, the run columns added and empty, the
// version raised to 2; a run recorded afterwards is read back exactly.
func TestUpgradeFromFormatOne(t *testing.T) {
	db := pgtest.NewDB(t)
	conn := connect(t, db)
	ctx := context.Background()
	db.Exec(t, formatOne)
	want := func(stage string, rec catalog.Record) {
		t.Helper()
		if rec.Copy != "public.c" || rec.SourceName != "s" || rec.Source.OID != 42 || !slices.Equal(rec.Cursor, []string{"2026-12-01 00:00:00+00", "7"}) ||
			rec.Pages != 3 || rec.Rows != 30 || rec.Writer != "host pid 1" || rec.StateFile != "/var/lib/syncd/a.db" || rec.ReadAt.IsZero() {
			t.Fatalf("%s: record %+v, want the format-1 record kept", stage, rec)
		}
	}
	rec, ok, err := catalog.Read(ctx, conn, "public.c")
	if err != nil || !ok {
		t.Fatalf("read a format-1 catalog: %v %v", ok, err)
	}
	want("format 1", rec)
	if recs, err := catalog.List(ctx, conn); err != nil || len(recs) != 1 {
		t.Fatalf("list a format-1 catalog: %d records, %v", len(recs), err)
	}
	if err := catalog.Ensure(ctx, conn); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	var v int
	if err := conn.QueryRow(ctx, "SELECT version FROM syncd.catalog_version").Scan(&v); err != nil || v != 2 || catalog.Version != 2 {
		t.Fatalf("version after the upgrade: %d (%v), want 2", v, err)
	}
	rec, ok, err = catalog.Read(ctx, conn, "public.c")
	if err != nil || !ok {
		t.Fatalf("read the upgraded catalog: %v %v", ok, err)
	}
	want("upgraded", rec)
	if rec.Run != (catalog.Run{}) {
		t.Fatalf("an upgraded record has no run recorded, got %+v", rec.Run)
	}
	// Ensure again: one query, nothing changed.
	if err := catalog.Ensure(ctx, conn); err != nil {
		t.Fatal(err)
	}

	bound := time.Date(2026, 12, 2, 10, 0, 0, 123456000, time.UTC)
	fresh := bound.Add(-time.Second)
	if err := catalog.RecordRun(ctx, conn, "public.c", catalog.Run{Bound: bound, CaughtUp: true, Fresh: fresh, Every: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	rec, _, _ = catalog.Read(ctx, conn, "public.c")
	if r := rec.Run; !r.Bound.Equal(bound) || !r.CaughtUp || !r.Fresh.Equal(fresh) || r.Every != 30*time.Second || r.At.IsZero() || rec.ReadAt.Before(r.At) {
		t.Fatalf("recorded run %+v (read at %s)", r, rec.ReadAt)
	}
	// A run that did not catch up keeps the point the copy was fresh to;
	// a page's mark records the run it ends, fresh moving on.
	if err := catalog.RecordRun(ctx, conn, "public.c", catalog.Run{Bound: bound.Add(time.Minute), Every: time.Minute}); err != nil {
		t.Fatal(err)
	}
	rec, _, _ = catalog.Read(ctx, conn, "public.c")
	if r := rec.Run; r.CaughtUp || !r.Fresh.Equal(fresh) || !r.Bound.Equal(bound.Add(time.Minute)) || r.Every != time.Minute {
		t.Fatalf("a run that did not catch up: %+v, want fresh kept at %s", r, fresh)
	}
	if _, err := conn.Exec(ctx, catalog.MarkSQL("public.c", []string{"2026-12-02 10:00:00+00", "8"}, 1, &catalog.Run{Bound: bound.Add(2 * time.Minute), CaughtUp: true, Fresh: bound.Add(2 * time.Minute), Every: time.Second})); err != nil {
		t.Fatal(err)
	}
	rec, _, _ = catalog.Read(ctx, conn, "public.c")
	if r := rec.Run; !r.CaughtUp || !r.Fresh.Equal(bound.Add(2*time.Minute)) || r.Every != time.Second || rec.Pages != 4 {
		t.Fatalf("a page's mark with its run: %+v, pages %d", r, rec.Pages)
	}
}

// A copy handed over to another writer (a source moved to another
// replica) keeps no run of the old writer's under the new writer's name:
// the last run's fields are cleared until the new writer records its own,
// and the point the copy is caught up to stays. The same writer updating
// its record keeps them.
func TestHandoverClearsTheOldWritersRun(t *testing.T) {
	db := pgtest.NewDB(t)
	conn := connect(t, db)
	ctx := context.Background()
	db.Exec(t, formatOne)
	if err := catalog.Ensure(ctx, conn); err != nil {
		t.Fatal(err)
	}
	bound := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	if err := catalog.RecordRun(ctx, conn, "public.c", catalog.Run{Bound: bound, CaughtUp: true, Fresh: bound, Every: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	rec, _, _ := catalog.Read(ctx, conn, "public.c")
	ran := rec.Run
	if err := catalog.Update(ctx, conn, rec, false); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ = catalog.Read(ctx, conn, "public.c"); rec.Run != ran || rec.Writer != "host pid 1" {
		t.Fatalf("the same writer's update: run %+v, writer %q; want the run %+v kept", rec.Run, rec.Writer, ran)
	}
	rec.Writer = "other-host pid 2"
	if err := catalog.Update(ctx, conn, rec, false); err != nil {
		t.Fatal(err)
	}
	rec, _, _ = catalog.Read(ctx, conn, "public.c")
	if r := rec.Run; !r.At.IsZero() || !r.Bound.IsZero() || r.CaughtUp || r.Every != 0 || !r.Fresh.Equal(bound) || rec.Writer != "other-host pid 2" {
		t.Fatalf("after the handover: run %+v, writer %q; want no run and the copy's freshness %s kept", r, rec.Writer, bound)
	}
}
