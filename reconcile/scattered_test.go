package reconcile_test

import (
	"context"
	"testing"

	"github.com/syncd/syncd/reconcile"
)

// TestScatteredDifferencesFetchOnlyDifferingRows puts 6% of the rows out of
// step all over the key range (a third missing from the copy, a third extra,
// a third changed), so that every checksum range differs: reconcile must
// stream (key, hash) pairs of those ranges and read whole rows only for the
// differing keys, by an integer key and by a hashed text key, find exactly
// those keys, and repair them.
func TestScatteredDifferencesFetchOnlyDifferingRows(t *testing.T) {
	const n, per = 6000, 120 // per: rows with each kind of difference
	for _, key := range []string{"id", "code"} {
		t.Run("key="+key, func(t *testing.T) {
			t.Parallel()
			f := newSimple(t, `CREATE TABLE t (id bigint PRIMARY KEY, code text NOT NULL UNIQUE, updated_at timestamptz NOT NULL, val numeric(10,2), doc jsonb);
INSERT INTO t SELECT g, 'code-' || md5(g::text), '2026-01-01'::timestamptz + g * interval '1 ms', g / 100.0, jsonb_build_object('g', g) FROM generate_series(1, 6000) g`,
				"name: t\nsource:\n  dsn: %[1]s\n  table: t\n  cursor: [updated_at, id]\nsink:\n  dsn: %[2]s\n  table: t\n  key: ["+key+"]\n")
			ctx := context.Background()
			f.src.Exec(t, `DELETE FROM t WHERE id % 50 = 1`)                 // extra in the copy: hard deletes
			f.dst.Exec(t, `UPDATE t SET val = val + 0.01 WHERE id % 50 = 2`) // changed
			f.dst.Exec(t, `DELETE FROM t WHERE id % 50 = 3`)                 // missing from the copy
			rep, err := reconcile.Run(ctx, f.cfg, f.store, reconcile.Options{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			assertCounts(t, rep, per, per, per)
			// One source row per missing key, one copy row per extra key,
			// one of each per changed key: nothing else is read whole.
			if want := int64(4 * per); rep.RowsFetched != want {
				t.Errorf("fetched %d whole rows; want %d (the differing rows only)", rep.RowsFetched, want)
			}
			// Every range differs: each side's rows are streamed once as
			// (key, hash), not more.
			if max := int64(2 * n); rep.HashesRead == 0 || rep.HashesRead > max {
				t.Errorf("streamed %d (key, hash) pairs; want between 1 and %d", rep.HashesRead, max)
			}
			if len(rep.Keys.Missing) != reconcile.MaxKeys || len(rep.Keys.Extra) != reconcile.MaxKeys || len(rep.Keys.Changed) != reconcile.MaxKeys {
				t.Errorf("key lists hold %d, %d, %d keys; want %d each", len(rep.Keys.Missing), len(rep.Keys.Extra), len(rep.Keys.Changed), reconcile.MaxKeys)
			}
			t.Logf("key %s: fetched %d rows, streamed %d pairs, %d checksum queries", key, rep.RowsFetched, rep.HashesRead, rep.ChecksumQueries)
			rep, err = reconcile.Run(ctx, f.cfg, f.store, reconcile.Options{Repair: true, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Clean() || rep.Repair.Inserted != per || rep.Repair.Deleted != per || rep.Repair.Updated != per {
				t.Fatalf("repair: %+v, after %+v", rep.Repair, rep.After)
			}
			assertSameTables(t, f.src, f.dst, "t")
		})
	}
}
