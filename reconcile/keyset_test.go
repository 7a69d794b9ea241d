package reconcile_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/syncd/syncd/reconcile"
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
