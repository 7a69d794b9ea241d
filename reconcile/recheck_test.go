package reconcile_test

import (
	"testing"

	"github.com/syncd/syncd/reconcile"
)

// TestManyDifferencesRecheckedInBatches puts more differing keys than one
// re-read batch holds (5,000) into the copy: two thirds of the rows differ.
// Without a repair the batches are re-read on both sessions side by side;
// every difference must still be found and counted once, and each
// differing row read once per side. With a repair (one batch after the
// other) the copy ends equal.
func TestManyDifferencesRecheckedInBatches(t *testing.T) {
	const n = 15000
	for _, key := range []string{"id", "code"} {
		t.Run("key="+key, func(t *testing.T) {
			t.Parallel()
			f := newDense(t, n, key)
			f.src.Exec(t, `DELETE FROM t WHERE id % 3 = 1`)                 // extra in the copy
			f.dst.Exec(t, `UPDATE t SET val = val + 0.01 WHERE id % 3 = 2`) // changed
			f.dst.Exec(t, `DELETE FROM t WHERE id % 15 = 0`)                // missing from the copy
			want := compareTables(t, f.src, f.dst, key)
			if got := len(want.missing) + len(want.extra) + len(want.changed); got <= 2*5000 {
				t.Fatalf("setup: %d differing keys; want more than two batches", got)
			}

			rep := f.reconcile(t, reconcile.Options{LeafRows: sampleLeaf})
			assertMatches(t, rep, want)
			if want := int64(len(want.missing) + len(want.extra) + 2*len(want.changed)); rep.RowsFetched != want {
				t.Errorf("fetched %d whole rows; want %d (the differing rows)", rep.RowsFetched, want)
			}

			rep = f.reconcile(t, reconcile.Options{LeafRows: sampleLeaf, Repair: true})
			if !rep.Clean() {
				t.Fatalf("repair: %+v, after %+v", rep.Repair, rep.After)
			}
			if r := rep.Repair; r.Inserted != int64(len(want.missing)) || r.Deleted != int64(len(want.extra)) || r.Updated != int64(len(want.changed)) {
				t.Errorf("repair wrote %+v; want %d inserted, %d deleted, %d updated", *r, len(want.missing), len(want.extra), len(want.changed))
			}
			assertSameTables(t, f.src, f.dst, "t")
		})
	}
}
