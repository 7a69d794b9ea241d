package reconcile_test

import (
	"testing"

	"github.com/syncd/syncd/reconcile"
)

func TestIdenticalTablesAreEqual(t *testing.T) {
	f := newFixture(t, 3000, "")
	rep := f.reconcile(t, reconcile.Options{})
	assertCounts(t, rep, 0, 0, 0)
	if rep.RowsCompared != 3000 || rep.CopyRows != 3000 {
		t.Errorf("rows compared %d, copy rows %d; want 3000, 3000", rep.RowsCompared, rep.CopyRows)
	}
	if rep.RowsFetched != 0 {
		t.Errorf("identical tables fetched %d rows; want 0", rep.RowsFetched)
	}
	f.assertSameRows(t)
}

func TestEachKindOfDifference(t *testing.T) {
	f := newFixture(t, 3000, "")
	f.dst.Exec(t, `DELETE FROM public.items_copy WHERE id IN (11, 2999)`)
	f.dst.Exec(t, `INSERT INTO public.items_copy (id, updated_at, t) VALUES (5001, now(), 'not in the source')`)
	f.src.Exec(t, `DELETE FROM public.items WHERE id = 12`) // a hard delete
	changes := []string{
		`UPDATE public.items_copy SET i = i + 1 WHERE id = 21`,
		`UPDATE public.items_copy SET b = b - 1 WHERE id = 22`,
		`UPDATE public.items_copy SET n = n + 0.000000001 WHERE id = 23`,
		`UPDATE public.items_copy SET t = t || ' ' WHERE id = 24`,
		`UPDATE public.items_copy SET f = NOT f WHERE id = 25`,
		`UPDATE public.items_copy SET tz = tz + interval '1 microsecond' WHERE id = 26`,
		`UPDATE public.items_copy SET ts = ts - interval '1 microsecond' WHERE id = 27`,
		`UPDATE public.items_copy SET d = d + 1 WHERE id = 28`,
		`UPDATE public.items_copy SET j = j || '{"g": "28"}' WHERE id = 29`,
		`UPDATE public.items_copy SET a = ARRAY['x29', NULL, NULL] WHERE id = 31`,
		`UPDATE public.items_copy SET by = by || '\x00'::bytea WHERE id = 32`,
		`UPDATE public.items_copy SET u = md5('other')::uuid WHERE id = 33`,
		`UPDATE public.items_copy SET fl = fl * (1 + 1e-15) WHERE id = 34`,
		`UPDATE public.items_copy SET t = NULL WHERE id = 40`,     // '' in the source
		`UPDATE public.items_copy SET t = '' WHERE id = 41`,       // NULL in the source
		`UPDATE public.items_copy SET price = 2.01 WHERE id = 42`, // 2.0 in the source
		`UPDATE public.items_copy SET updated_at = updated_at - interval '1 microsecond' WHERE id = 43`,
		`UPDATE public.items_copy SET nums[2] = 44.001 WHERE id = 44`,
		`UPDATE public.items_copy SET doc = '{"a": [1, 2.50], "b": 0}' WHERE id = 45`,
	}
	for _, q := range changes {
		f.dst.Exec(t, q)
	}
	rep := f.reconcile(t, reconcile.Options{})
	assertKeys(t, "missing", rep.Keys.Missing, "11", "2999")
	assertKeys(t, "extra", rep.Keys.Extra, "12", "5001")
	assertKeys(t, "changed", rep.Keys.Changed, "21", "22", "23", "24", "25", "26", "27", "28", "29", "31", "32", "33", "34", "40", "41", "42", "43", "44", "45")
	assertCounts(t, rep, 2, 2, 19)
	if rep.RowsFetched > 3000 {
		t.Errorf("fetched %d rows for %d differences", rep.RowsFetched, 23)
	}
	t.Logf("compared %d, fetched %d, %d checksum queries", rep.RowsCompared, rep.RowsFetched, rep.ChecksumQueries)

	rep = f.reconcile(t, reconcile.Options{Repair: true})
	assertCounts(t, rep, 2, 2, 19)
	if !rep.Repaired || rep.After == nil || !rep.After.Equal() || !rep.Clean() {
		t.Fatalf("repair left differences: %+v", rep.After)
	}
	if r := rep.Repair; r.Inserted != 2 || r.Deleted != 2 || r.Updated != 19 {
		t.Errorf("repair wrote %+v; want 2 inserted, 19 updated, 2 deleted", *r)
	}
	f.assertSameRows(t)
}
