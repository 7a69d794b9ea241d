package sink

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
)

// This file finds what in a hand-made copy (restored with pg_dump -s, for
// example) would reject or rewrite the rows syncd writes: generated
// columns, foreign keys, enabled BEFORE ROW triggers, rules, and check
// constraints or NOT NULLs the source does not have. Each is named with
// what it does to the copy and the statement that removes it.

// Trigger type bits of pg_trigger.tgtype.
const (
	tgRow    = 1 << 0
	tgBefore = 1 << 1
	tgInsert = 1 << 2
	tgDelete = 1 << 3
	tgUpdate = 1 << 4
)

// copyProblems lists the copy's objects that would make it differ from the
// source or reject rows.
func (s *Postgres) copyProblems(ctx context.Context, cols []page.Column) ([]string, error) {
	t := s.qualified()
	var problems []string
	add := func(q string, args []any, scan func(pgx.CollectableRow) (string, error)) error {
		rows, err := s.conn.Query(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("inspect sink table %s: %w", s.table, err)
		}
		found, err := pgx.CollectRows(rows, scan)
		if err != nil {
			return fmt.Errorf("inspect sink table %s: %w", s.table, err)
		}
		problems = append(problems, found...)
		return nil
	}
	names := make([]string, len(cols))
	var nullable []string
	for i, c := range cols {
		names[i] = c.Name
		if !c.NotNull && !slices.Contains(s.cfg.Sink.Key, c.Name) {
			nullable = append(nullable, c.Name)
		}
	}
	err := add(`SELECT attname::text, attgenerated::text = 's' FROM pg_attribute
WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attname = ANY($2::text[])
  AND (attgenerated <> '' OR (attnotnull AND attname = ANY($3::text[])))
ORDER BY attnum`, []any{t, names, nullable}, func(r pgx.CollectableRow) (string, error) {
		var col string
		var generated bool
		if err := r.Scan(&col, &generated); err != nil {
			return "", err
		}
		if generated {
			return fmt.Sprintf("column %q is a generated column in the copy, and PostgreSQL rejects every row syncd writes into it (ALTER TABLE %s ALTER COLUMN %s DROP EXPRESSION)", col, t, pgutil.Ident(col)), nil
		}
		return fmt.Sprintf("column %q is NOT NULL in the copy and allows NULL in the source, so rows with NULL are rejected (ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL)", col, t, pgutil.Ident(col)), nil
	})
	if err != nil {
		return nil, err
	}
	err = add(`SELECT k.conname::text, k.contype::text, pg_get_constraintdef(k.oid), k.conrelid::regclass::text, k.conrelid = $1::regclass
FROM pg_constraint k
WHERE (k.conrelid = $1::regclass AND k.contype IN ('f', 'c') AND k.conparentid = 0)
   OR (k.confrelid = $1::regclass AND k.contype = 'f' AND k.conrelid <> $1::regclass AND k.conparentid = 0)
ORDER BY k.contype DESC, k.conname`, []any{t}, func(r pgx.CollectableRow) (string, error) {
		var name, typ, def, rel string
		var own bool
		if err := r.Scan(&name, &typ, &def, &rel, &own); err != nil {
			return "", err
		}
		switch {
		case typ == "c" && slices.Contains(s.srcChecks, def):
			return "", nil
		case typ == "c":
			return fmt.Sprintf("check constraint %q (%s) of the copy is not in the source, so rows the source accepts are rejected (ALTER TABLE %s DROP CONSTRAINT %s)", name, def, t, pgutil.Ident(name)), nil
		case !own:
			return fmt.Sprintf("foreign key %q of %s references the copy, so deleting or re-keying its rows fails (ALTER TABLE %s DROP CONSTRAINT %s)", name, rel, rel, pgutil.Ident(name)), nil
		}
		return fmt.Sprintf("foreign key %q (%s) of the copy rejects rows that arrive before the rows they reference, since syncd copies each table on its own schedule (ALTER TABLE %s DROP CONSTRAINT %s)", name, def, t, pgutil.Ident(name)), nil
	})
	if err != nil {
		return nil, err
	}
	// Only a BEFORE ROW trigger can rewrite or silently drop the row syncd
	// writes. An AFTER or statement trigger (an audit log, a notification)
	// leaves the copy's rows as written, and one that raises fails the run
	// loudly, so neither is a problem of the copy.
	err = add(`SELECT tgname::text, tgtype::int FROM pg_trigger
WHERE tgrelid = $1::regclass AND NOT tgisinternal AND tgenabled <> 'D' ORDER BY tgname`, []any{t}, func(r pgx.CollectableRow) (string, error) {
		var name string
		var typ int
		if err := r.Scan(&name, &typ); err != nil {
			return "", err
		}
		if typ&tgRow == 0 || typ&tgBefore == 0 || typ&(tgInsert|tgUpdate|tgDelete) == 0 {
			return "", nil
		}
		return fmt.Sprintf("trigger %q runs before each row syncd inserts, updates or deletes and can rewrite or drop it, so the copy differs from the source and reconcile never converges (ALTER TABLE %s DISABLE TRIGGER %s)", name, t, pgutil.Ident(name)), nil
	})
	if err != nil {
		return nil, err
	}
	err = add(`SELECT rulename::text FROM pg_rewrite WHERE ev_class = $1::regclass AND rulename <> '_RETURN' AND ev_enabled <> 'D' ORDER BY rulename`,
		[]any{t}, func(r pgx.CollectableRow) (string, error) {
			var name string
			if err := r.Scan(&name); err != nil {
				return "", err
			}
			return fmt.Sprintf("rule %q rewrites the statements syncd runs on the copy (DROP RULE %s ON %s)", name, pgutil.Ident(name), t), nil
		})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(problems, func(p string) bool { return p == "" }), nil
}
