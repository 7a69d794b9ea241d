package syncer_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgpool"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/internal/sourceerr"
	"github.com/syncd/syncd/syncer"
)

// A copy emptied (TRUNCATE, DELETE FROM), dropped, or dropped and created
// again between two idle runs of the daemon's kind (pooled sessions, the
// catalog cache filled, the copy's checks skipped) is refused as run
// --once refuses it: a resync is needed, the copy is not resumed from the
// watermark with only the rows after it. A DELETE leaves the copy's
// catalog fingerprint as it was, so that run takes the cached path.
func TestLostCopyIsRefusedOnAPooledCachedRun(t *testing.T) {
	for _, tc := range []struct{ name, sql, state string }{
		{"truncate", "TRUNCATE dst", "empty"},
		{"delete", "DELETE FROM dst", "empty"},
		{"drop", "DROP TABLE dst", "missing"},
		{"drop and create", "DROP TABLE dst; CREATE TABLE dst (id int PRIMARY KEY, updated_at timestamptz NOT NULL, v text NOT NULL)", "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.db.Exec(t, `INSERT INTO src SELECT g, now() - interval '1 hour', 'v' || g FROM generate_series(1, 20) g`)
			c := f.config(t, f.db.URL, "lookback: 0s")
			p := pgpool.New(pgpool.Options{MaxIdle: 1})
			defer p.Close()
			o := f.options(c, slog.New(slog.NewTextHandler(f.logs, nil)))
			o.Pool, o.Schema = p, &syncer.SchemaCache{}
			var ctr pgutil.Counter
			ctx := pgutil.WithCounter(context.Background(), &ctr)
			// The first load, the run that fills the cache, and an idle
			// run from it.
			var before pgutil.CounterSnapshot
			for i := range 3 {
				before = ctr.Snapshot()
				if _, err := syncer.Run(ctx, o); err != nil {
					t.Fatalf("run %d: %v\nlog:\n%s", i+1, err, f.logs)
				}
			}
			f.assertSame(t)
			// The idle run read no column of the copy: the cached path.
			idle := ctr.Snapshot().Since(before)
			for _, s := range idle.Statements {
				if strings.Contains(s, "format_type") || strings.Contains(s, "atttypid::int8") {
					t.Fatalf("the idle run read the copy's columns (%s): not the cached path", s)
				}
			}

			f.db.Exec(t, tc.sql)
			_, err := syncer.Run(ctx, o)
			var rn *sourceerr.ResyncNeeded
			want := "the copy public.dst is " + tc.state + ", but the watermark of source " + f.name
			if !errors.As(err, &rn) || !strings.Contains(err.Error(), want) {
				t.Fatalf("run after %s: err %v; want a resync needed with %q", tc.sql, err, want)
			}
			var n int
			if err := f.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_class WHERE relname = 'dst' AND relnamespace = 'public'::regnamespace").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if tc.state == "missing" && n != 0 {
				t.Fatal("the refused run created the copy again")
			}
			// Refused again by the next run, whatever the cache held.
			if _, err := syncer.Run(ctx, o); !errors.As(err, &rn) {
				t.Fatalf("second run after %s: err %v; want a resync needed", tc.sql, err)
			}
		})
	}
}

// What the cached path keeps of the copy (its columns' types, read by the
// sink's Prepare) is kept only under the copy's catalog fingerprint: a
// column of the copy altered by hand between two idle runs is seen by the
// next run, which checks the copy again and refuses one that can no
// longer hold the source's values.
func TestCopyAlteredBetweenPooledRunsIsCheckedAgain(t *testing.T) {
	f := newFixture(t)
	f.db.Exec(t, `INSERT INTO src SELECT g, now() - interval '1 hour', 'value ' || g FROM generate_series(1, 20) g`)
	c := f.config(t, f.db.URL, "lookback: 0s")
	p := pgpool.New(pgpool.Options{MaxIdle: 1})
	defer p.Close()
	o := f.options(c, slog.New(slog.NewTextHandler(f.logs, nil)))
	o.Pool, o.Schema = p, &syncer.SchemaCache{}
	for i := range 3 {
		if _, err := syncer.Run(context.Background(), o); err != nil {
			t.Fatalf("run %d: %v\nlog:\n%s", i+1, err, f.logs)
		}
	}
	f.db.Exec(t, `ALTER TABLE dst ALTER COLUMN v TYPE varchar(200)`)
	f.db.Exec(t, `UPDATE src SET v = repeat('x', 300), updated_at = clock_timestamp() WHERE id = 7`)
	_, err := syncer.Run(context.Background(), o)
	want := `column "v" is character varying(200) but text in the source`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("run after the copy's column was altered: err %v; want %q", err, want)
	}
}
