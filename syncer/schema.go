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
	// ChangeDomainChanged: a domain the copy's columns use has other
	// CHECK constraints, NOT NULL, default or base type in the source.
	ChangeDomainChanged = "domain_changed"
	// ChangeEnumRenamed: labels of an enum the copy's columns use were
	// renamed in the source.
	ChangeEnumRenamed = "enum_label_renamed"
)

// schemaChange is one difference between the source and the copy.
type schemaChange struct {
	kind   string
	column string
	clause string // the ALTER TABLE clause that follows it in the copy ("" for none)
	refuse string // why it cannot be followed, with the fix ("" when it can)
	say    string // what it is, for the log and the fail policy
	hand   string // the statement that follows it by hand, for the fail policy
	// fill: the copy's rows get the column's values by a backfill.
	fill bool
	// done: the copy already follows it (a column added by hand), and
	// only its values are still to be filled: not refused under fail.
	done bool
}

// followSchema compares the source's columns (from the catalog, not a scan)
// with the copy's and with the columns the last run saw, before a run reads
// anything. Columns are known by attnum on both sides (State.Schema records
// the source's and the copy's), not by name: a column dropped and added
// again under its name is a drop and an add, and two names swapped are two
// renames. Under schema_changes: evolve it adds columns the source gained
// (and backfills their values into the rows the copy holds), widens columns
// the source widened, and lets a column the source dropped take NULL in new
// rows; it refuses a change that could leave the copy wrong. Under fail it
// refuses every change and alters nothing. Either way a column the copy
// already has but syncd never filled (added to the copy by hand) is
// backfilled before the run goes on. It returns the kinds of the changes
// it found.
func followSchema(ctx context.Context, o Options, st watermark.State, from source.Source, dst sink.Sink, log *slog.Logger) ([]string, error) {
	c := o.Config
	pg, ok := dst.(sink.SchemaFollower)
	if !ok && c.SchemaChanges == config.SchemaFail {
		return nil, c.Errorf("schema_changes", "a %s sink does not follow the source's schema (it writes the columns each page has), so fail cannot stop a run at a change; remove schema_changes: fail", c.Sink.Type)
	}
	src, read := from.(source.SchemaReader)
	if !ok || !read {
		return nil, nil
	}
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
	nums, err := pg.ColumnNums(ctx)
	if err != nil {
		return nil, err
	}
	// A state written before the copy's attnums were recorded: the copy's
	// columns held the names the last run saw.
	filled := fillCopyNums(&st, nums)
	changes := compareSchema(c, pg.Qualified(), st, cur, copyCols, nums)
	var kinds, refused, said, hand []string
	for _, ch := range changes {
		kinds = append(kinds, ch.kind)
		if ch.refuse != "" {
			refused = append(refused, ch.refuse)
		}
		if !ch.done {
			said = append(said, ch.say)
			if ch.hand != "" {
				hand = append(hand, ch.hand)
			}
		}
	}
	// Domains the columns use: a CHECK widened in the source would make
	// the copy reject the source's values on every run.
	// Enum labels renamed in the source: the copy's rows show the old
	// names until the sink's labels are renamed too.
	enums, err := pg.EnumChanges(ctx)
	if err != nil {
		return kinds, err
	}
	domains, err := pg.DomainChanges(ctx)
	if err != nil {
		return kinds, err
	}
	typeKinds := map[string]string{}
	for _, d := range enums {
		typeKinds[d.Type] = ChangeEnumRenamed
	}
	domains = append(enums, domains...)
	var domainStmts []string
	for _, d := range domains {
		kind := ChangeDomainChanged
		if k, ok := typeKinds[d.Type]; ok {
			kind = k
		}
		kinds = append(kinds, kind)
		if d.Refuse != "" {
			refused = append(refused, d.Refuse)
			continue
		}
		said = append(said, d.Say)
		hand = append(hand, strings.Join(d.Stmts, "; "))
		domainStmts = append(domainStmts, d.Stmts...)
	}
	var stop error
	switch {
	case len(refused) > 0:
		stop = fmt.Errorf("%w: %s", ErrSchemaChange, strings.Join(refused, "; "))
	case len(said) > 0 && c.SchemaChanges == config.SchemaFail:
		loc := c.File
		if line := c.Lines["schema_changes"]; line > 0 {
			loc = fmt.Sprintf("%s:%d", c.File, line)
		}
		how := "change the copy by hand"
		if len(hand) == len(said) {
			how = fmt.Sprintf("change the copy by hand (run `%s` on the sink; syncd then goes on, and fills a column added there from the source)", strings.Join(hand, "; "))
		}
		stop = fmt.Errorf("%w: %s; the copy %s was not changed because schema_changes is fail (%s): %s, or set schema_changes: evolve for syncd to follow it",
			ErrSchemaChange, strings.Join(said, "; "), c.Sink.Table, loc, how)
	}
	if stop != nil {
		if filled {
			// The copy's attnums as the last run left them, so that a
			// change made by hand to follow a rename is told apart.
			if err := o.Store.Update(c.Name, func(s *watermark.State) error { s.Schema = st.Schema; return nil }); err != nil {
				return kinds, err
			}
		}
		return kinds, stop
	}
	if len(domainStmts) > 0 {
		if err := pg.AlterTypes(ctx, domainStmts); err != nil {
			return kinds, err
		}
		for _, d := range domains {
			kind := ChangeDomainChanged
			if k, ok := typeKinds[d.Type]; ok {
				kind = k
			}
			log.Warn("source schema changed; the copy follows", "change", kind, "type", d.Type, "what", d.Say, "sql", strings.Join(d.Stmts, "; "))
		}
	}
	var clauses, fill, dropped []string
	for _, ch := range changes {
		if ch.clause != "" {
			clauses = append(clauses, ch.clause)
		}
		if ch.fill {
			fill = append(fill, ch.column)
		}
		if ch.kind == ChangeColumnDropped {
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
		if nums, err = pg.ColumnNums(ctx); err != nil {
			return kinds, err
		}
	}
	for _, ch := range changes {
		if ch.done {
			log.Warn("a source column was added to the copy by hand; syncd fills it from the source", "change", ch.kind, "column", ch.column, "what", ch.say)
		}
	}
	for i := range cur.Columns {
		cur.Columns[i].CopyNum = nums[cur.Columns[i].Name]
	}
	// Rows the copy already holds get the added columns' values by a
	// backfill; a copy still to be filled from the start gets them anyway.
	// So does an unfinished first load (FirstLoad set, no watermark yet):
	// the chunks it loaded are backfilled now, before it resumes (it does
	// not resume while a backfill is left), and the chunks left are
	// loaded with the new columns.
	backfill := st.Backfill
	if len(fill) > 0 && (st.Cursor != nil || st.From != "" || st.FirstLoad != nil) {
		cols := fill
		if backfill != nil {
			cols = slices.Clone(backfill.Columns)
			for _, f := range fill {
				if !slices.Contains(cols, f) {
					cols = append(cols, f)
				}
			}
		}
		backfill = &watermark.Backfill{Columns: cols}
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

// fillCopyNums gives the columns of st.Schema that lack the copy's attnum
// the attnum of the copy's column of the same name, and reports whether it
// gave any. st.Schema is replaced, not changed in place.
func fillCopyNums(st *watermark.State, nums map[string]int16) bool {
	if st.Schema == nil {
		return false
	}
	s := *st.Schema
	s.Columns = slices.Clone(s.Columns)
	filled := false
	for i, p := range s.Columns {
		if n, ok := nums[p.Name]; ok && p.CopyNum == 0 {
			s.Columns[i].CopyNum, filled = n, true
		}
	}
	st.Schema = &s
	return filled
}

// compareSchema lists the differences between the source's columns now
// (cur), the copy's (copyCols, their types, and nums, their attnums), and
// the source's as the last run saw them (st.Schema, which tells a rename
// from an add by attnum and names the copy's column of each by its
// attnum).
func compareSchema(c *config.Config, copyName string, st watermark.State, cur watermark.Schema, copyCols map[string]string, nums map[string]int16) []schemaChange {
	followed := st.Schema != nil
	prev := map[int16]watermark.SchemaColumn{}
	held := map[int16]bool{} // the copy's attnums that hold a column the last run saw
	if followed {
		for _, p := range st.Schema.Columns {
			prev[p.Num] = p
			if p.CopyNum != 0 {
				held[p.CopyNum] = true
			}
		}
	}
	byNum := map[int16]string{}
	for n, num := range nums {
		byNum[num] = n
	}
	// copyOf is the name of the copy's column that holds source column p.
	copyOf := func(p watermark.SchemaColumn) (string, bool) {
		if p.CopyNum == 0 {
			_, ok := copyCols[p.Name]
			return p.Name, ok
		}
		n, ok := byNum[p.CopyNum]
		return n, ok
	}
	var out []schemaChange
	var renames [][2]string // copy name, source name
	var renamed []string
	curNames, curNums := map[string]bool{}, map[int16]bool{}
	for _, col := range cur.Columns {
		curNames[col.Name], curNums[col.Num] = true, true
	}
	for _, col := range cur.Columns {
		p, known := prev[col.Num]
		name := col.Name
		if n, ok := copyOf(p); known && ok && p.Name != col.Name {
			// Renamed in the source: the copy's column is the one that
			// held it. (A copy column renamed by hand alone is left: the
			// source's name is looked up in the copy, as before.)
			name = n
		}
		have, inCopy := copyCols[name]
		ident := pgutil.Ident(col.Name)
		alter := "ALTER TABLE " + copyName + " ALTER COLUMN " + ident + " TYPE " + col.Type
		switch {
		case known && inCopy && name != col.Name:
			renames = append(renames, [2]string{name, col.Name})
			renamed = append(renamed, fmt.Sprintf("column %q was renamed to %q", name, col.Name))
			out = append(out, schemaChange{kind: ChangeColumnRenamed, column: col.Name, say: renamed[len(renamed)-1]})
		case !inCopy:
			out = append(out, schemaChange{kind: ChangeColumnAdded, column: col.Name, fill: true,
				say:    fmt.Sprintf("column %q (%s) was added", col.Name, col.Type),
				hand:   "ALTER TABLE " + copyName + " ADD COLUMN " + ident + " " + col.Type,
				clause: "ADD COLUMN " + ident + " " + col.Type})
		case followed && !known && (held[nums[col.Name]] || slices.Contains(st.Dropped, col.Name)):
			// The copy's column of this name holds a column the source
			// dropped: its values are not the new column's.
			say := fmt.Sprintf("column %q was dropped and added again (%s); the copy's values of the dropped column are replaced by the source's", col.Name, col.Type)
			ch := schemaChange{kind: ChangeColumnAdded, column: col.Name, fill: true, say: say,
				hand: "ALTER TABLE " + copyName + " DROP COLUMN " + ident + ", ADD COLUMN " + ident + " " + col.Type}
			if have == col.Type {
				// The dropped column may have had NOT NULL.
				ch.clause = "ALTER COLUMN " + ident + " DROP NOT NULL"
			} else {
				ch.clause = "DROP COLUMN " + ident + ", ADD COLUMN " + ident + " " + col.Type
			}
			out = append(out, ch)
		case followed && !known && !holds(col.Type, have):
			say := fmt.Sprintf("column %q (%s) was added and the copy's column %q is %s, which cannot hold it exactly", col.Name, col.Type, col.Name, have)
			out = append(out, schemaChange{kind: ChangeTypeChanged, column: col.Name, say: say,
				refuse: fmt.Sprintf("%s in %s; run `%s` on the sink and syncd fills it and goes on", say, c.Source.Table, alter)})
		case followed && !known:
			// Added to the copy by hand, as schema_changes: fail asks:
			// its rows were never filled.
			out = append(out, schemaChange{kind: ChangeColumnAdded, column: col.Name, fill: true, done: true,
				say: fmt.Sprintf("column %q (%s) was added; the copy %s has it already (added by hand), and its rows are filled from the source", col.Name, col.Type, c.Sink.Table)})
		case !holds(col.Type, have) && (!known || p.Type == col.Type):
			// Not a change of the source: a copy made narrower by hand is
			// refused by the copy's check, as before any run.
		case !holds(col.Type, have) && holds(p.Type, have) && holds(have, col.Type):
			out = append(out, schemaChange{kind: ChangeTypeWidened, column: col.Name,
				say:    fmt.Sprintf("column %q was widened from %s to %s", col.Name, p.Type, col.Type),
				hand:   alter,
				clause: "ALTER COLUMN " + ident + " TYPE " + col.Type})
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
	if len(renames) > 0 {
		// Renames are refused together, with statements that follow them
		// all (through temporary names when they swap names).
		fix := renameFix(copyName, renames, copyCols)
		refuse := fmt.Sprintf("%s in %s, which the copy cannot follow safely; run `%s` on the sink and syncd goes on",
			strings.Join(renamed, " and "), c.Source.Table, fix)
		for i := range out {
			if out[i].kind == ChangeColumnRenamed {
				out[i].refuse = refuse // said once, with the first rename
				break
			}
		}
	}
	if followed {
		for _, p := range st.Schema.Columns {
			if curNums[p.Num] {
				continue // still there, perhaps renamed (above)
			}
			name, inCopy := copyOf(p)
			if !inCopy || curNames[name] || slices.Contains(st.Dropped, name) {
				continue // gone from the copy too, added again (above), or said
			}
			out = append(out, schemaChange{kind: ChangeColumnDropped, column: name,
				say: fmt.Sprintf("column %q was dropped from %s; the copy keeps it; rows inserted from now on have NULL there, rows updated keep their last value", p.Name, c.Source.Table),
				// The copy may have taken NOT NULL from the source.
				clause: "ALTER COLUMN " + pgutil.Ident(name) + " DROP NOT NULL"})
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

// renameFix is the statements that rename the copy's columns as the source
// renamed them (from, to pairs): one RENAME each, or, when a new name is
// still taken by another of them (names swapped), each to a temporary name
// first.
func renameFix(copyName string, renames [][2]string, copyCols map[string]string) string {
	swap := false
	for _, r := range renames {
		if _, taken := copyCols[r[1]]; taken {
			swap = true
		}
	}
	var stmts []string
	rename := func(from, to string) {
		stmts = append(stmts, "ALTER TABLE "+copyName+" RENAME COLUMN "+pgutil.Ident(from)+" TO "+pgutil.Ident(to))
	}
	// Short temporary names: a long name with a prefix would be cut at
	// 63 bytes, and two such could collide.
	tmp := func(i int) string { return fmt.Sprintf("syncd_rename_%d", i+1) }
	for i, r := range renames {
		if swap {
			rename(r[0], tmp(i))
		} else {
			rename(r[0], r[1])
		}
	}
	if swap {
		for i, r := range renames {
			rename(tmp(i), r[1])
		}
	}
	return strings.Join(stmts, "; ")
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
func runBackfill(ctx context.Context, o Options, src source.SchemaReader, pg sink.SchemaFollower, b watermark.Backfill, log *slog.Logger) error {
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
		// The page has committed durably (pg.Backfill): its progress may
		// be recorded.
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
		log.Debug("backfill page applied", "rows", len(rows), "changed", n, "after", b.After)
		if done {
			log.Info("backfill done", "columns", strings.Join(b.Columns, ","), "rows", b.Rows, "changed", changed)
			return nil
		}
	}
}

// PlannedChange is a difference between the source and the copy that the
// next run of a table copy acts on (see followSchema).
type PlannedChange struct {
	Kind   string
	Column string
	Say    string
	// Alters: the next run changes the copy's column under
	// schema_changes: evolve (adds, widens or replaces it).
	Alters bool
	// Fills: the next run backfills the column into the copy's rows.
	Fills bool
	// ByHand: the copy already follows it (a column added by hand); only
	// its values are filled, under either policy.
	ByHand bool
	// Refuse, when set, is why the next run stops, with the fix.
	Refuse string
}

// PlanSchema is what the next run of the copy does about the source's
// schema: st is the stored state, t the source table as described now,
// copyCols and nums the copy's column types and attnums (empty: no copy
// yet). validate and run --once's check use it so that they agree with
// the run: a column the run will add or widen is not a problem of the
// copy, and a change it will refuse is.
func PlanSchema(c *config.Config, st watermark.State, t *source.Table, copyName string, copyCols map[string]string, nums map[string]int16) []PlannedChange {
	if len(copyCols) == 0 {
		return nil
	}
	fillCopyNums(&st, nums)
	cur := watermark.Schema{Columns: t.SchemaColumns()}
	if st.Schema != nil {
		cur.PrimaryKey = st.Schema.PrimaryKey // not read here: the run checks it
	}
	var out []PlannedChange
	for _, ch := range compareSchema(c, copyName, st, cur, copyCols, nums) {
		out = append(out, PlannedChange{Kind: ch.kind, Column: ch.column, Say: ch.say, Refuse: ch.refuse,
			Alters: ch.clause != "" && ch.kind != ChangeColumnDropped, Fills: ch.fill, ByHand: ch.done})
	}
	return out
}
