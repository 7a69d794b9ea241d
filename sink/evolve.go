package sink

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgutil"
)

// This file changes the copy when the source's schema changes (see
// syncer/schema.go for what is followed and what is refused).

// Holds reports whether a copy column of type dst stores every value of a
// source column of type src exactly, and if not, why.
func Holds(src, dst string) (bool, string) { return holds(src, dst) }

// SchemaFollower is implemented by a sink whose copy follows the source's
// schema changes (Postgres): the run compares the source's columns with
// the copy's before the first page, alters the copy under schema_changes:
// evolve (and backfills a column it added), and refuses a change under
// fail. A sink without it writes the columns each page has, and a run
// refuses schema_changes: fail for it, which it could not enforce.
type SchemaFollower interface {
	// Columns are the copy's columns and their types (none: no copy yet).
	Columns(ctx context.Context) (map[string]string, error)
	// ColumnNums are the copy's columns' attribute numbers.
	ColumnNums(ctx context.Context) (map[string]int16, error)
	// Qualified is the copy's quoted, schema-qualified name.
	Qualified() string
	// Alter runs clauses of ALTER TABLE on the copy and returns the statement.
	Alter(ctx context.Context, clauses []string) (string, error)
	// Backfill writes cols of the rows the copy holds, by key.
	Backfill(ctx context.Context, key, cols, types []string, rows [][]*string) (int64, error)
	// EnumChanges and DomainChanges are the changes of the types the
	// copy's columns use; AlterTypes follows them.
	EnumChanges(ctx context.Context) ([]TypeChange, error)
	DomainChanges(ctx context.Context) ([]TypeChange, error)
	AlterTypes(ctx context.Context, stmts []string) error
}

var _ SchemaFollower = (*Postgres)(nil)

// Columns maps each column of the copy to its format_type; it is empty
// when the copy does not exist yet.
func (s *Postgres) Columns(ctx context.Context) (map[string]string, error) {
	return s.columns(ctx)
}

// Qualified is the copy's quoted, schema-qualified name.
func (s *Postgres) Qualified() string { return s.qualified() }

// Alter runs one ALTER TABLE on the copy with the given clauses ("ADD
// COLUMN ...", "ALTER COLUMN ... TYPE ..."), all or none, and returns the
// statement it ran.
func (s *Postgres) Alter(ctx context.Context, clauses []string) (string, error) {
	q := "ALTER TABLE " + s.qualified() + " " + strings.Join(clauses, ", ")
	// A column added or retyped may use a type the sink lacks, or an enum
	// label it has not seen yet: create them first, as the copy's creation
	// does (labels each on its own, types with the ALTER).
	plan, err := planTypes(ctx, s.conn, s.srcTypes, false, s.cfg.Sink.CreateExtensions)
	if err != nil {
		return q, err
	}
	if len(plan.problems) > 0 {
		return q, s.cfg.Errorf("sink.table", "cannot change the copy %s (source %s): %s", s.table, s.cfg.Name, strings.Join(plan.problems, "; "))
	}
	for _, l := range plan.labels {
		if _, err := s.conn.Exec(ctx, l); err != nil {
			return q, fmt.Errorf("change the copy %s (%s): %w", s.table, l, err)
		}
	}
	err = pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error {
		for _, c := range append(plan.creates, q) {
			if _, err := tx.Exec(ctx, c); err != nil {
				return fmt.Errorf("change the copy %s (%s): %w", s.table, c, err)
			}
		}
		// The state file records the change once this returns.
		return pgutil.Durable(ctx, tx)
	})
	if err != nil {
		return q, err
	}
	s.stageReady = false // the staging table is shaped like the copy
	return q, nil
}

// Backfill writes the values of cols into the copy's rows with the same
// key, from rows of text (the key columns' text first, then cols'),
// changing only rows whose values differ; types are the copy's types of
// key and then cols. It commits durably before it returns (whatever
// synchronous_commit the sink sets: the caller records the backfill's
// progress next, as the run loop writes a page's watermark only once the
// page is durable) and reports the rows it changed.
func (s *Postgres) Backfill(ctx context.Context, key, cols, types []string, rows [][]*string) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	n := len(key) + len(cols)
	arrays := make([]any, n)
	alias := make([]string, n)
	unnest := make([]string, n)
	for i := range n {
		col := make([]*string, len(rows))
		for j, r := range rows {
			col[j] = r[i]
		}
		arrays[i] = col
		alias[i] = fmt.Sprintf("c%d", i)
		unnest[i] = fmt.Sprintf("$%d::text[]", i+1)
	}
	val := func(i int) string { return "v." + alias[i] + "::" + types[i] }
	var sets, keys, olds, news []string
	for i, k := range key {
		keys = append(keys, "t."+pgutil.Ident(k)+" = "+val(i))
	}
	for i, c := range cols {
		j := len(key) + i
		sets = append(sets, pgutil.Ident(c)+" = "+val(j))
		olds = append(olds, "t."+pgutil.Ident(c)+"::text")
		news = append(news, val(j)+"::text")
	}
	q := "UPDATE " + s.qualified() + " AS t SET " + strings.Join(sets, ", ") +
		" FROM unnest(" + strings.Join(unnest, ", ") + ") AS v(" + strings.Join(alias, ", ") + ")" +
		" WHERE " + strings.Join(keys, " AND ") +
		" AND (" + strings.Join(olds, ", ") + ") IS DISTINCT FROM (" + strings.Join(news, ", ") + ")"
	var changed int64
	err := pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, q, arrays...)
		if err != nil {
			return err
		}
		changed = tag.RowsAffected()
		return pgutil.Durable(ctx, tx)
	})
	if err != nil {
		return 0, fmt.Errorf("backfill %s into the copy %s: %w", strings.Join(cols, ", "), s.table, err)
	}
	return changed, nil
}

