package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/reconcile"
	"github.com/syncd/syncd/syncer"
)

// The density sample is sized in leaves: with 32-row leaves it reads 48
// ranges (integer key) or 1,536 rows per side (hashed key) and is taken
// from tables of 24,576 rows up, where 128-row leaves would need 98,304.
// The dense threshold is then ln 2 / 32 = 2.2% differing keys.
const sampleLeaf = 32

// denseDDL is a table of n rows with an integer key (id) and a text key
// (code), each with a unique index.
func denseDDL(n int) string {
	return fmt.Sprintf(`CREATE TABLE t (id bigint PRIMARY KEY, code text NOT NULL UNIQUE, updated_at timestamptz NOT NULL, val numeric(10,2), doc jsonb);
INSERT INTO t SELECT g, 'code-' || md5(g::text), '2026-01-01'::timestamptz + g * interval '1 ms', g / 100.0, jsonb_build_object('g', g) FROM generate_series(1, %d) g`, n)
}

func newDense(t *testing.T, n int, key string) *fixture {
	t.Helper()
	f := newSimple(t, denseDDL(n), "name: t\nsource:\n  dsn: %[1]s\n  table: t\n  cursor: [updated_at, id]\nsink:\n  dsn: %[2]s\n  table: t\n  key: ["+key+"]\n")
	f.dst.Exec(t, "ANALYZE t")
	return f
}

// diff is the test's own comparison of the two tables by key: the keys
// only in the source, only in the copy, and in both with other values.
type diff struct{ missing, extra, changed []string }

