package source

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgutil"
)

// CursorIndex is what the catalog says about an index that lets the page
// query walk the table in cursor order instead of sorting it.
type CursorIndex struct {
	// Name is a usable index ("" when there is none): a valid btree index
	// whose leading key columns are the cursor columns in order, all
	// ascending or all descending, with the columns' collations, and
	// without a predicate unless it reads as source.where.
	Name string
	// Analyzed is false when the table has no planner statistics (never
	// ANALYZEd, or empty when it was): the planner's choice then proves
	// nothing about the index.
	Analyzed bool
}

// CreateIndex is the statement that creates the index the cursor needs.
func (r *Reader) CreateIndex() string {
	cols := make([]string, len(r.table.Cursor))
	for i, c := range r.table.Cursor {
		cols[i] = c.Name
	}
	sql := "CREATE INDEX ON " + pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name) + " (" + pgutil.IdentList("", cols) + ")"
	if w := strings.TrimSpace(r.cfg.Source.Where); w != "" {
		sql += " WHERE " + w
	}
	return sql
}

// CheckCursorIndex reads from the catalog whether the table has an index
// the page query can walk in cursor order. It does not ask the planner:
// on a table that was never ANALYZEd the planner sorts even when such an
// index exists.
func (r *Reader) CheckCursorIndex(ctx context.Context) (CursorIndex, error) {
	t := r.table.Ident
	table := pgutil.Qualified(t.Schema, t.Name)
	fail := func(err error) (CursorIndex, error) {
		return CursorIndex{}, fmt.Errorf("read the indexes of %s: %w", t, err)
	}
	names := make([]string, len(r.table.Cursor))
	for i, c := range r.table.Cursor {
		names[i] = c.Name
	}
	// The cursor columns' attnums and collations, in cursor order.
	rows, err := r.conn.Query(ctx, `
SELECT a.attnum, a.attcollation::int8
FROM unnest($2::text[]) WITH ORDINALITY n(name, ord)
JOIN pg_attribute a ON a.attrelid = $1::regclass AND a.attname = n.name AND NOT a.attisdropped
ORDER BY n.ord`, table, names)
	if err != nil {
		return fail(err)
	}
	type col struct {
		Num  int16
		Coll int64
	}
	cols, err := pgx.CollectRows(rows, pgx.RowToStructByPos[col])
	if err != nil {
		return fail(err)
	}
	if len(cols) != len(names) {
		return fail(fmt.Errorf("found %d of the cursor columns %v", len(cols), names))
	}
	rows, err = r.conn.Query(ctx, `
SELECT i.indexrelid::regclass::text, am.amname, i.indnkeyatts::int,
       i.indkey::text, i.indoption::text, i.indcollation::text,
       coalesce(pg_get_expr(i.indpred, i.indrelid), '')
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_am am ON am.oid = ic.relam
WHERE i.indrelid = $1::regclass AND i.indisvalid AND i.indisready AND i.indislive
ORDER BY i.indpred IS NOT NULL, ic.relname`, table)
	if err != nil {
		return fail(err)
	}
	type index struct {
		Name, AM   string
		KeyAtts    int
		Key, Opt   string
		Coll, Pred string
	}
	idxs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[index])
	if err != nil {
		return fail(err)
	}
	var out CursorIndex
	for _, ix := range idxs {
		if ix.AM != "btree" || ix.KeyAtts < len(cols) {
			continue
		}
		key, opt, coll := strings.Fields(ix.Key), strings.Fields(ix.Opt), strings.Fields(ix.Coll)
		if len(key) < len(cols) || len(opt) < len(cols) || len(coll) < len(cols) {
			continue
		}
		ok := true
		for i, c := range cols {
			// indoption 0 is ASC NULLS LAST, the order of ORDER BY c; 3
			// (DESC NULLS FIRST) on every column is read backwards.
			if key[i] != strconv.Itoa(int(c.Num)) || opt[i] != opt[0] || opt[0] != "0" && opt[0] != "3" ||
				coll[i] != strconv.FormatInt(c.Coll, 10) {
				ok = false
				break
			}
		}
		if ok && (ix.Pred == "" || samePredicate(ix.Pred, r.cfg.Source.Where)) {
			out.Name = ix.Name
			break
		}
	}
	if err := r.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stats WHERE schemaname = $1 AND tablename = $2)`,
		t.Schema, t.Name).Scan(&out.Analyzed); err != nil {
		return fail(err)
	}
	return out, nil
}

var (
	// castRE matches a cast as PostgreSQL prints one, multi-word type
	// names included ("::timestamp with time zone", "::character varying").
	castRE  = regexp.MustCompile(`::\s*("[^"]+"|[a-z_][a-z0-9_.]*)(\s+(with|without)\s+time\s+zone|\s+varying|\s+precision)?(\[\])?`)
	spaceRE = regexp.MustCompile(`[\s()]+`)
)

