package source

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
)

// Table is a source table as the catalog describes it.
type Table struct {
	Ident   config.Table
	Columns []page.Column // the selected columns, in order
	Nums    []int16       // their attnums, which a rename keeps
	Cursor  []page.Column
	// CursorIdx are the positions of the cursor columns in Columns.
	CursorIdx []int
	// Temporal is true when the first cursor column is a date or timestamp,
	// which makes lookback and resync --from meaningful.
	Temporal bool
	// Seq is the oid of the sequence that fills a non-temporal first cursor
	// column in commit-compatible order (seqcursor.go), SeqName its name; 0
	// when there is none.
	Seq     uint32
	SeqName string
	// unsafe says why a non-temporal first cursor column cannot be bounded
	// ("" when it can): only with source.bound: off is such a config run.
	unsafe string
	// Types are the user-defined types the columns need, each after the
	// types it is built on; Checks the table's check constraints.
	Types  []page.UserType
	Checks []string
}

// Cursor column types whose btree order is total and whose text output
// parses back to the same value.
var cursorTypes = map[string]bool{
	"smallint": true, "integer": true, "bigint": true, "numeric": true,
	"timestamp with time zone": true, "timestamp without time zone": true, "date": true,
	"text": true, "character varying": true, "uuid": true,
}

var temporalTypes = map[string]bool{
	"timestamp with time zone": true, "timestamp without time zone": true, "date": true,
}

// baseType strips a type modifier wherever format_type puts it:
// "numeric(12,2)" -> "numeric", "timestamp(3) with time zone" ->
// "timestamp with time zone".
func baseType(t string) string {
	i := strings.IndexByte(t, '(')
	if i < 0 {
		return t
	}
	j := strings.IndexByte(t[i:], ')')
	if j < 0 {
		return t[:i]
	}
	return t[:i] + t[i+j+1:]
}

type catalogColumn struct {
	page.Column
	Num int16
}

// Describe reads the table's columns from the catalog and checks the config
// against them: every named column exists, the cursor ends in a unique
// column, and every cursor column has a supported type. Problems come back
// as config errors naming the file, the line and the key.
func Describe(ctx context.Context, conn *pgx.Conn, c *config.Config) (*Table, error) {
	ident := c.Source.Ident
	all, err := columns(ctx, conn, ident)
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", ident, err)
	}
	if len(all) == 0 {
		return nil, c.Errorf("source.table", "table %s does not exist in the source database (or this role cannot see it); check the name, which is case-sensitive", ident)
	}
	byName := map[string]catalogColumn{}
	for _, col := range all {
		byName[col.Name] = col
	}
	t := &Table{Ident: ident}
	names := c.Source.Columns
	if len(names) == 0 {
		for _, col := range all {
			names = append(names, col.Name)
		}
	}
	for _, n := range names {
		col, ok := byName[n]
		if !ok {
			return nil, c.Errorf("source.columns", "column %q does not exist in %s", n, ident)
		}
		t.Columns = append(t.Columns, col.Column)
		t.Nums = append(t.Nums, col.Num)
	}
	for _, n := range c.Source.Cursor {
		col, ok := byName[n]
		if !ok {
			return nil, c.Errorf("source.cursor", "column %q does not exist in %s", n, ident)
		}
		if !cursorTypes[baseType(col.Type)] {
			return nil, c.Errorf("source.cursor", "column %q of %s has type %s, which syncd cannot use as a cursor; use a timestamp, date, integer, numeric, text or uuid column", n, ident, col.Type)
		}
		t.Cursor = append(t.Cursor, col.Column)
		t.CursorIdx = append(t.CursorIdx, slices.IndexFunc(t.Columns, func(x page.Column) bool { return x.Name == n }))
	}
	if slices.Contains(t.CursorIdx, -1) {
		return nil, c.Errorf("source.columns", "every cursor column must be selected")
	}
	if c.Compare() && len(c.Sink.Key) == 0 {
		key, err := PrimaryKey(ctx, conn, ident)
		if err != nil {
			return nil, err
		}
		if len(key) == 0 {
			return nil, c.Errorf("sink.key", "mode: compare matches the copy's rows to the source's by key, and %s has no primary key; give sink.key (NOT NULL columns that identify a row), or add a primary key", ident)
		}
		c.Sink.Key = key
	}
	for _, n := range c.Sink.Key {
		if _, ok := byName[n]; !ok {
			return nil, c.Errorf("sink.key", "column %q does not exist in source table %s", n, ident)
		}
	}
	if d := c.Source.DeletedColumn; d != "" {
		if _, ok := byName[d]; !ok {
			return nil, c.Errorf("source.deleted_column", "column %q does not exist in %s", d, ident)
		}
	}
	if len(t.Cursor) == 0 {
		// mode: compare reads no cursor: the key is all it needs.
		if err := checkKeyNotNull(c, ident, byName); err != nil {
			return nil, err
		}
		if t.Types, err = userTypes(ctx, conn, t.Columns); err != nil {
			return nil, fmt.Errorf("describe %s: %w", ident, err)
		}
		if t.Checks, err = tableChecks(ctx, conn, ident.Schema, ident.Name); err != nil {
			return nil, fmt.Errorf("describe %s: %w", ident, err)
		}
		return t, nil
	}
	t.Temporal = temporalTypes[baseType(t.Cursor[0].Type)]
	if !t.Temporal && c.Source.Lookback.Duration > 0 {
		if _, set := c.Lines["source.lookback"]; set {
			return nil, c.Errorf("source.lookback", "lookback needs a date or timestamp first cursor column, and %q is %s; remove lookback", t.Cursor[0].Name, t.Cursor[0].Type)
		}
		c.Source.Lookback = config.Duration{}
	}
	if err := checkTieBreaker(ctx, conn, c, ident, all); err != nil {
		return nil, err
	}
	if err := checkKeyNotNull(c, ident, byName); err != nil {
		return nil, err
	}
	if err := classifyCursor(ctx, conn, c, t); err != nil {
		return nil, err
	}
	if t.Types, err = userTypes(ctx, conn, t.Columns); err != nil {
		return nil, fmt.Errorf("describe %s: %w", ident, err)
	}
	if t.Checks, err = tableChecks(ctx, conn, ident.Schema, ident.Name); err != nil {
		return nil, fmt.Errorf("describe %s: %w", ident, err)
	}
	return t, nil
}

