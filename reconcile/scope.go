package reconcile

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// Reasons why source rows were not compared (the keys of Report.NotCovered
// and the label "reason" of syncd_reconcile_not_covered).
const (
	// ReasonPending: the row's cursor is past the watermark (and neither
	// NULL nor ahead of the source's clock): the next run copies it.
	ReasonPending = "pending"
	// ReasonNoWatermark: the source has no watermark yet (no run, or a
	// resync --from-start): no row counts as synced.
	ReasonNoWatermark = "no_watermark"
)

// Reasons lists every reason, in the order reports print them.
var Reasons = []string{ReasonPending, ReasonNoWatermark}

// ReasonText says what a reason means, for people.
var ReasonText = map[string]string{
	ReasonPending:     "pending: newer than the watermark",
	ReasonNoWatermark: "no watermark yet",
}

// coverage says which source rows one reconcile compares and which it
// cannot judge yet. Every condition is on bare column names of the source.
type coverage struct {
	where string // source.where, "" when none
	scope string // where, minus soft-deleted rows unless the copy keeps them
	// synced: the cursor is at or before the watermark; past: it is after
	// it. Both "" without a watermark.
	synced, past string
	// null: some cursor column is NULL (a run copies those rows in its
	// extra pass, whatever the watermark).
	null string
	// ahead: the first cursor column is past the source's clock plus
	// source.ClockAllowance (copied by the same pass); "" for a cursor that
	// is not a date or timestamp.
	ahead       string
	boundary    string
	noWatermark bool
	// whole: every row in scope is compared, whatever the watermark
	// (Options.WholeTable).
	whole bool
}

// compared is the condition on the source rows that reconcile compares:
// synced, or with a NULL cursor, or ahead of the clock.
func (cv *coverage) compared() string {
	if cv.whole {
		return "" // every row
	}
	parts := []string{cv.null}
	if cv.synced != "" {
		parts = append(parts, cv.synced)
	}
	if cv.ahead != "" {
		parts = append(parts, cv.ahead)
	}
	return "(" + strings.Join(parts, ") OR (") + ")"
}

// newCoverage builds the conditions for cfg's source at watermark st; the
// line past the clock is read from the source now. whole compares every
// row instead (Options.WholeTable): no cursor, no watermark.
func newCoverage(ctx context.Context, cfg *config.Config, src pgSource, st watermark.State, whole bool) (*coverage, error) {
	t := src.Table()
	cv := &coverage{where: strings.TrimSpace(cfg.Source.Where), scope: sourceScope(cfg, t)}
	if whole {
		cv.whole = true
		cv.boundary = "every row of the table"
		return cv, nil
	}
	nulls := make([]string, len(t.Cursor))
	for i, col := range t.Cursor {
		nulls[i] = pgutil.Ident(col.Name) + " IS NULL"
	}
	cv.null = strings.Join(nulls, " OR ")
	var ok bool
	cv.synced, cv.past, cv.boundary, ok = syncedPredicate(cfg, t, st)
	cv.noWatermark = !ok
	if t.Temporal {
		var now time.Time
		if err := src.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
			return nil, fmt.Errorf("read the clock of the source of %s: %w", cfg.Name, err)
		}
		line := now.UTC().Add(source.ClockAllowance).Format("2006-01-02 15:04:05.999999") + "+00"
		// A date or timestamp column compares with a timestamptz in the
		// session's time zone, which every syncd connection pins to UTC.
		cv.ahead = pgutil.Ident(t.Cursor[0].Name) + " > " + literal(line) + "::timestamptz"
		if ok {
			cv.boundary += fmt.Sprintf("; rows with %s > %s (past the source's clock + %s)", t.Cursor[0].Name, line, source.ClockAllowance)
		}
	}
	if ok {
		cv.boundary += "; rows with a NULL cursor"
	}
	return cv, nil
}

