package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/reconcile"
	"github.com/syncd/syncd/syncer"
)

func (f *fixture) keys(t *testing.T, o reconcile.Options) *reconcile.Report {
	t.Helper()
	o.Logger = quietLogger()
	rep, err := reconcile.Keys(context.Background(), f.cfg, f.store, o)
	if err != nil {
		t.Fatalf("key check: %v", err)
	}
	return rep
}

// TestKeysFindDeletedRows deletes 0.1% of the source's rows, scattered:
// the key check reports exactly those keys as extra and nothing else (a
// value changed in the copy is not its business), the repair deletes
// exactly them, and the copy then equals the source row by row, apart
// from the changed value that the full reconcile repairs.
func TestKeysFindDeletedRows(t *testing.T) {
	f := newFixture(t, 20000, "")
	var deleted []string
	for i := range 20 {
		deleted = append(deleted, strconv.Itoa(17+i*997))
	}
	f.src.Exec(t, "DELETE FROM public.items WHERE id = ANY('{"+join(deleted)+"}'::bigint[])")
	f.dst.Exec(t, "UPDATE public.items_copy SET t = 'changed in the copy' WHERE id = 5")
	f.dst.Exec(t, "DELETE FROM public.items_copy WHERE id = 4242") // a synced key the copy lost

	rep := f.keys(t, reconcile.Options{})
	if rep.Check != reconcile.CheckKeys || rep.Changed != 0 {
		t.Fatalf("check %q, changed %d; want a key check that does not compare values", rep.Check, rep.Changed)
	}
	assertKeys(t, "extra", rep.Keys.Extra, deleted...)
	assertKeys(t, "missing", rep.Keys.Missing, "4242")
	assertCounts(t, rep, 1, 20, 0)
	if rep.RowsCompared != 20000-20 || rep.CopyRows != 20000-1 {
		t.Errorf("keys compared %d (copy %d), want %d (%d)", rep.RowsCompared, rep.CopyRows, 20000-20, 20000-1)
	}
	if got := queryStrings(t, f.dst, "SELECT count(*)::text FROM public.items_copy"); got[0] != "19999" {
		t.Fatalf("a check without repair changed the copy: %s rows", got[0])
	}

	rep = f.keys(t, reconcile.Options{Repair: true})
	if rep.Repair == nil || rep.Repair.Deleted != 20 || rep.Repair.Inserted != 0 || rep.Repair.Updated != 0 {
		t.Fatalf("repair wrote %+v, want 20 rows deleted and nothing else", rep.Repair)
	}
	// The missing key is left to the full reconcile.
	if a := rep.After; a == nil || a.Extra != 0 || a.Missing != 1 {
		t.Fatalf("after the repair: %+v; want no extra key, the missing one left", rep.After)
	}
	full := f.reconcile(t, reconcile.Options{Repair: true})
	assertKeys(t, "missing", full.Keys.Missing, "4242")
	assertKeys(t, "changed", full.Keys.Changed, "5")
	assertCounts(t, full, 1, 0, 1)
	f.assertSameRows(t)
	if rep := f.keys(t, reconcile.Options{}); !rep.Clean() || rep.Missing+rep.Extra != 0 {
		t.Fatalf("the key check of an equal copy: %+v", rep)
	}
}

func join(keys []string) string { return strings.Join(keys, ",") }

