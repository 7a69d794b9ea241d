package testutil

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Querier is a database handle: *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ShowKeys is how many keys of each kind a Diff keeps.
const ShowKeys = 5

// Diff is how a copy differs from its source, row by row.
type Diff struct {
	SourceRows, CopyRows       int
	NoSource, NoCopy           bool // the table does not exist
	Missing, Extra, Changed    int  // rows of the source not in the copy, of the copy not in the source, in both with other values
	Duplicates                 int  // keys found more than once on either side
	MissingKeys, ExtraKeys     []string
	ChangedKeys, DuplicateKeys []string
}

// Equal reports whether both tables exist and hold the same rows.
func (d Diff) Equal() bool {
	return !d.NoSource && !d.NoCopy && d.Missing == 0 && d.Extra == 0 && d.Changed == 0 && d.Duplicates == 0
}

// String says how the tables differ, with the first few keys of each kind.
func (d Diff) String() string {
	if d.NoSource || d.NoCopy {
		return fmt.Sprintf("source exists: %v, copy exists: %v", !d.NoSource, !d.NoCopy)
	}
	s := fmt.Sprintf("%d source rows, %d copy rows: %d missing %v, %d extra %v, %d changed %v",
		d.SourceRows, d.CopyRows, d.Missing, d.MissingKeys, d.Extra, d.ExtraKeys, d.Changed, d.ChangedKeys)
	if d.Duplicates > 0 {
		s += fmt.Sprintf(", %d duplicate keys %v", d.Duplicates, d.DuplicateKeys)
	}
	return s
}

// Compare says how DiffTables reads a table: Key is the key columns
// (default: the source table's primary key, else id), Columns the columns compared (default the whole row, in
// table order: both tables must then have the same columns in the same
// order). Names are SQL identifiers, quoted here.
type Compare struct {
	Key     []string
	Columns []string
}

// DiffTables compares table src in db a with table dst in db b (names as
// SQL, e.g. public.orders) by the md5 of each row's text, per key (the
// source's primary key, else id).
func DiffTables(t testing.TB, a Querier, src string, b Querier, dst string) Diff {
	t.Helper()
	return Compare{}.Tables(t, a, src, b, dst)
}

// RequireEqual fails the test unless the copy equals the source row by
// row (DiffTables), and returns the number of rows.
func RequireEqual(t testing.TB, a Querier, src string, b Querier, dst string) int {
	t.Helper()
	return Compare{}.RequireEqual(t, a, src, b, dst)
}

// RequireEqual is RequireEqual with c's key and columns.
func (c Compare) RequireEqual(t testing.TB, a Querier, src string, b Querier, dst string) int {
	t.Helper()
	d := c.Tables(t, a, src, b, dst)
	if !d.Equal() {
		t.Fatalf("copy %s differs from source %s: %s", dst, src, d)
	}
	return d.SourceRows
}

// Tables compares the two tables as c says.
func (c Compare) Tables(t testing.TB, a Querier, src string, b Querier, dst string) Diff {
	t.Helper()
	var d Diff
	if len(c.Key) == 0 {
		c.Key = primaryKey(t, a, src)
	}
	sa, okA := c.hashes(t, a, src)
	sb, okB := c.hashes(t, b, dst)
	d.NoSource, d.NoCopy = !okA, !okB
	if !okA || !okB {
		return d
	}
	d.SourceRows, d.CopyRows = sa.rows, sb.rows
	for k, h := range sa.m {
		switch g, ok := sb.m[k]; {
		case !ok:
			d.Missing++
			d.MissingKeys = append(d.MissingKeys, k)
		case g != h:
			d.Changed++
			d.ChangedKeys = append(d.ChangedKeys, k)
		}
	}
	for k := range sb.m {
		if _, ok := sa.m[k]; !ok {
			d.Extra++
			d.ExtraKeys = append(d.ExtraKeys, k)
		}
	}
	d.Duplicates = len(sa.dups) + len(sb.dups)
	d.DuplicateKeys = append(sa.dups, sb.dups...)
	d.MissingKeys, d.ExtraKeys, d.ChangedKeys, d.DuplicateKeys = firstKeys(d.MissingKeys), firstKeys(d.ExtraKeys), firstKeys(d.ChangedKeys), firstKeys(d.DuplicateKeys)
	return d
}

type hashed struct {
	m    map[string]string
	dups []string
	rows int
}

// hashes reads key text and row md5 of every row; ok is false when the
// table does not exist.
func (c Compare) hashes(t testing.TB, db Querier, table string) (hashed, bool) {
	t.Helper()
	ctx := context.Background()
	var exists bool
	if err := db.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		t.Fatalf("look up table %s: %v", table, err)
	}
	if !exists {
		return hashed{}, false
	}
	keys := c.Key
	keyExpr := "x." + quote(keys[0]) + "::text"
	if len(keys) > 1 {
		keyExpr = "row(" + qualified(keys) + ")::text"
	}
	rowExpr := "x"
	if len(c.Columns) > 0 {
		rowExpr = "row(" + qualified(c.Columns) + ")"
	}
	q := "SELECT " + keyExpr + ", md5(" + rowExpr + "::text) FROM " + table + " x"
	rows, err := db.Query(ctx, q)
	if err != nil {
		t.Fatalf("read %s: %s: %v", table, q, err)
	}
	h := hashed{m: map[string]string{}}
	var k, sum *string
	if _, err := pgx.ForEachRow(rows, []any{&k, &sum}, func() error {
		h.rows++
		key := "NULL"
		if k != nil {
			key = *k
		}
		if _, dup := h.m[key]; dup {
			h.dups = append(h.dups, key)
			return nil
		}
		h.m[key] = *sum
		return nil
	}); err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return h, true
}

// primaryKey returns the primary key columns of table, or [id] when it
// has none or does not exist.
func primaryKey(t testing.TB, db Querier, table string) []string {
	t.Helper()
	var cols []string
	err := db.QueryRow(context.Background(), `SELECT coalesce(array_agg(a.attname::text ORDER BY k.ord), '{}')
FROM pg_index i CROSS JOIN unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = to_regclass($1) AND i.indisprimary`, table).Scan(&cols)
	if err != nil {
		t.Fatalf("primary key of %s: %v", table, err)
	}
	if len(cols) == 0 {
		return []string{"id"}
	}
	return cols
}

func quote(name string) string { return pgx.Identifier{name}.Sanitize() }

func qualified(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = "x." + quote(c)
	}
	return strings.Join(q, ", ")
}

// firstKeys sorts keys (shorter first, so integers sort as numbers) and
// keeps the first ShowKeys.
func firstKeys(keys []string) []string {
	slices.SortFunc(keys, func(a, b string) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(a, b)
	})
	if len(keys) > ShowKeys {
		keys = keys[:ShowKeys]
	}
	return keys
}