// samePredicate says whether a partial index's predicate, as PostgreSQL
// prints it, reads as source.where: equal once case, spaces, parentheses
// and casts are set aside. A predicate that only implies the filter is not
// recognised (validate's EXPLAIN still shows whether the planner uses it).
func samePredicate(pred, where string) bool {
	norm := func(s string) string {
		s = strings.ToLower(strings.NewReplacer("(", " ", ")", " ").Replace(s))
		s = castRE.ReplaceAllString(s, "")
		return spaceRE.ReplaceAllString(s, "")
	}
	return strings.TrimSpace(where) != "" && norm(pred) == norm(where)
}

// smallTable is the size in bytes under which a sorting plan is not worth
// advice: 16 pages of 8 kB.
const smallTable = 16 * 8192

// IndexWarning is validate's advice about the page query's index ("" when
// none is needed): create the index when the catalog has none in cursor
// order; run ANALYZE when one exists but the planner, with statistics,
// still sorts. A table without statistics gets no advice about its plan
// (its first ANALYZE, autovacuum's or anyone's, lets the planner find the
// index), only the advice to run ANALYZE when nothing else will
// (statsWarning); a table smaller than 16 pages gets none, the planner
// rightly sorts it.
func (r *Reader) IndexWarning(ctx context.Context) (string, error) {
	ci, err := r.CheckCursorIndex(ctx)
	if err != nil {
		return "", err
	}
	cols := make([]string, len(r.table.Cursor))
	for i, c := range r.table.Cursor {
		cols[i] = c.Name
	}
	if ci.Name == "" {
		return fmt.Sprintf("the page query sorts the whole table on every page: no index of %s has the cursor columns (%s) first; create an index on (%s): %s",
			r.table.Ident, strings.Join(cols, ", "), strings.Join(cols, ", "), r.CreateIndex()), nil
	}
	if !ci.Analyzed {
		return r.statsWarning(ctx)
	}
	// A table of a few pages is sorted in no time, and the planner rightly
	// prefers it: no advice.
	var small bool
	if err := r.conn.QueryRow(ctx, `SELECT relkind <> 'p' AND pg_relation_size(oid) < $2 FROM pg_class WHERE oid = $1::regclass`,
		pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name), smallTable).Scan(&small); err != nil {
		return "", fmt.Errorf("read the size of %s: %w", r.table.Ident, err)
	}
	if small {
		return "", nil
	}
	pc, err := r.CheckPlan(ctx)
	if err != nil || !pc.Sorts {
		return "", err
	}
	return fmt.Sprintf("the page query sorts the whole table on every page (plan: %s) although index %s has the cursor columns first: the planner's statistics of %s are out of date; run ANALYZE %s",
		strings.Join(pc.Nodes, " > "), ci.Name, r.table.Ident, pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name)), nil
}