// ColumnNums maps each column of the copy to its attnum, which a rename
// keeps and a drop and re-add changes; it is empty when the copy does not
// exist yet.
func (s *Postgres) ColumnNums(ctx context.Context) (map[string]int16, error) {
	rows, err := s.conn.Query(ctx, `
SELECT a.attname::text, a.attnum
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r','p')
  AND a.attnum > 0 AND NOT a.attisdropped`, s.table.Schema, s.table.Name)
	if err != nil {
		return nil, fmt.Errorf("read column numbers of sink table %s: %w", s.table, err)
	}
	out := map[string]int16{}
	var name string
	var num int16
	_, err = pgx.ForEachRow(rows, []any{&name, &num}, func() error {
		out[name] = num
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read column numbers of sink table %s: %w", s.table, err)
	}
	return out, nil
}

// checkDef is a check constraint's definition without NOT VALID: a domain
// constraint the copy took NOT VALID (its values are the source's, checked
// there) is the same constraint.
func checkDef(def string) string { return strings.TrimSuffix(def, " NOT VALID") }

// checkDefs are defs by checkDef, sorted.
func checkDefs(defs []string) []string {
	out := make([]string, len(defs))
	for i, d := range defs {
		out[i] = checkDef(d)
	}
	slices.Sort(out)
	return out
}

// TypeChange is a domain (or an enum) of the sink that differs from the
// source's type of the same name, which the copy's columns use.
type TypeChange struct {
	Type string // its qualified name
	Say  string // how it differs
	// Stmts are the ALTER DOMAIN (ALTER TYPE) statements that make it the
	// source's; Refuse, when set, is why it cannot be changed in place,
	// with the fix.
	Stmts  []string
	Refuse string
}

// DomainChanges compares the domains the source's columns use (as given
// to UseSourceSchema) with the sink's same-named domains: their CHECK
// constraints, NOT NULL and default, which ALTER DOMAIN can change, and
// their base type, which it cannot. A domain the sink lacks is not listed
// (the copy's creation or Alter creates it).
func (s *Postgres) DomainChanges(ctx context.Context) ([]TypeChange, error) {
	var out []TypeChange
	for _, ut := range s.srcTypes {
		if ut.Kind != 'd' {
			continue
		}
		have, found, err := readSinkType(ctx, s.conn, ut.Schema, ut.Name)
		if err != nil {
			return nil, err
		}
		if !found || have.kind != "d" {
			continue
		}
		diff := typeDiff(ut, have)
		if diff == "" {
			continue
		}
		qn := pgutil.Qualified(ut.Schema, ut.Name)
		ch := TypeChange{Type: qn, Say: fmt.Sprintf("domain %s differs in the sink from the source's: %s", qn, diff)}
		if ut.Base != have.base {
			ch.Refuse = fmt.Sprintf("%s; a domain's base type cannot be changed in place: recreate %s in the sink as `%s` with the copy's columns that use it, or drop the copy for syncd to create it again; then syncd goes on",
				ch.Say, qn, createType(qn, ut))
			out = append(out, ch)
			continue
		}
		rows, err := s.conn.Query(ctx, `
SELECT k.conname::text, pg_get_constraintdef(k.oid)
FROM pg_constraint k JOIN pg_type t ON t.oid = k.contypid JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname = $1 AND t.typname = $2 AND k.contype = 'c' ORDER BY k.conname`, ut.Schema, ut.Name)
		if err != nil {
			return nil, fmt.Errorf("read constraints of domain %s in the sink: %w", qn, err)
		}
		sinkChecks := map[string]string{} // definition -> name
		var name, def string
		if _, err := pgx.ForEachRow(rows, []any{&name, &def}, func() error { sinkChecks[checkDef(def)] = name; return nil }); err != nil {
			return nil, fmt.Errorf("read constraints of domain %s in the sink: %w", qn, err)
		}
		alter := "ALTER DOMAIN " + qn + " "
		var drops, adds []string
		kept := map[string]bool{}
		for d, n := range sinkChecks {
			if slices.ContainsFunc(ut.Checks, func(c string) bool { return checkDef(c) == d }) {
				kept[n] = true
			} else {
				drops = append(drops, alter+"DROP CONSTRAINT "+pgutil.Ident(n))
			}
		}
		slices.Sort(drops)
		for i, c := range ut.Checks {
			if _, ok := sinkChecks[checkDef(c)]; ok {
				continue
			}
			n := ut.Name + "_check"
			if i < len(ut.CheckNames) {
				n = ut.CheckNames[i]
			}
			if kept[n] {
				n += "_source"
			}
			// NOT VALID: the copy's values are the source's, which the
			// source checked; rows it no longer has are not rejected.
			adds = append(adds, alter+"ADD CONSTRAINT "+pgutil.Ident(n)+" "+checkDef(c)+" NOT VALID")
		}
		ch.Stmts = append(drops, adds...)
		if ut.NotNull != have.notNull {
			if ut.NotNull {
				ch.Stmts = append(ch.Stmts, alter+"SET NOT NULL")
			} else {
				ch.Stmts = append(ch.Stmts, alter+"DROP NOT NULL")
			}
		}
		if ut.Default != have.def {
			if ut.Default == "" {
				ch.Stmts = append(ch.Stmts, alter+"DROP DEFAULT")
			} else {
				ch.Stmts = append(ch.Stmts, alter+"SET DEFAULT "+ut.Default)
			}
		}
		out = append(out, ch)
	}
	return out, nil
}

// AlterTypes runs the statements of EnumChanges and DomainChanges in one
// transaction.
func (s *Postgres) AlterTypes(ctx context.Context, stmts []string) error {
	return pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error {
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("change a type of the copy %s (%s): %w", s.table, q, err)
			}
		}
		return pgutil.Durable(ctx, tx)
	})
}

