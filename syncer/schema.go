package syncer

import (
	"context"
	"errors"
	"fmt"
	"github.com/syncd/syncd/internal/sourceerr"
	"log/slog"
	"slices"
	"strings"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// ErrSchemaChange is wrapped by the error of a run that stops at a source
// schema change: one the copy cannot follow safely, or any change under
// schema_changes: fail.
var ErrSchemaChange = errors.New("source schema changed")

// Schema change kinds, as logged and counted (syncd_schema_changes_total).
const (
	ChangeColumnAdded   = "column_added"
	ChangeColumnDropped = "column_dropped"
	ChangeTypeWidened   = "type_widened"
	ChangeTypeChanged   = "type_changed"
	ChangeColumnRenamed = "column_renamed"
	ChangeKeyChanged    = "key_changed"
)

// schemaChange is one difference between the source and the copy.
type schemaChange struct {
	kind   string
	column string
	clause string // the ALTER TABLE clause that follows it in the copy ("" for none)
	refuse string // why it cannot be followed, with the fix ("" when it can)
	say    string // what it is, for the log and the fail policy
}

// followSchema compares the source's columns (from the catalog, not a scan)
// with the copy's and with the columns the last run saw, before a run reads
// anything. Under schema_changes: evolve it adds columns the source gained
// (and backfills their values into the rows the copy holds), widens columns
// the source widened, and lets a column the source dropped take NULL in new
// rows; it refuses a change that could leave the copy wrong. Under fail it
// refuses every change and alters nothing. It returns the kinds of the
// changes it found.
func followSchema(ctx context.Context, o Options, st watermark.State, src *source.Reader, dst sink.Sink, log *slog.Logger) ([]string, error) {
	pg, ok := dst.(*sink.Postgres)
	if !ok {
		return nil, nil
	}
	c := o.Config
	cur, err := src.Schema(ctx)
	if err != nil {
		return nil, err
	}
	copyCols, err := pg.Columns(ctx)
	if err != nil {
		return nil, err
	}
	if len(copyCols) == 0 {
		// A new copy is created from these columns.
		return nil, o.Store.Update(c.Name, func(s *watermark.State) error { s.Schema, s.Backfill, s.Dropped = &cur, nil, nil; return nil })
	}
	if st.Schema == nil && slices.ContainsFunc(cur.Columns, func(col watermark.SchemaColumn) bool { _, ok := copyCols[col.Name]; return !ok }) {
		// A copy syncd has not followed yet (made by hand) that lacks a
		// source column is not a schema change: the copy's check refuses
		// it, and nothing is recorded until it is fixed.
		return nil, nil
	}
	changes := compareSchema(c, pg.Qualified(), st, cur, copyCols)
	var kinds, refused, said []string
	for _, ch := range changes {
		kinds = append(kinds, ch.kind)
		if ch.refuse != "" {
			refused = append(refused, ch.refuse)
		}
		said = append(said, ch.say)
	}
	switch {
	case len(refused) > 0:
		return kinds, fmt.Errorf("%w: %s", ErrSchemaChange, strings.Join(refused, "; "))
	case len(changes) > 0 && c.SchemaChanges == config.SchemaFail:
		loc := c.File
		if line := c.Lines["schema_changes"]; line > 0 {
			loc = fmt.Sprintf("%s:%d", c.File, line)
		}
		return kinds, fmt.Errorf("%w: %s; the copy %s was not changed because schema_changes is fail (%s): change the copy by hand, or set schema_changes: evolve for syncd to follow it",
			ErrSchemaChange, strings.Join(said, "; "), c.Sink.Table, loc)
	}
	var clauses, added, dropped []string
	for _, ch := range changes {
		if ch.clause != "" {
			clauses = append(clauses, ch.clause)
		}
		switch ch.kind {
		case ChangeColumnAdded:
			added = append(added, ch.column)
		case ChangeColumnDropped:
			dropped = append(dropped, ch.column)
		}
	}
	if len(clauses) > 0 {
		q, err := pg.Alter(ctx, clauses)
		if err != nil {
			return kinds, err
		}
		for _, ch := range changes {
			log.Warn("source schema changed; the copy follows", "change", ch.kind, "column", ch.column, "what", ch.say, "sql", q)
		}
	}
	// Rows the copy already holds get the added columns' values by a
	// backfill; a copy still to be filled from the start gets them anyway.
	backfill := st.Backfill
	if len(added) > 0 && (st.Cursor != nil || st.From != "") {
		if backfill != nil {
			added = append(slices.Clone(backfill.Columns), added...)
		}
		backfill = &watermark.Backfill{Columns: added}
	}
	err = o.Store.Update(c.Name, func(s *watermark.State) error {
		s.Schema, s.Backfill = &cur, backfill
		for _, d := range dropped {
			if !slices.Contains(s.Dropped, d) {
				s.Dropped = append(s.Dropped, d)
			}
		}
		// A column the source has again (or the copy lost) is no longer news.
		s.Dropped = slices.DeleteFunc(s.Dropped, func(d string) bool {
			_, inCopy := copyCols[d]
			return !inCopy || slices.ContainsFunc(cur.Columns, func(sc watermark.SchemaColumn) bool { return sc.Name == d })
		})
		return nil
	})
	if err != nil {
		return kinds, err
	}
	if backfill != nil {
		if err := runBackfill(ctx, o, src, pg, *backfill, log); err != nil {
			return kinds, err
		}
	}
	return kinds, nil
}

// compareSchema lists the differences between the source's columns now
// (cur), the copy's, and the source's as the last run saw them (st.Schema,
// which tells a rename from an add by attnum).
func compareSchema(c *config.Config, copyName string, st watermark.State, cur watermark.Schema, copyCols map[string]string) []schemaChange {
	prev := map[int16]watermark.SchemaColumn{}
	if st.Schema != nil {
		for _, p := range st.Schema.Columns {
			prev[p.Num] = p
		}
	}
	var out []schemaChange
	curNames := map[string]bool{}
	for _, col := range cur.Columns {
		curNames[col.Name] = true
		p, known := prev[col.Num]
		have, inCopy := copyCols[col.Name]
		alter := "ALTER TABLE " + copyName + " ALTER COLUMN " + pgutil.Ident(col.Name) + " TYPE " + col.Type
		switch {
		case known && p.Name != col.Name && !inCopy:
			say := fmt.Sprintf("column %q was renamed to %q", p.Name, col.Name)
			out = append(out, schemaChange{kind: ChangeColumnRenamed, column: col.Name, say: say,
				refuse: fmt.Sprintf("%s in %s, which the copy cannot follow safely; run `ALTER TABLE %s RENAME COLUMN %s TO %s` on the sink and syncd goes on",
					say, c.Source.Table, copyName, pgutil.Ident(p.Name), pgutil.Ident(col.Name))})
		case !inCopy:
			out = append(out, schemaChange{kind: ChangeColumnAdded, column: col.Name,
				say:    fmt.Sprintf("column %q (%s) was added", col.Name, col.Type),
				clause: "ADD COLUMN " + pgutil.Ident(col.Name) + " " + col.Type})
		case !holds(col.Type, have) && (!known || p.Type == col.Type):
			// Not a change of the source: a copy made narrower by hand is
			// refused by the copy's check, as before any run.
		case !holds(col.Type, have) && holds(p.Type, have) && holds(have, col.Type):
			out = append(out, schemaChange{kind: ChangeTypeWidened, column: col.Name,
				say:    fmt.Sprintf("column %q was widened from %s to %s", col.Name, p.Type, col.Type),
				clause: "ALTER COLUMN " + pgutil.Ident(col.Name) + " TYPE " + col.Type})
		case !holds(col.Type, have):
			say := fmt.Sprintf("column %q changed type to %s, which the copy's %s cannot hold exactly", col.Name, col.Type, have)
			out = append(out, schemaChange{kind: ChangeTypeChanged, column: col.Name, say: say,
				refuse: fmt.Sprintf("%s in %s; apply the same change to the copy (run `%s` on the sink, with USING if needed) and syncd goes on", say, c.Source.Table, alter)})
		case known && p.Type != col.Type && have != col.Type && !holds(p.Type, col.Type):
			// Narrowed (or otherwise converted) in the source: PostgreSQL
			// may have rewritten values without moving the cursor.
			say := fmt.Sprintf("column %q changed type from %s to %s, which may have changed its values in the source without moving the cursor", col.Name, p.Type, col.Type)
			out = append(out, schemaChange{kind: ChangeTypeChanged, column: col.Name, say: say,
				refuse: fmt.Sprintf("%s in %s; apply the same change to the copy (run `%s` on the sink) and syncd goes on", say, c.Source.Table, alter)})
		}
	}
	if st.Schema != nil {
		for _, p := range st.Schema.Columns {
			_, inCopy := copyCols[p.Name]
			if curNames[p.Name] || !inCopy || slices.Contains(st.Dropped, p.Name) {
				continue
			}
			if slices.ContainsFunc(cur.Columns, func(x watermark.SchemaColumn) bool { return x.Num == p.Num }) {
				continue // renamed, above
			}
			out = append(out, schemaChange{kind: ChangeColumnDropped, column: p.Name,
				say: fmt.Sprintf("column %q was dropped from %s; the copy keeps it; rows inserted from now on have NULL there, rows updated keep their last value", p.Name, c.Source.Table),
				// The copy may have taken NOT NULL from the source.
				clause: "ALTER COLUMN " + pgutil.Ident(p.Name) + " DROP NOT NULL"})
		}
		if old := st.Schema.PrimaryKey; len(old) > 0 && !sameSet(old, cur.PrimaryKey) && sameSet(old, c.Sink.Key) && !sameSet(cur.PrimaryKey, c.Sink.Key) {
			say := fmt.Sprintf("the primary key of %s changed from (%s) to (%s)", c.Source.Table, strings.Join(old, ", "), strings.Join(cur.PrimaryKey, ", "))
			out = append(out, schemaChange{kind: ChangeKeyChanged, say: say,
				refuse: fmt.Sprintf("%s and the copy is keyed by sink.key (%s); set sink.key in %s to the new key, recreate the copy (drop %s on the sink) and %s",
					say, strings.Join(c.Sink.Key, ", "), c.File, copyName, sourceerr.ResyncAdvice(c.Name))})
		}
	}
	return out
}

func holds(src, dst string) bool {
	ok, _ := sink.Holds(src, dst)
	return ok
}

func sameSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(x string) bool { return !slices.Contains(b, x) })
}