// TestKeysRepairUnderWrites runs the key check with repair while a writer
// updates, inserts, hard-deletes and deletes-then-re-inserts source rows
// and a sync loop copies them, as a daemon would. A trigger on the copy
// logs every row deleted from it (only the repair deletes): no deleted
// copy row may still exist at the source, key and cursor alike. Once the
// writer stops, a sync and one more repair leave the copy equal to the
// source row by row.
func TestKeysRepairUnderWrites(t *testing.T) {
	f := newFixture(t, 3000, "")
	addDeleteLog(t, f)
	f.src.Exec(t, `DELETE FROM public.items WHERE id IN (11, 222, 1333, 2444, 2999)`)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var writes, syncs atomic.Int64
	errs := make(chan error, 2)
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); wg.Wait() }) }
	defer stop()
	wg.Add(2)
	go func() { // one writer connection
		defer wg.Done()
		conn, err := f.src.Pool.Acquire(ctx)
		if err != nil {
			errs <- err
			return
		}
		defer conn.Release()
		for n := 1; ctx.Err() == nil; n++ {
			id := 100 + (n*37)%2800
			var err error
			switch n % 4 {
			case 0: // an update that moves the cursor
				_, err = conn.Exec(ctx, `UPDATE public.items SET t = $2, updated_at = now() WHERE id = $1`, id, fmt.Sprint("write ", n))
			case 1: // a new row
				_, err = conn.Exec(ctx, `INSERT INTO public.items (id, updated_at, t) VALUES ($1, now(), 'new')`, 100000+n)
			case 2: // a hard delete
				_, err = conn.Exec(ctx, `DELETE FROM public.items WHERE id = $1`, id)
			case 3: // deleted and inserted again, the key reused
				_, err = conn.Exec(ctx, `DELETE FROM public.items WHERE id = $1`, 100000+n-2)
				if err == nil {
					_, err = conn.Exec(ctx, `INSERT INTO public.items (id, updated_at, t) VALUES ($1, now(), 'again')`, 100000+n-2)
				}
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
	go func() { // the daemon's sync loop
		defer wg.Done()
		for ctx.Err() == nil {
			_, err := syncer.Run(ctx, syncer.Options{Config: f.cfg, Store: f.store, Logger: quietLogger()})
			if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				errs <- err
				return
			}
			syncs.Add(1)
		}
	}()
	var deleted int64
	for range 6 {
		rep := f.keys(t, reconcile.Options{Repair: true, LeafRows: 16})
		deleted += rep.Deleted()
	}
	stop()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if writes.Load() < 20 || syncs.Load() < 2 || deleted < 5 {
		t.Fatalf("too little concurrency to prove anything: %d writes, %d syncs, %d rows deleted by the repairs", writes.Load(), syncs.Load(), deleted)
	}
	t.Logf("%d writes, %d syncs, %d rows deleted by the repairs", writes.Load(), syncs.Load(), deleted)
	assertNoLiveRowDeleted(t, f)

	f.sync(t)
	rep := f.keys(t, reconcile.Options{Repair: true})
	if a := rep.Final(); a.Missing+a.Extra != 0 || a.NotCoveredRows() != 0 {
		t.Fatalf("caught up, the key check still finds %+v", a)
	}
	assertNoLiveRowDeleted(t, f)
	if full := f.reconcile(t, reconcile.Options{}); !full.Clean() {
		t.Fatalf("the full reconcile after the key repair: %+v", full)
	}
	f.assertSameRows(t)
}

// assertNoLiveRowDeleted fails when a copy row deleted by a repair (the
// copy's deleted_log) is still a row of the source, same key and cursor.
func assertNoLiveRowDeleted(t *testing.T, f *fixture) {
	t.Helper()
	logged := queryStrings(t, f.dst, "SELECT id::text || '|' || updated_at::text FROM deleted_log")
	live := queryStrings(t, f.src, "SELECT id::text || '|' || updated_at::text FROM public.items")
	have := map[string]bool{}
	for _, r := range live {
		have[r] = true
	}
	for _, r := range logged {
		if have[r] {
			t.Errorf("the repair deleted copy row %s, which the source still holds", r)
		}
	}
}

// TestKeysKeepRowsWrittenMeanwhile writes between the key check's range
// streams and its second read of the differing keys: key 7, deleted at
// the source and so extra in the streams, is inserted again and synced
// meanwhile; key 8, deleted too, stays deleted. The repair deletes 8 only:
// the second read finds 7 at the source again.
func TestKeysKeepRowsWrittenMeanwhile(t *testing.T) {
	f := newFixture(t, 2000, "")
	addDeleteLog(t, f)
	f.src.Exec(t, `DELETE FROM public.items WHERE id IN (7, 8)`)
	var once sync.Once
	rep, err := reconcile.Keys(context.Background(), f.cfg, f.store, reconcile.Options{Repair: true, Logger: quietLogger(),
		BeforeRecheck: func([][]string) {
			once.Do(func() {
				f.src.Exec(t, `INSERT INTO public.items (id, updated_at, t) VALUES (7, now(), 'again')`)
				f.sync(t)
			})
		}})
	if err != nil {
		t.Fatal(err)
	}
	assertKeys(t, "extra", rep.Keys.Extra, "8")
	if rep.Deleted() != 1 {
		t.Fatalf("the repair deleted %d rows, want 1 (key 8)", rep.Deleted())
	}
	assertNoLiveRowDeleted(t, f)
	if full := f.reconcile(t, reconcile.Options{}); !full.Clean() {
		t.Fatalf("the full reconcile after the key repair: %+v", full)
	}
}

// addDeleteLog makes the copy log every row deleted from it in deleted_log.
func addDeleteLog(t *testing.T, f *fixture) {
	t.Helper()
	f.dst.Exec(t, `CREATE TABLE deleted_log (id bigint, updated_at timestamptz)`)
	f.dst.Exec(t, `CREATE FUNCTION log_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO deleted_log VALUES (OLD.id, OLD.updated_at); RETURN OLD; END $$`)
	f.dst.Exec(t, `CREATE TRIGGER log_delete AFTER DELETE ON public.items_copy FOR EACH ROW EXECUTE FUNCTION log_delete()`)
}

// TestKeysCompositeCollatedKey checks a composite key whose text part
// sorts by a Swedish ICU collation at the source ('ä' after 'z', case
// and accents apart) and byte-wise in the copy ("C"): the ranges do not
// depend on either order, so the check finds exactly the deleted keys
// (some differing from kept ones only by case or accent), and the repair
// leaves the copy equal to the source row by row.
func TestKeysCompositeCollatedKey(t *testing.T) {
	f := &fixture{src: pgtest.NewDB(t), dst: pgtest.NewDB(t)}
	f.src.Exec(t, `CREATE TABLE t (region text COLLATE "sv-x-icu" NOT NULL, n int NOT NULL, updated_at timestamptz NOT NULL, val text, PRIMARY KEY (region, n))`)
	f.src.Exec(t, `INSERT INTO t SELECT r, g, '2026-01-01'::timestamptz + g * interval '1 s', r || g
FROM unnest('{a,A,ä,Ä,å,z,Z,ö,o,O,_x,x y,aa,ß,ss,é,e,E}'::text[]) r, generate_series(1, 400) g`)
	f.src.Exec(t, `ANALYZE t`)
	f.dst.Exec(t, `CREATE TABLE t (region text COLLATE "C" NOT NULL, n int NOT NULL, updated_at timestamptz NOT NULL, val text, PRIMARY KEY (region, n))`)
	f.configure(t, fmt.Sprintf("name: t\nsource:\n  dsn: %s\n  table: t\n  cursor: [updated_at, region, n]\nsink:\n  dsn: %s\n  table: t\n  key: [region, n]\n", f.src.URL, f.dst.URL))
	deleted := []string{"A,17", "ä,200", "Ä,201", "ss,3", "ß,4", "E,399", "x y,1", "_x,400"}
	for _, k := range deleted {
		region, n, _ := strings.Cut(k, ",")
		f.src.Exec(t, "DELETE FROM t WHERE region = $1 AND n = $2", region, n)
	}
	rep := f.keys(t, reconcile.Options{LeafRows: 16})
	assertKeys(t, "extra", rep.Keys.Extra, deleted...)
	assertCounts(t, rep, 0, int64(len(deleted)), 0)
	rep = f.keys(t, reconcile.Options{Repair: true, LeafRows: 16})
	if rep.Deleted() != int64(len(deleted)) || !rep.Clean() {
		t.Fatalf("repair deleted %d rows (want %d), after it: %+v", rep.Deleted(), len(deleted), rep.After)
	}
	q := `SELECT region || '|' || n || '|' || updated_at || '|' || val FROM t ORDER BY region COLLATE "C", n`
	if a, b := queryStrings(t, f.src, q), queryStrings(t, f.dst, q); !slices.Equal(a, b) {
		t.Fatalf("after the repair the copy has %d rows, the source %d, or they differ", len(b), len(a))
	}
}