// statsWarning is the advice for a table without planner statistics that
// nothing will ANALYZE ("" otherwise): autovacuum is off on the server, or
// blind to changes (track_counts off), or off for the table. The planner
// then guesses the page query's plan for good, and a guess can sort the
// whole table on every page. A table smaller than 16 pages gets no advice
// (sorting it costs nothing), nor does a partitioned one (autovacuum never
// ANALYZEs a partitioned table itself, and the page query is planned with
// its partitions' statistics), nor one whose row-level security applies
// to the source role: pg_stats hides such a table's statistics from the
// role, so their absence there proves nothing.
func (r *Reader) statsWarning(ctx context.Context) (string, error) {
	table := pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name)
	var why string
	if err := r.conn.QueryRow(ctx, `SELECT CASE
  WHEN c.relkind = 'p' OR pg_relation_size(c.oid) < $2 OR c.relrowsecurity AND row_security_active(c.oid) THEN ''
  WHEN NOT current_setting('autovacuum')::bool THEN 'autovacuum is off on the server'
  WHEN NOT current_setting('track_counts')::bool THEN 'track_counts is off on the server, so autovacuum never sees the table change'
  WHEN EXISTS (SELECT FROM pg_options_to_table(c.reloptions) o WHERE o.option_name = 'autovacuum_enabled' AND NOT o.option_value::bool)
    THEN 'the table is set autovacuum_enabled = false'
  ELSE '' END
FROM pg_class c WHERE c.oid = $1::regclass`, table, smallTable).Scan(&why); err != nil {
		return "", fmt.Errorf("read whether autovacuum analyzes %s: %w", r.table.Ident, err)
	}
	if why == "" {
		return "", nil
	}
	return fmt.Sprintf("%s has no planner statistics and nothing will gather them (%s): the page query's plan is a guess, which can sort the whole table on every page; run ANALYZE %s, and again after large changes",
		r.table.Ident, why, table), nil
}

// RowSecurityWarning is validate's warning for a table whose row-level
// security applies to the source role ("" when it does not): the role
// reads only the rows its policies show it, so syncd copies, and
// reconcile compares, only those, and no run can tell that rows are
// missing from the copy.
func (r *Reader) RowSecurityWarning(ctx context.Context) (string, error) {
	var active bool
	var role string
	if err := r.conn.QueryRow(ctx, `SELECT c.relrowsecurity AND row_security_active(c.oid), current_user FROM pg_class c WHERE c.oid = $1::regclass`,
		pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name)).Scan(&active, &role); err != nil {
		return "", fmt.Errorf("read whether row-level security of %s applies: %w", r.table.Ident, err)
	}
	if !active {
		return "", nil
	}
	return fmt.Sprintf("row-level security of %s applies to the source role %s: syncd copies, and reconcile compares, only the rows its policies show that role; if the copy must hold every row, read with a role that has BYPASSRLS (or owns the table, when the table does not force row-level security)",
		r.table.Ident, pgutil.Ident(role)), nil
}

// warnedOnce holds the warnings (kind, config name, DSN without password,
// table) this process has checked for.
var warnedOnce sync.Map

// warnOnce logs check's warning the first time this process checks it for
// this source and table; later runs and reconciles ask nothing. A catalog
// that cannot be read is only noted at debug level (and asked again next
// time): nothing depends on it.
func (r *Reader) warnOnce(ctx context.Context, log *slog.Logger, kind string, check func(context.Context) (string, error)) {
	key := kind + "\x00" + r.cfg.Name + "\x00" + pgutil.Describe(r.cfg.Source.DSN) + "\x00" + r.table.Ident.String()
	if _, seen := warnedOnce.Load(key); seen {
		return
	}
	w, err := check(ctx)
	if err != nil {
		log.Debug("source not checked: "+kind, "err", err)
		return
	}
	warnedOnce.Store(key, true)
	if w != "" {
		log.Warn(w)
	}
}

// WarnRowSecurity logs RowSecurityWarning once per process, source and
// table: a run or reconcile that was never validated says it too.
func (r *Reader) WarnRowSecurity(ctx context.Context, log *slog.Logger) {
	r.warnOnce(ctx, log, "row-level security", r.RowSecurityWarning)
}

// WarnLocalTime logs LocalTimeWarning once per process, source and table.
func (r *Reader) WarnLocalTime(ctx context.Context, log *slog.Logger) {
	r.warnOnce(ctx, log, "TimeZone of the writers", r.LocalTimeWarning)
}
