package syncer

import (
	"context"
	"strings"

	"github.com/syncd/syncd/internal/saidonce"
	"github.com/syncd/syncd/source"
)

// indexWarned holds the sources whose missing cursor index this process
// has logged: the warning is said once per process and table, the metric
// syncd_cursor_index_missing says it for as long as it lasts.
var indexWarned saidonce.Set

// checkIndex reads from the catalog whether the source table has an index
// in cursor order, records it in the result and, the first time this
// process finds it missing, logs a warning: without it every page reads
// and sorts the whole table. A catalog that cannot be read is only noted:
// the run does not depend on it. The first run of a source in this
// process also logs whether its row-level security filters the source
// role (source.Reader.WarnRowSecurity).
func (r *runner) checkIndex(ctx context.Context, from source.Source) {
	src, ok := from.(source.Checker)
	if !ok {
		return
	}
	src.WarnRowSecurity(ctx, r.log)
	if ci := r.o.Schema.cursorIndex(r.c, r.src); ci != nil {
		// The table's indexes and statistics are as the last run read them.
		r.res.CursorIndex = ci
		return
	}
	ci, err := src.CheckCursorIndex(ctx)
	if err != nil {
		r.log.Debug("cursor index not checked", "err", err)
		return
	}
	r.res.CursorIndex = &ci
	if ci.Name != "" {
		indexWarned.Forget(r.c.Name) // dropped again later: said again
		return
	}
	if !indexWarned.First(r.c.Name) {
		return
	}
	r.log.Warn("no index has the cursor columns first: every page reads and sorts the whole table; create the index (said once; syncd_cursor_index_missing stays 1 meanwhile)",
		"table", from.Table().Ident.String(), "cursor", strings.Join(r.c.Source.Cursor, ", "), "create", src.CreateIndex())
}
