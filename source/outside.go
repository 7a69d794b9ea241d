package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
)

// Outside counts the selected rows that no cursor page can reach: rows
// with NULL in a cursor column (a row-value comparison never returns them)
// and rows whose first cursor column lies past the source's clock plus
// ClockAllowance ('infinity', a typo'd year), which the watermark must
// never follow. A run copies them in an extra pass keyed by sink.key
// (ReadOutside) without touching the watermark.
type Outside struct {
	// NullCursor is the number of rows with NULL in a cursor column.
	NullCursor int64
	// Ahead is the number of rows, with no NULL cursor column, whose first
	// cursor column is past Limit.
	Ahead int64
	// Limit is the source's clock plus ClockAllowance in the first cursor
	// column's type ("" when that column is not a date or timestamp).
	Limit string
	// Estimated is set by CountOutsideWithin when counting took longer
	// than it allows (no index answers the predicates): NullCursor and
	// Ahead are then the planner's estimate, and Took is the time allowed.
	Estimated bool
	Took      time.Duration
}

// Total is the number of rows outside the cursor's reach.
func (o Outside) Total() int64 { return o.NullCursor + o.Ahead }

// outsidePredicates returns the SQL conditions of the two kinds of rows, ""
// for a kind that cannot occur (no nullable cursor column; a first cursor
// column that is not temporal). The limit is parameter $1 as text of the
// column's base type.
func (r *Reader) outsidePredicates() (null, ahead string) {
	return r.outsidePredicatesAt("")
}

// outsidePredicatesAt is outsidePredicates with the limit given as an SQL
// expression of the first cursor column's base type ("": parameter $1).
func (r *Reader) outsidePredicatesAt(limit string) (null, ahead string) {
	var nulls []string
	for _, col := range r.table.Cursor {
		if !col.NotNull {
			nulls = append(nulls, pgutil.Ident(col.Name)+" IS NULL")
		}
	}
	if len(nulls) > 0 {
		null = "(" + strings.Join(nulls, " OR ") + ")"
	}
	if r.table.Temporal {
		first := r.table.Cursor[0]
		if limit == "" {
			limit = "$1::" + baseType(first.Type)
		}
		ahead = pgutil.Ident(first.Name) + " > " + limit
	}
	return null, ahead
}

// outsideWhere is the WHERE clause selecting every row outside the cursor's
// reach (both kinds, within source.where), or "" when there can be none;
// limit is as for outsidePredicatesAt.
func (r *Reader) outsideWhere(limit string) string {
	null, ahead := r.outsidePredicatesAt(limit)
	var cond string
	switch {
	case null != "" && ahead != "":
		cond = "(" + null + " OR " + ahead + ")"
	case null != "":
		cond = null
	case ahead != "":
		cond = ahead
	default:
		return ""
	}
	if f := r.filter(); f != "" {
		cond += " AND " + f
	}
	return " WHERE " + cond
}

// clockLimitExpr is the source's clock plus ClockAllowance (parameter $1,
// an interval) as an SQL expression of the first cursor column's base
// type: a timestamp without time zone is taken as UTC, a date is the UTC
// day the limit falls in.
func (r *Reader) clockLimitExpr() string {
	switch baseType(r.table.Cursor[0].Type) {
	case "timestamp without time zone":
		return "((now() AT TIME ZONE 'UTC') + $1::interval)"
	case "date":
		return "((now() AT TIME ZONE 'UTC') + $1::interval)::date"
	}
	return "(now() + $1::interval)"
}

// clockAllowance is ClockAllowance as the text of an interval.
func clockAllowance() string {
	return fmt.Sprintf("%d microseconds", ClockAllowance.Microseconds())
}

// clockLimit is the source's clock plus ClockAllowance as text of the first
// cursor column's type (clockLimitExpr).
func (r *Reader) clockLimit(ctx context.Context) (string, error) {
	var limit string
	if err := r.conn.QueryRow(ctx, "SELECT "+r.clockLimitExpr()+"::text", clockAllowance()).Scan(&limit); err != nil {
		return "", fmt.Errorf("read the source clock for %s: %w", r.table.Ident, err)
	}
	return limit, nil
}

// CountOutside counts the rows outside the cursor's reach. When there are
// none it costs one query (one round trip, the clock limit included) that
// both predicates can answer from an index on the cursor columns.
func (r *Reader) CountOutside(ctx context.Context) (Outside, error) {
	return r.countOutside(ctx, r.conn)
}

