package sink

import (
	"context"
	"strings"

	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
)

// PrepareReplace readies ReplaceKeys on an existing copy that the key
// cannot identify rows of: no primary key or unique index on sink.key, or
// key columns that allow NULL. It checks nothing (reconcile has described
// the copy) and creates nothing; Apply and Repair still need Prepare.
func (s *Postgres) PrepareReplace(cols []page.Column) {
	s.cols = cols
	s.build()
}

// ReplaceKeys applies fixes to a copy whose key may be duplicated or NULL,
// in one transaction and without ON CONFLICT (which needs a unique index):
// every copy row a fix saw (Seen: same key and cursor values, a NULL key
// included) is deleted, then each source row (Row) is inserted unless the
// copy holds its key by then. A fix for a key held twice gives one Seen per
// copy row and the source row once: the copy is left with one correct row.
// A row a concurrent writer changed meanwhile has other cursor values and
// is kept, and then no source row is inserted beside it.
func (s *Postgres) ReplaceKeys(ctx context.Context, fixes []Fix) (RepairResult, error) {
	return s.applyFixes(ctx, fixes, s.replaceSQL())
}

func (s *Postgres) replaceSQL() repairSQL {
	key, guard := s.cfg.Sink.Key, s.guardColumns()
	target := s.qualified()
	names := make([]string, len(s.cols))
	for i, c := range s.cols {
		names[i] = c.Name
	}
	same := "ROW(" + pgutil.IdentList("t.", guard) + ") IS NOT DISTINCT FROM ROW(" + pgutil.IdentList("e.", guard) + ")"
	nullKey := func(prefix string) string {
		parts := make([]string, len(key))
		for i, k := range key {
			parts[i] = prefix + pgutil.Ident(k) + " IS NULL"
		}
		return "(" + strings.Join(parts, " OR ") + ")"
	}
	return repairSQL{
		delete: "DELETE FROM " + target + " AS t USING pg_temp.syncd_fix AS e WHERE e.syncd_op IN ('d', 'u') AND (" +
			pgutil.IdentList("t.", key) + ") = (" + pgutil.IdentList("e.", key) + ") AND " + same,
		// A NULL key equals nothing: those rows are matched on all their
		// guard values, among the copy's rows with a NULL key only.
		deleteNull: "DELETE FROM " + target + " AS t USING pg_temp.syncd_fix AS e WHERE e.syncd_op = 'd' AND " +
			nullKey("e.") + " AND " + nullKey("t.") + " AND " + same,
		insert: "INSERT INTO " + target + " (" + pgutil.IdentList("", names) + ") SELECT " + pgutil.IdentList("s.", names) +
			" FROM pg_temp.syncd_stage AS s WHERE NOT EXISTS (SELECT 1 FROM " + target + " AS x WHERE (" +
			pgutil.IdentList("x.", key) + ") = (" + pgutil.IdentList("s.", key) + "))",
	}
}
