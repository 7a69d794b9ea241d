package sink

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
)

// Fix is one row reconcile wants changed in the copy. Row holds the
// source's values (text output, in the column order given to Prepare), nil
// to delete the row; Seen holds the copy row as reconcile last read it, nil
// when there was none. A fix applies only while the copy row is still the
// one reconcile saw (same key and cursor values, or still absent), so a row
// that a sync has written meanwhile is left to the sync.
type Fix struct {
	Row  [][]byte
	Seen [][]byte
}

// RepairResult counts what Repair changed.
type RepairResult struct {
	Inserted int64
	Updated  int64
	Deleted  int64
}

// Repair applies fixes in one transaction, through the same staging table
// as a page: missing rows are inserted, changed rows overwritten with the
// source's values whatever their cursor, extra rows deleted. Prepare must
// have been called.
func (s *Postgres) Repair(ctx context.Context, fixes []Fix) (RepairResult, error) {
	return s.applyFixes(ctx, fixes, s.repairSQL())
}

// applyFixes stages the source rows and the seen rows of fixes and runs the
// statements of q in one transaction.
func (s *Postgres) applyFixes(ctx context.Context, fixes []Fix, q repairSQL) (RepairResult, error) {
	var res RepairResult
	if len(fixes) == 0 {
		return res, nil
	}
	guard := s.guardColumns()
	idx := make([]int, len(guard))
	for i, g := range guard {
		idx[i] = slices.IndexFunc(s.cols, func(c page.Column) bool { return c.Name == g })
	}
	var rows, marks [][][]byte
	for _, f := range fixes {
		op, from := "i", f.Row
		switch {
		case f.Row == nil && f.Seen == nil:
			continue
		case f.Row == nil:
			op, from = "d", f.Seen
		case f.Seen != nil:
			op, from = "u", f.Seen
		}
		if f.Row != nil {
			rows = append(rows, f.Row)
		}
		mark := make([][]byte, 0, len(idx)+1)
		for _, i := range idx {
			mark = append(mark, from[i])
		}
		marks = append(marks, append(mark, []byte(op)))
	}
	err := pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error {
		if err := s.createStage(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "CREATE TEMP TABLE IF NOT EXISTS syncd_fix ON COMMIT DELETE ROWS AS SELECT "+
			pgutil.IdentList("", guard)+", ''::text AS syncd_op FROM "+s.qualified()+" WITH NO DATA"); err != nil {
			return fmt.Errorf("create repair table: %w", err)
		}
		s.buf.Reset()
		pgutil.AppendCopyText(&s.buf, rows)
		if _, err := tx.Conn().PgConn().CopyFrom(ctx, &s.buf, s.copySQL); err != nil {
			return fmt.Errorf("copy source rows into staging: %w", err)
		}
		s.buf.Reset()
		pgutil.AppendCopyText(&s.buf, marks)
		if _, err := tx.Conn().PgConn().CopyFrom(ctx, &s.buf, "COPY pg_temp.syncd_fix ("+pgutil.IdentList("", guard)+", syncd_op) FROM STDIN"); err != nil {
			return fmt.Errorf("copy repair keys: %w", err)
		}
		for _, step := range []struct {
			sql string
			n   *int64
		}{{q.delete, &res.Deleted}, {q.deleteNull, &res.Deleted}, {q.update, &res.Updated}, {q.insert, &res.Inserted}} {
			if step.sql == "" {
				continue
			}
			tag, err := tx.Exec(ctx, step.sql)
			if err != nil {
				return err
			}
			*step.n += tag.RowsAffected()
		}
		// reconcile reports the copy repaired: it must still be after a
		// crash of the sink's server.
		return pgutil.Durable(ctx, tx)
	})
	if err != nil {
		return RepairResult{}, fmt.Errorf("repair %s: %w", s.table, err)
	}
	return res, nil
}

// guardColumns are the key columns then the other cursor columns: what
// identifies a row and its version.
func (s *Postgres) guardColumns() []string {
	out := slices.Clone(s.cfg.Sink.Key)
	for _, c := range s.cfg.Source.Cursor {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// repairSQL are the statements of one repair, run in this order; "" skips one.
type repairSQL struct{ delete, deleteNull, update, insert string }

func (s *Postgres) repairSQL() repairSQL {
	key, cur := s.cfg.Sink.Key, s.cfg.Source.Cursor
	target := s.qualified()
	names := make([]string, len(s.cols))
	for i, c := range s.cols {
		names[i] = c.Name
	}
	eq := func(a, b string, cols []string) string {
		return "(" + pgutil.IdentList(a, cols) + ") = (" + pgutil.IdentList(b, cols) + ")"
	}
	same := "ROW(" + pgutil.IdentList("t.", cur) + ") IS NOT DISTINCT FROM ROW(" + pgutil.IdentList("e.", cur) + ")"
	var q repairSQL
	q.delete = "DELETE FROM " + target + " AS t USING pg_temp.syncd_fix AS e WHERE e.syncd_op = 'd' AND " + eq("t.", "e.", key) + " AND " + same
	var sets []string
	for _, n := range names {
		if !slices.Contains(key, n) {
			sets = append(sets, pgutil.Ident(n)+" = s."+pgutil.Ident(n))
		}
	}
	if len(sets) > 0 {
		q.update = "UPDATE " + target + " AS t SET " + strings.Join(sets, ", ") +
			" FROM pg_temp.syncd_stage AS s JOIN pg_temp.syncd_fix AS e ON " + eq("e.", "s.", key) +
			" WHERE e.syncd_op = 'u' AND " + eq("t.", "s.", key) + " AND " + same
	}
	q.insert = "INSERT INTO " + target + " (" + pgutil.IdentList("", names) + ") SELECT " + pgutil.IdentList("s.", names) +
		" FROM pg_temp.syncd_stage AS s JOIN pg_temp.syncd_fix AS e ON " + eq("e.", "s.", key) +
		" WHERE e.syncd_op = 'i' ON CONFLICT (" + pgutil.IdentList("", key) + ") DO NOTHING"
	return q
}