// querier is a session or a transaction on it.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// countOutside counts on q. The clock limit is read by the counting statement itself (one round
// trip): now() is the same throughout a statement, so the limit the count
// compares with is exactly the text it returns, which ReadOutside then
// passes back as a parameter.
func (r *Reader) countOutside(ctx context.Context, q querier) (Outside, error) {
	var o Outside
	limit, lim := "", "''"
	var args []any
	if r.table.Temporal {
		limit = r.clockLimitExpr()
		lim = limit + "::text"
		args = append(args, clockAllowance())
	}
	where := r.outsideWhere(limit)
	if where == "" {
		return o, nil
	}
	null, _ := r.outsidePredicates()
	countNull, countAhead := "0::int8", "count(*)"
	if null != "" {
		countNull = "count(*) FILTER (WHERE " + null + ")"
		countAhead = "count(*) FILTER (WHERE NOT " + null + ")"
	}
	if !r.table.Temporal {
		countAhead = "0::int8"
	}
	sql := "SELECT " + lim + ", " + countNull + ", " + countAhead + " FROM " + pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name) + where
	if err := q.QueryRow(ctx, sql, args...).Scan(&o.Limit, &o.NullCursor, &o.Ahead); err != nil {
		return o, fmt.Errorf("count rows of %s outside the cursor's reach (NULL cursor, stamped ahead of the clock): %w", r.table.Ident, err)
	}
	return o, nil
}

// CountOutsideWithin is CountOutside for `syncd validate`, which must not
// scan every table of a schema: a count that takes longer than within
// (a scan of a big table: no index answers the predicates) is cancelled
// and replaced by the planner's estimate (Estimated). A run counts
// exactly (CountOutside).
func (r *Reader) CountOutsideWithin(ctx context.Context, within time.Duration) (Outside, error) {
	var o Outside
	err := pgx.BeginFunc(ctx, r.conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL statement_timeout = %d", within.Milliseconds())); err != nil {
			return err
		}
		var err error
		o, err = r.countOutside(ctx, tx)
		return err
	})
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != "57014" || ctx.Err() != nil {
		return o, err
	}
	// Cancelled by the timeout: the planner's estimate of each kind.
	null, ahead := r.outsidePredicates()
	o = Outside{Estimated: true, Took: within}
	var args []any
	if r.table.Temporal {
		if o.Limit, err = r.clockLimit(ctx); err != nil {
			return o, err
		}
		args = append(args, o.Limit)
	}
	from := " FROM " + pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name) + " WHERE "
	filter := ""
	if f := r.filter(); f != "" {
		filter = " AND " + f
	}
	estimate := func(cond string, args []any) (int64, error) {
		var plan []byte
		if err := r.conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) SELECT 1"+from+cond+filter, args...).Scan(&plan); err != nil {
			return 0, fmt.Errorf("estimate the rows of %s outside the cursor's reach: %w", r.table.Ident, err)
		}
		var p []struct {
			Plan struct {
				Rows float64 `json:"Plan Rows"`
			} `json:"Plan"`
		}
		if err := json.Unmarshal(plan, &p); err != nil || len(p) == 0 {
			return 0, fmt.Errorf("estimate the rows of %s outside the cursor's reach: unreadable plan", r.table.Ident)
		}
		return int64(p[0].Plan.Rows), nil
	}
	if null != "" {
		if o.NullCursor, err = estimate(null, nil); err != nil {
			return o, err
		}
	}
	if ahead != "" && r.statsAbove(ctx, o.Limit) {
		// The planner never estimates 0 rows: asked only when the
		// column's statistics hold a value past the limit.
		cond := ahead
		if null != "" {
			cond = "NOT " + null + " AND " + ahead
		}
		if o.Ahead, err = estimate(cond, args); err != nil {
			return o, err
		}
	}
	return o, nil
}

// statsAbove reports whether the statistics of the first cursor column
// (its histogram and most common values) hold a value past limit, or
// cannot tell.
func (r *Reader) statsAbove(ctx context.Context, limit string) bool {
	first := r.table.Cursor[0]
	typ := baseType(first.Type)
	var above bool
	err := r.conn.QueryRow(ctx, `SELECT EXISTS (
  SELECT 1 FROM pg_stats s,
    unnest(coalesce(s.histogram_bounds::text::`+typ+`[], '{}') || coalesce(s.most_common_vals::text::`+typ+`[], '{}')) v
  WHERE s.schemaname = $1 AND s.tablename = $2 AND s.attname = $3 AND v > $4::`+typ+`)`,
		r.table.Ident.Schema, r.table.Ident.Name, first.Name, limit).Scan(&above)
	return err != nil || above
}