func compareTables(t *testing.T, src, dst *pgtest.DB, key string) diff {
	t.Helper()
	read := func(db *pgtest.DB) map[string]string {
		rows, err := db.Pool.Query(context.Background(), "SELECT "+key+"::text, t::text FROM t t")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			out[k] = v
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, b := read(src), read(dst)
	var d diff
	for k, v := range a {
		w, ok := b[k]
		switch {
		case !ok:
			d.missing = append(d.missing, k)
		case v != w:
			d.changed = append(d.changed, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d.extra = append(d.extra, k)
		}
	}
	return d
}

// assertMatches checks a report against the test's own comparison: exact
// counts, and every listed key (at most MaxKeys of each kind) among the
// keys of its kind.
func assertMatches(t *testing.T, rep *reconcile.Report, d diff) {
	t.Helper()
	assertCounts(t, rep, int64(len(d.missing)), int64(len(d.extra)), int64(len(d.changed)))
	for _, kind := range []struct {
		name       string
		got, wants []string
	}{{"missing", rep.Keys.Missing, d.missing}, {"extra", rep.Keys.Extra, d.extra}, {"changed", rep.Keys.Changed, d.changed}} {
		if want := min(len(kind.wants), reconcile.MaxKeys); len(kind.got) != want {
			t.Errorf("%s: %d keys listed; want %d", kind.name, len(kind.got), want)
		}
		for _, k := range kind.got {
			if !slices.Contains(kind.wants, k) {
				t.Errorf("%s: key %s listed, but it is not %s by the test's comparison", kind.name, k, kind.name)
			}
		}
	}
}

func rowCount(t *testing.T, db *pgtest.DB) int64 {
	t.Helper()
	var n int64
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDenseDifferencesStreamAtOnce puts 5% of the keys out of step all
// over the table (a third missing from the copy, a third extra, a third
// changed): the density sample must send the whole line to the (key, hash)
// stream without a checksum level, find exactly the differences the test's
// own comparison finds, read every row's pair once, and repair the copy.
func TestDenseDifferencesStreamAtOnce(t *testing.T) {
	const n = 30000
	for _, tc := range []struct{ key, by string }{{"id", "key_ranges"}, {"code", "keys"}} {
		t.Run("key="+tc.key, func(t *testing.T) {
			t.Parallel()
			f := newDense(t, n, tc.key)
			scatter(t, f)
			want := compareTables(t, f.src, f.dst, tc.key)
			if len(want.missing) < n/100 || len(want.extra) < n/100 || len(want.changed) < n/100 {
				t.Fatalf("setup: %d missing, %d extra, %d changed", len(want.missing), len(want.extra), len(want.changed))
			}

			rep := f.reconcile(t, reconcile.Options{LeafRows: sampleLeaf})
			if rep.Plan != reconcile.PlanStream {
				t.Fatalf("plan %q after sample %+v; want %q", rep.Plan, rep.Sample, reconcile.PlanStream)
			}
			if rep.Sample == nil || rep.Sample.By != tc.by || rep.Sample.Differing == 0 {
				t.Fatalf("sample %+v; want one by %s that found differences", rep.Sample, tc.by)
			}
			if rep.ChecksumQueries != 2*int64(b2i(tc.by == "key_ranges")) {
				t.Errorf("%d checksum queries; want only the sample's", rep.ChecksumQueries)
			}
			assertMatches(t, rep, want)
			srcRows, dstRows := rowCount(t, f.src), rowCount(t, f.dst)
			if rep.RowsCompared != srcRows || rep.CopyRows != dstRows {
				t.Errorf("rows compared %d, copy rows %d; want %d, %d", rep.RowsCompared, rep.CopyRows, srcRows, dstRows)
			}
			// Every row's pair once, plus the pairs a sample by keys read.
			pairs := srcRows + dstRows
			if tc.by == "keys" {
				pairs += rep.Sample.Rows
			}
			if rep.HashesRead != pairs {
				t.Errorf("read %d (key, hash) pairs; want %d", rep.HashesRead, pairs)
			}
			if want := int64(len(want.missing) + len(want.extra) + 2*len(want.changed)); rep.RowsFetched != want {
				t.Errorf("fetched %d whole rows; want %d (the differing rows)", rep.RowsFetched, want)
			}
			t.Logf("sample %+v; pairs %d, fetched %d", *rep.Sample, rep.HashesRead, rep.RowsFetched)

			rep = f.reconcile(t, reconcile.Options{LeafRows: sampleLeaf, Repair: true})
			if rep.Plan != reconcile.PlanStream || !rep.Clean() {
				t.Fatalf("repair: plan %q, repair %+v, after %+v", rep.Plan, rep.Repair, rep.After)
			}
			if r := rep.Repair; r.Inserted != int64(len(want.missing)) || r.Deleted != int64(len(want.extra)) || r.Updated != int64(len(want.changed)) {
				t.Errorf("repair wrote %+v; want %d inserted, %d deleted, %d updated", *r, len(want.missing), len(want.extra), len(want.changed))
			}
			// The repaired copy is equal: the comparison after the repair
			// samples no difference and takes the checksums.
			if rep.After.Plan != reconcile.PlanChecksums || rep.After.Sample == nil || rep.After.Sample.Differing != 0 {
				t.Errorf("after the repair: plan %q, sample %+v; want checksums after a sample without differences", rep.After.Plan, rep.After.Sample)
			}
			assertSameTables(t, f.src, f.dst, "t")
		})
	}
}

// scatter puts about 5% of the keys out of step at random places (by a
// hash of the key, not a period that could line up with the ranges): a
// third missing from the copy, a third extra (hard deletes), a third
// changed.
func scatter(t *testing.T, f *fixture) {
	t.Helper()
	f.src.Exec(t, `DELETE FROM t WHERE mod(abs(hashint8(id)), 60) = 1`)                 // extra in the copy
	f.dst.Exec(t, `UPDATE t SET val = val + 0.01 WHERE mod(abs(hashint8(id)), 60) = 2`) // changed
	f.dst.Exec(t, `DELETE FROM t WHERE mod(abs(hashint8(id)), 60) = 3`)                 // missing from the copy
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSparseDifferencesKeepChecksums: identical tables, ten differences,
// and 5% of the keys missing in one block of the integer key (a gap in a
// sync) are sampled and compared by checksums: streaming the whole line
// would read every row twice over for them.
func TestSparseDifferencesKeepChecksums(t *testing.T) {
	const n = 30000
	for _, key := range []string{"id", "code"} {
		t.Run("key="+key, func(t *testing.T) {
			t.Parallel()
			f := newDense(t, n, key)
			check := func(name string, fetched int64) {
				t.Helper()
				want := compareTables(t, f.src, f.dst, key)
				rep := f.reconcile(t, reconcile.Options{LeafRows: sampleLeaf})
				if rep.Plan != reconcile.PlanChecksums || rep.Sample == nil {
					t.Fatalf("%s: plan %q, sample %+v; want checksums after a sample", name, rep.Plan, rep.Sample)
				}
				assertMatches(t, rep, want)
				if fetched >= 0 && rep.RowsFetched != fetched {
					t.Errorf("%s: fetched %d whole rows; want %d", name, rep.RowsFetched, fetched)
				}
				if rep.RowsCompared != rowCount(t, f.src) {
					t.Errorf("%s: compared %d rows; want %d", name, rep.RowsCompared, rowCount(t, f.src))
				}
				t.Logf("%s: sample %+v; pairs %d, fetched %d, %d checksum queries", name, *rep.Sample, rep.HashesRead, rep.RowsFetched, rep.ChecksumQueries)
			}
			check("identical", 0)
			f.dst.Exec(t, `UPDATE t SET val = val + 0.01 WHERE id % 3000 = 7`)
			check("10 differences", 20)
			if key == "id" {
				// On the hashed line a block of keys is scattered like any
				// other 5%: dense, rightly. On the integer line it fills
				// 5% of the ranges.
				f.dst.Exec(t, `DELETE FROM t WHERE id BETWEEN 10001 AND 11500`)
				check("a block of 1,500 missing keys", -1)
			}
		})
	}
}

// TestSmallTableIsNotSampled: below the sampling size the comparison runs
// as before, dense or not: checksums first, then the differing ranges
// streamed.
func TestSmallTableIsNotSampled(t *testing.T) {
	f := newDense(t, 3000, "id")
	scatter(t, f)
	want := compareTables(t, f.src, f.dst, "id")
	rep := f.reconcile(t, reconcile.Options{LeafRows: sampleLeaf})
	if rep.Plan != reconcile.PlanChecksums || rep.Sample != nil {
		t.Fatalf("plan %q, sample %+v; want checksums without a sample", rep.Plan, rep.Sample)
	}
	assertMatches(t, rep, want)
	rep = f.reconcile(t, reconcile.Options{LeafRows: sampleLeaf, Repair: true})
	if !rep.Clean() {
		t.Fatalf("repair left differences: %+v", rep.After)
	}
	assertSameTables(t, f.src, f.dst, "t")
}

// TestDenseUnderConcurrentWrites streams a dense table while a writer
// updates and inserts source rows (outside the injected differences) and a
// sync loop copies them: rows written meanwhile are past the watermark the
// reconcile read, so exactly the injected differences are reported, and
// the repair leaves the copy equal once the writer stops.
func TestDenseUnderConcurrentWrites(t *testing.T) {
	const n = 30000
	for _, key := range []string{"id", "code"} {
		t.Run("key="+key, func(t *testing.T) {
			t.Parallel()
			f := newDense(t, n, key)
			scatter(t, f)
			want := compareTables(t, f.src, f.dst, key)

			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var writes, syncs atomic.Int64
			errs := make(chan error, 2)
			var once sync.Once
			stop := func() { once.Do(func() { cancel(); wg.Wait() }) }
			defer stop()
			wg.Add(2)
			go func() {
				defer wg.Done()
				conn, err := f.src.Pool.Acquire(ctx)
				if err != nil {
					errs <- err
					return
				}
				defer conn.Release()
				for i := 1; ctx.Err() == nil; i++ {
					_, err := conn.Exec(ctx, `UPDATE t SET val = val + 1, updated_at = now() WHERE id = $1 AND mod(abs(hashint8(id)), 60) NOT IN (1, 2, 3)`, 1+(i*37)%n)
					if err == nil && i%3 == 0 {
						_, err = conn.Exec(ctx, `INSERT INTO t VALUES ($1::bigint, 'new-' || $1::bigint, now(), 0, '{}')`, n+i)
					}
					if err != nil {
						if ctx.Err() == nil {
							errs <- err
						}
						return
					}
					writes.Add(1)
				}
			}()
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					_, err := syncer.Run(ctx, syncer.Options{Config: f.cfg, Store: f.store, Logger: quietLogger()})
					if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
						errs <- err
						return
					}
					syncs.Add(1)
					time.Sleep(20 * time.Millisecond) // pacing: the daemon's schedule between runs, not a wait for anything
				}
			}()
			var skipped int64
			for range 3 {
				rep := f.reconcile(t, reconcile.Options{LeafRows: sampleLeaf})
				if rep.Plan != reconcile.PlanStream {
					t.Fatalf("plan %q after sample %+v; want %q", rep.Plan, rep.Sample, reconcile.PlanStream)
				}
				assertMatches(t, rep, want)
				skipped += rep.SkippedUnsynced
			}
			stop()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if writes.Load() < 10 || syncs.Load() < 2 || skipped == 0 {
				t.Fatalf("too little concurrency to prove anything: %d writes, %d syncs, %d rows skipped as unsynced", writes.Load(), syncs.Load(), skipped)
			}
			t.Logf("%d writes, %d syncs, %d rows skipped as unsynced", writes.Load(), syncs.Load(), skipped)

			f.sync(t)
			rep := f.reconcile(t, reconcile.Options{LeafRows: sampleLeaf, Repair: true})
			if rep.Plan != reconcile.PlanStream || !rep.Clean() {
				t.Fatalf("repair: plan %q, repair %+v, after %+v", rep.Plan, rep.Repair, rep.After)
			}
			assertSameTables(t, f.src, f.dst, "t")
		})
	}
}
