package source

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/watermark"
)

// Schema is the selected columns of the source table as Describe read
// them (with their attnums, which a rename keeps), and its primary key.
func (r *Reader) Schema(ctx context.Context) (watermark.Schema, error) {
	s := watermark.Schema{Columns: r.table.SchemaColumns()}
	rows, err := r.conn.Query(ctx, `
SELECT a.attname
FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = $1::regclass AND i.indisprimary
ORDER BY array_position(i.indkey::int2[], a.attnum)`, pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name))
	if err != nil {
		return s, fmt.Errorf("read the primary key of %s: %w", r.table.Ident, err)
	}
	if s.PrimaryKey, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return s, fmt.Errorf("read the primary key of %s: %w", r.table.Ident, err)
	}
	return s, nil
}

// SchemaColumns are the selected columns with their attnums.
func (t *Table) SchemaColumns() []watermark.SchemaColumn {
	out := make([]watermark.SchemaColumn, len(t.Columns))
	for i, c := range t.Columns {
		out[i] = watermark.SchemaColumn{Name: c.Name, Type: c.Type, Num: t.Nums[i]}
	}
	return out
}

// BackfillPage reads up to limit rows in key order after the key after
// (nil: from the start): the text of each key column, then of each column
// in cols. keyTypes are the key columns' types, to compare after with.
func (r *Reader) BackfillPage(ctx context.Context, key, keyTypes, cols []string, after []string, limit int) ([][]*string, error) {
	q := "SELECT "
	for i, k := range append(append([]string{}, key...), cols...) {
		if i > 0 {
			q += ", "
		}
		q += "t." + pgutil.Ident(k) + "::text"
	}
	// Qualified, so that ORDER BY means the column and not its text output.
	q += " FROM " + pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name) + " AS t"
	args := []any{}
	if after != nil {
		q += " WHERE (" + pgutil.IdentList("t.", key) + ") > ("
		for i, v := range after {
			if i > 0 {
				q += ", "
			}
			args = append(args, v)
			q += fmt.Sprintf("$%d::%s", len(args), keyTypes[i])
		}
		q += ")"
	}
	q += fmt.Sprintf(" ORDER BY %s LIMIT %d", pgutil.IdentList("t.", key), limit)
	rows, err := r.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read backfill page of %s: %w", r.table.Ident, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) ([]*string, error) {
		vals := make([]*string, len(key)+len(cols))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		return vals, row.Scan(ptrs...)
	})
	if err != nil {
		return nil, fmt.Errorf("read backfill page of %s: %w", r.table.Ident, err)
	}
	return out, nil
}