// checkKeyNotNull refuses a copy keyed by a source column that allows NULL.
// A unique index allows any number of NULLs in the copy, so ON CONFLICT
// never matches a row with a NULL key and every run would add it again.
// A column that holds no NULL today is refused too: the guarantee cannot
// rest on the data. (A coupon campaign's targets table has a primary key,
// which refuses a NULL key loudly.)
func checkKeyNotNull(c *config.Config, t config.Table, byName map[string]catalogColumn) error {
	if c.Sink.Type != config.SinkPostgres {
		return nil
	}
	var names, fixes []string
	for _, k := range c.Sink.Key {
		if !byName[k].NotNull {
			names = append(names, fmt.Sprintf("%q", k))
			fixes = append(fixes, "ALTER TABLE "+pgutil.Qualified(t.Schema, t.Name)+" ALTER COLUMN "+pgutil.Ident(k)+" SET NOT NULL")
		}
	}
	if len(names) == 0 {
		return nil
	}
	return c.KeyErrorf("key column %s of source table %s (source %s) allows NULL, and rows with a NULL key would be added to the copy again on every run; run %s on the source, or choose NOT NULL key columns",
		strings.Join(names, ", "), t, c.Name, strings.Join(fixes, "; "))
}

func columns(ctx context.Context, conn *pgx.Conn, t config.Table) ([]catalogColumn, error) {
	rows, err := conn.Query(ctx, `
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.atttypid::int8, a.attnotnull, a.attnum
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r','p','v','m','f')
  AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, t.Schema, t.Name)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (catalogColumn, error) {
		var c catalogColumn
		var oid int64
		err := r.Scan(&c.Name, &c.Type, &oid, &c.NotNull, &c.Num)
		c.TypeOID = uint32(oid)
		return c, err
	})
}

// errNoTieBreaker is wrapped when no unique index covers the cursor.
var errNoTieBreaker = errors.New("cursor has no unique tie-breaker")

// checkTieBreaker requires a valid, non-partial unique index (or primary key)
// whose columns are all cursor columns and include the last one, so that the
// cursor orders rows totally and a page boundary never falls inside a tie.
func checkTieBreaker(ctx context.Context, conn *pgx.Conn, c *config.Config, t config.Table, all []catalogColumn) error {
	rows, err := conn.Query(ctx, `
SELECT i.indkey::int2[]
FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND i.indisunique AND i.indisvalid
  AND i.indpred IS NULL AND i.indexprs IS NULL`, t.Schema, t.Name)
	if err != nil {
		return fmt.Errorf("read unique indexes of %s: %w", t, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[[]int16])
	if err != nil {
		return fmt.Errorf("read unique indexes of %s: %w", t, err)
	}
	num := map[string]int16{}
	for _, col := range all {
		num[col.Name] = col.Num
	}
	cursor := map[int16]bool{}
	for _, n := range c.Source.Cursor {
		cursor[num[n]] = true
	}
	last := num[c.Source.Cursor[len(c.Source.Cursor)-1]]
	for _, key := range keys {
		if slices.Contains(key, last) && !slices.ContainsFunc(key, func(k int16) bool { return !cursor[k] }) {
			return nil
		}
	}
	return c.Errorf("source.cursor", "last column %q is not unique in %s (no primary key or unique index on it): %v; end the cursor with a unique column such as the primary key, or add a unique index", c.Source.Cursor[len(c.Source.Cursor)-1], t, errNoTieBreaker)
}