// runBackfill copies the backfill's columns from the source into the rows
// the copy holds, page by page in key order, recording its progress after
// each page so that a run that stops resumes where it was; re-applying a
// page changes nothing.
func runBackfill(ctx context.Context, o Options, src *source.Reader, pg *sink.Postgres, b watermark.Backfill, log *slog.Logger) error {
	c := o.Config
	copyCols, err := pg.Columns(ctx)
	if err != nil {
		return err
	}
	var types []string
	for _, n := range append(slices.Clone(c.Sink.Key), b.Columns...) {
		t, ok := copyCols[n]
		if !ok {
			return &sourceerr.SourceError{Source: c.Name, Err: &sourceerr.ResyncNeeded{Source: c.Name,
				Reason: fmt.Sprintf("backfill column %q is missing from the copy %s; add it back as in the source, or ", n, c.Sink.Table)}}
		}
		types = append(types, t)
	}
	keyTypes := types[:len(c.Sink.Key)]
	var changed int64
	log.Info("backfilling added columns into the rows the copy holds", "columns", strings.Join(b.Columns, ","), "resume_after", b.After)
	for {
		select {
		case <-o.Stop:
			return ErrStopped
		default:
		}
		rows, err := src.BackfillPage(ctx, c.Sink.Key, keyTypes, b.Columns, b.After, c.Source.PageSize)
		if err != nil {
			return err
		}
		n, err := pg.Backfill(ctx, c.Sink.Key, b.Columns, types, rows)
		if err != nil {
			return err
		}
		changed += n
		b.Rows += int64(len(rows))
		if len(rows) > 0 {
			last := rows[len(rows)-1]
			b.After = make([]string, len(c.Sink.Key))
			for i := range b.After {
				b.After[i] = *last[i]
			}
		}
		done := len(rows) < c.Source.PageSize
		log.Debug("backfill page applied", "rows", len(rows), "changed", n, "after", b.After)
		err = o.Store.Update(c.Name, func(s *watermark.State) error {
			if done {
				s.Backfill = nil
				s.LastBackfill = &watermark.Backfill{Columns: b.Columns, Rows: b.Rows}
			} else {
				s.Backfill = &b
			}
			return nil
		})
		if err != nil {
			return err
		}
		if done {
			log.Info("backfill done", "columns", strings.Join(b.Columns, ","), "rows", b.Rows, "changed", changed)
			return nil
		}
	}
}