// EnumChanges lists the enums the source's columns use whose labels were
// renamed in the source (ALTER TYPE ... RENAME VALUE): the sink's enum of
// the same name has labels the source no longer has where the source has
// new ones. PostgreSQL never removes a label, so a label of the sink's
// enum that the source lacks was renamed there; the copy's rows still show
// the old name until the sink's label is renamed too (which renames it in
// every row at once). Labels added in the source are not listed: Prepare
// adds them. A type is listed as a TypeChange with the RENAME VALUE
// statements, or with Refuse when the renames cannot be told from added
// labels.
func (s *Postgres) EnumChanges(ctx context.Context) ([]TypeChange, error) {
	var out []TypeChange
	for _, ut := range s.srcTypes {
		if ut.Kind != 'e' {
			continue
		}
		have, found, err := readSinkType(ctx, s.conn, ut.Schema, ut.Name)
		if err != nil {
			return nil, err
		}
		if !found || have.kind != "e" {
			continue
		}
		pairs, unpaired := enumRenames(ut.Labels, have.labels)
		if len(pairs) == 0 && len(unpaired) == 0 {
			continue
		}
		qn := pgutil.Qualified(ut.Schema, ut.Name)
		ch := TypeChange{Type: qn}
		var said []string
		for _, p := range pairs {
			said = append(said, fmt.Sprintf("%s to %s", literal(p[0]), literal(p[1])))
			ch.Stmts = append(ch.Stmts, "ALTER TYPE "+qn+" RENAME VALUE "+literal(p[0])+" TO "+literal(p[1]))
		}
		if len(unpaired) > 0 {
			ch.Say = fmt.Sprintf("enum %s of the sink has labels the source no longer has (%s) and the source has labels in their place that cannot be paired with them one to one (source labels %s)",
				qn, strings.Join(unpaired, ", "), strings.Join(ut.Labels, ", "))
			ch.Refuse = ch.Say + "; rename each on the sink as the source renamed it (ALTER TYPE " + qn + " RENAME VALUE 'old' TO 'new'); the copy's rows hold the old names until then; then syncd goes on"
		} else {
			ch.Say = fmt.Sprintf("enum %s had labels renamed in the source (%s)", qn, strings.Join(said, ", "))
		}
		out = append(out, ch)
	}
	return out, nil
}

// enumRenames pairs the labels of the sink's enum dst that the source's
// enum src no longer has with the labels src has in their place: between
// the same two labels both have, as many of each, in order. Labels that
// cannot be paired so (another count in the source's place: some renamed
// and some added) come back unpaired. Labels the sink has where the
// source has none are left alone, as an enum with labels in another order
// (enumLabels says that).
func enumRenames(src, dst []string) (pairs [][2]string, unpaired []string) {
	inSrc, inDst := map[string]bool{}, map[string]bool{}
	for _, l := range src {
		inSrc[l] = true
	}
	for _, l := range dst {
		inDst[l] = true
	}
	i, j := 0, 0
	for {
		var dx, sx []string
		for ; i < len(dst) && !inSrc[dst[i]]; i++ {
			dx = append(dx, dst[i])
		}
		for ; j < len(src) && !inDst[src[j]]; j++ {
			sx = append(sx, src[j])
		}
		switch {
		case len(dx) == 0 || len(sx) == 0:
		case len(dx) == len(sx):
			for k := range dx {
				pairs = append(pairs, [2]string{dx[k], sx[k]})
			}
		default:
			unpaired = append(unpaired, dx...)
		}
		if i >= len(dst) || j >= len(src) {
			return pairs, unpaired
		}
		if dst[i] != src[j] {
			return nil, nil // another order
		}
		i, j = i+1, j+1
	}
}
