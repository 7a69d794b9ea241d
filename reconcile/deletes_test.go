package reconcile_test

import (
	"fmt"
	"testing"

	"github.com/syncd/syncd/reconcile"
)

const softTable = `CREATE TABLE t (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, deleted %s, val text);
INSERT INTO t SELECT g, '2026-01-01'::timestamptz + g * interval '1 s', NULL, 'v' || g FROM generate_series(1, 200) g`

const softYAML = `name: t
source:
  dsn: %[1]s
  table: t
  cursor: [updated_at, id]
  deleted_column: deleted
sink:
  dsn: %[2]s
  table: t
`

func copyIDs(t *testing.T, f *fixture, where string) []string {
	t.Helper()
	return queryStrings(t, f.dst, "SELECT id::text FROM t WHERE "+where+" ORDER BY id")
}

func TestSoftDeleteRemovesRows(t *testing.T) {
	for _, typ := range []struct{ name, ddl, mark string }{
		{"timestamp", "timestamptz", "now()"},
		{"boolean", "boolean", "true"},
	} {
		t.Run(typ.name, func(t *testing.T) {
			t.Parallel()
			f := newSimple(t, fmtDDL(typ.ddl), softYAML)
			f.src.Exec(t, "UPDATE t SET deleted = "+typ.mark+", updated_at = '2026-02-01' WHERE id IN (5, 6)")
			if typ.ddl == "boolean" {
				f.src.Exec(t, "UPDATE t SET deleted = false, updated_at = '2026-02-01' WHERE id = 7") // false is not deleted
			}
			if res := f.sync(t); res.Deleted != 2 {
				t.Errorf("the run deleted %d rows, want 2", res.Deleted)
			}
			if got := copyIDs(t, f, "id < 10"); !equalStrings(got, "1", "2", "3", "4", "7", "8", "9") {
				t.Fatalf("copy holds %v; want rows 5 and 6 removed", got)
			}
			// Re-applying the lookback window deletes nothing more and
			// re-inserts nothing.
			f.sync(t)
			if got := copyIDs(t, f, "true"); len(got) != 198 {
				t.Fatalf("copy has %d rows, want 198", len(got))
			}
			assertCounts(t, f.reconcile(t, reconcile.Options{}), 0, 0, 0)

			// Un-deleting brings the row back.
			f.src.Exec(t, "UPDATE t SET deleted = NULL, updated_at = '2026-03-01' WHERE id = 5")
			f.sync(t)
			if got := copyIDs(t, f, "id IN (5, 6)"); !equalStrings(got, "5") {
				t.Fatalf("copy holds %v of rows 5 and 6; want 5 back", got)
			}
			// A deleted row still in the copy (deleted before the copy
			// learnt about deletes) is extra, and repair removes it.
			f.dst.Exec(t, "INSERT INTO t VALUES (6, '2026-02-01', NULL, 'v6')")
			rep := f.reconcile(t, reconcile.Options{Repair: true})
			assertKeys(t, "extra", rep.Keys.Extra, "6")
			assertCounts(t, rep, 0, 1, 0)
			if !rep.Clean() || len(copyIDs(t, f, "id = 6")) != 0 {
				t.Fatalf("repair did not remove row 6: %+v", rep.After)
			}
		})
	}
}

func TestSoftDeleteKeepDeleted(t *testing.T) {
	f := newSimple(t, fmtDDL("boolean"), softYAML+"  keep_deleted: true\n")
	f.src.Exec(t, "UPDATE t SET deleted = true, updated_at = '2026-02-01' WHERE id IN (5, 6)")
	f.sync(t)
	if got := copyIDs(t, f, "deleted"); !equalStrings(got, "5", "6") {
		t.Fatalf("copy flags %v as deleted; want 5 and 6 kept with the flag", got)
	}
	if got := copyIDs(t, f, "true"); len(got) != 200 {
		t.Fatalf("copy has %d rows, want all 200", len(got))
	}
	assertCounts(t, f.reconcile(t, reconcile.Options{}), 0, 0, 0)
	// The flag is compared like any value.
	f.dst.Exec(t, "UPDATE t SET deleted = false WHERE id = 5")
	rep := f.reconcile(t, reconcile.Options{})
	assertKeys(t, "changed", rep.Keys.Changed, "5")
}

func TestHardDeleteIsExtraAndRepaired(t *testing.T) {
	f := newSimple(t, fmtDDL("boolean"), softYAML)
	f.src.Exec(t, "DELETE FROM t WHERE id IN (3, 150)")
	f.sync(t) // a cursor never sees a hard delete
	rep := f.reconcile(t, reconcile.Options{Repair: true})
	assertKeys(t, "extra", rep.Keys.Extra, "3", "150")
	assertCounts(t, rep, 0, 2, 0)
	if !rep.Clean() || rep.Repair.Deleted != 2 {
		t.Fatalf("repair: %+v, after %+v", rep.Repair, rep.After)
	}
	assertSameTables(t, f.src, f.dst, "t")
}

func fmtDDL(typ string) string { return fmt.Sprintf(softTable, typ) }

func equalStrings(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