// sourceScope is the condition selecting the source rows the copy must
// hold: source.where, and not soft-deleted unless the copy keeps them.
func sourceScope(cfg *config.Config, t *source.Table) string {
	scope := strings.TrimSpace(cfg.Source.Where)
	if d := cfg.Source.DeletedColumn; d != "" && !cfg.Sink.KeepDeleted {
		typ := ""
		for _, col := range t.Columns {
			if col.Name == d {
				typ = col.Type
			}
		}
		scope = and(scope, "NOT ("+sink.DeletedPredicate(pgutil.Ident(d), typ)+")")
	}
	return scope
}

// syncedPredicate is the condition that a source row is at or before the
// watermark, the condition that it is after it, and a sentence saying so;
// ok is false when no row is synced.
func syncedPredicate(cfg *config.Config, t *source.Table, st watermark.State) (synced, past, text string, ok bool) {
	switch {
	case len(st.Cursor) == len(t.Cursor) && len(st.Cursor) > 0:
		cols := make([]string, len(t.Cursor))
		vals := make([]string, len(t.Cursor))
		for i, col := range t.Cursor {
			cols[i] = pgutil.Ident(col.Name)
			vals[i] = literal(st.Cursor[i]) + "::" + col.Type
		}
		row, wm := "("+strings.Join(cols, ", ")+")", "("+strings.Join(vals, ", ")+")"
		return row + " <= " + wm, row + " > " + wm,
			fmt.Sprintf("rows with (%s) <= (%s), the watermark", strings.Join(cfg.Source.Cursor, ", "), strings.Join(st.Cursor, ", ")), true
	case st.From != "" && t.Temporal:
		col := t.Cursor[0]
		from := literal(st.From) + "::" + col.Type
		return pgutil.Ident(col.Name) + " < " + from, pgutil.Ident(col.Name) + " >= " + from,
			fmt.Sprintf("rows with %s < %s (a resync moved the watermark back)", col.Name, st.From), true
	}
	return "", "", "no watermark yet, so no row is synced; run `syncd run --once --source " + cfg.Name + "` first", false
}

// countCoverage counts, after the comparison, the compared source rows
// with a NULL cursor and ahead of the clock, and the rows left out because
// they are past the watermark. Only rows past the watermark, with a NULL
// cursor or ahead of the clock are read: with an index on the cursor, an
// index scan of those rows.
func (c *comparer) countCoverage(ctx context.Context) error {
	cv := c.cov
	if cv.whole {
		return nil // nothing is left out
	}
	ahead, past := orFalse(cv.ahead), orTrue(cv.past)
	q := "SELECT count(*) FILTER (WHERE (" + orTrue(c.src.scope) + ") AND (" + cv.null + ")), " +
		"count(*) FILTER (WHERE (" + orTrue(c.src.scope) + ") AND NOT (" + cv.null + ") AND (" + ahead + ")), " +
		"count(*) FILTER (WHERE NOT (" + cv.null + ") AND NOT (" + ahead + ") AND (" + past + ")) FROM " + c.src.qualified() +
		" WHERE (" + orTrue(cv.where) + ") AND ((" + cv.null + ") OR (" + ahead + ") OR (" + past + "))"
	var pending int64
	if err := c.src.conn.QueryRow(ctx, q).Scan(&c.rep.NullCursor, &c.rep.AheadOfClock, &pending); err != nil {
		return fmt.Errorf("count the rows of source %s outside the watermark: %w", c.src.table, err)
	}
	if pending > 0 {
		c.rep.NotCovered[ReasonPending] += pending
	}
	return nil
}

// countUnsynced counts every source row in source.where: without a
// watermark none of them can be judged.
func (c *comparer) countUnsynced(ctx context.Context) (int64, error) {
	var n int64
	q := "SELECT count(*) FROM " + c.src.qualified() + " WHERE " + orTrue(c.cov.where)
	if err := c.src.conn.QueryRow(ctx, q).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the rows of source %s: %w", c.src.table, err)
	}
	return n, nil
}

func orFalse(cond string) string {
	if cond == "" {
		return "false"
	}
	return cond
}