// ReadOutside reads at most limit rows outside the cursor's reach, in
// sink.key order after the key values after (nil: from the first), and
// returns them as a page with no cursor (Last is nil: the watermark must
// not move) together with the key of its last row. o.Limit is the clock
// limit CountOutside took, so that the pages and the counts agree.
func (r *Reader) ReadOutside(ctx context.Context, o Outside, after []string, limit int) (page.Page, []string, error) {
	where := r.outsideWhere("")
	if where == "" {
		return page.Page{}, nil, nil
	}
	keys, err := r.keyColumns()
	if err != nil {
		return page.Page{}, nil, err
	}
	var params []string
	if r.table.Temporal {
		params = append(params, o.Limit)
	}
	names := make([]string, 0, len(r.table.Columns)+len(r.table.Cursor)+len(keys))
	for _, col := range r.table.Columns {
		names = append(names, col.Name)
	}
	var formats []int16
	if r.formats != nil {
		// The binary select also carries the cursor as text (UseBinary).
		for _, col := range r.table.Cursor {
			names = append(names, col.Name)
		}
		formats = slices.Clone(r.formats)
	}
	keyNames := make([]string, len(keys))
	for i, k := range keys {
		keyNames[i] = k.Name
		names = append(names, k.Name)
		if formats != nil {
			formats = append(formats, 0)
		}
	}
	q := "SELECT " + pgutil.IdentList("", names) + " FROM " + pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name) + where
	if after != nil {
		vals := make([]string, len(keys))
		for i, k := range keys {
			params = append(params, after[i])
			vals[i] = fmt.Sprintf("$%d::%s", len(params), k.Type)
		}
		q += " AND (" + pgutil.IdentList("", keyNames) + ") > (" + strings.Join(vals, ", ") + ")"
	}
	q += " ORDER BY " + pgutil.IdentList("", keyNames) + fmt.Sprintf(" LIMIT %d", limit)

	p := page.Page{Binary: r.formats != nil}
	n := len(r.table.Columns)
	var mem arena
	var next []string
	err = r.execFormats(ctx, q, params, formats, func(vals [][]byte) {
		p.Rows = append(p.Rows, mem.row(vals, n))
		next = next[:0]
		for _, v := range vals[len(vals)-len(keys):] {
			next = append(next, string(v))
		}
	})
	if err != nil {
		return page.Page{}, nil, fmt.Errorf("read rows of %s outside the cursor's reach: %w", r.table.Ident, err)
	}
	return p, next, nil
}

// keyColumns are the sink.key columns as selected from the source.
func (r *Reader) keyColumns() ([]page.Column, error) {
	var keys []page.Column
	for _, name := range r.cfg.Sink.Key {
		i := slices.IndexFunc(r.table.Columns, func(c page.Column) bool { return c.Name == name })
		if i < 0 {
			return nil, r.cfg.Errorf("sink.key", "key column %q of %s is not among source.columns; select it", name, r.table.Ident)
		}
		keys = append(keys, r.table.Columns[i])
	}
	return keys, nil
}

// Warnings says what a user must know about the rows outside the cursor's
// reach of table t, one line per kind; the run log and `syncd validate`
// print them.
func (o Outside) Warnings(t *Table) []string {
	var out []string
	names := make([]string, len(t.Cursor))
	for i, col := range t.Cursor {
		names[i] = col.Name
	}
	cursor := strings.Join(names, ", ")
	if o.Estimated {
		out = append(out, fmt.Sprintf("counting the rows of %s outside the cursor's reach (NULL cursor, ahead of the clock) took over %s: no index answers it, so each run scans the table for them; the figures below are the planner's estimates",
			t.Ident, o.Took))
	}
	about := ""
	if o.Estimated {
		about = "about "
	}
	if o.NullCursor > 0 {
		out = append(out, fmt.Sprintf(about+"%d rows of %s have a NULL cursor column (%s), which the cursor never reaches: each run copies them in an extra pass after its pages, without moving the watermark; set the column on those rows and make it NOT NULL (or give it a default) in the source",
			o.NullCursor, t.Ident, cursor))
	}
	if o.Ahead > 0 {
		first := t.Cursor[0].Name
		out = append(out, fmt.Sprintf(about+"%d rows of %s have %s past the source's clock plus %s (after %s, 'infinity' included): the watermark never follows them, so each run copies them in an extra pass after its pages; correct their %s in the source",
			o.Ahead, t.Ident, first, ClockAllowance, o.Limit, first))
	}
	return out
}
