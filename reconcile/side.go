package reconcile

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/source"
)

var ident = pgutil.Ident

// side is one of the two tables: the source or the copy.
type side struct {
	role  string // "source" or "copy"
	conn  source.Session
	table config.Table
	cols  []column // the compared columns, in the source's order
	keys  []column // the key columns
	// intKey: the line is the key itself (a single integer key), else a hash.
	intKey bool
	// scope is a condition on bare column names selecting the rows to compare
	// (for the copy: only that the key is not NULL, when it may be); synced
	// says whether a source row is compared: at or before the watermark, or
	// with a NULL cursor, or ahead of the source's clock ("" for the copy).
	scope  string
	synced string
	// where is source.where for the source ("" for the copy): a row outside
	// it that reconcile cannot judge is counted as pending by the
	// classification, not by the count of rows past the watermark.
	where string
	// guard is what the side's catalog guarantees about the key.
	guard keyGuard
	// hash is the SQL of the 64-bit hash of a text (the same on both sides).
	hash func(text string) string
	// line, when set, is the SQL of a row's place on a hash line over
	// alias a (ord), instead of the hash of the key's canonical text.
	line func(a string) string
	// ranged: the side sums each child by its own range of the key's index
	// (rangedSQL) instead of placing every row in a hash table of children;
	// the key check of an integer key read from its index (keyset.go).
	ranged bool
}

func (sd *side) qualified() string { return pgutil.Qualified(sd.table.Schema, sd.table.Name) }

// ord is the SQL of a row's place on the line, over alias a.
func (sd *side) ord(a string) string {
	if sd.intKey {
		return a + "." + ident(sd.keys[0].Name)
	}
	if sd.line != nil {
		return sd.line(a)
	}
	return sd.hash(rowText(a+".", sd.keys))
}

// rangeJoin is a FROM clause of the side's rows (alias y) inside the
// segments given as parameters lo (lows, int8[]) and hi (highs): one index range scan
// per segment, for an integer key whose segments hold a small part of the
// table. Any other read scans the whole table.
func (sd *side) rangeJoin(lo, hi int) string {
	return fmt.Sprintf("unnest($%d::int8[], $%d::int8[])", lo, hi) + " AS s(syncd_lo, syncd_hi) JOIN " + sd.qualified() +
		" y ON y." + ident(sd.keys[0].Name) + " BETWEEN s.syncd_lo AND s.syncd_hi"
}

// placed is the SQL of the side's rows satisfying cond (bare column names,
// may be "") that lie in one of the children given as $1 (lows, int8[],
// sorted) and $2 (highs, inclusive, disjoint), with columns syncd_i (the
// child's 1-based index), syncd_o (the row's place on the line) and the
// expressions of extra (alias y). join selects rangeJoin's FROM clause,
// its segments given as $3 and $4 ($1 and $2 with a bucket).
// Each row's place is computed once and its child found by binary search
// (width_bucket), or by bucket (a format of the place, "%s") when the
// children are of equal width; OFFSET 0 keeps the planner from inlining
// either.
func (sd *side) placed(cond string, join bool, bucket string, extra ...string) string {
	from := sd.qualified() + " y"
	if join && bucket != "" {
		from = sd.rangeJoin(1, 2)
	} else if join {
		from = sd.rangeJoin(3, 4)
	}
	inner := "SELECT " + sd.ord("y") + " AS syncd_o"
	for i, e := range extra {
		inner += fmt.Sprintf(", %s AS syncd_x%d", e, i)
	}
	inner += " FROM " + from
	if cond != "" {
		inner += " WHERE " + cond
	}
	if bucket != "" {
		return "SELECT " + fmt.Sprintf(bucket, "a.syncd_o") + " AS syncd_i, a.* FROM (" + inner + " OFFSET 0) a"
	}
	mid := "SELECT width_bucket(a.syncd_o, $1::int8[]) AS syncd_i, a.* FROM (" + inner + " OFFSET 0) a"
	return "SELECT b.* FROM (" + mid + " OFFSET 0) b WHERE b.syncd_i > 0 AND b.syncd_o <= ($2::int8[])[b.syncd_i]"
}

// sum is the checksum of the rows of one child segment.
type sum struct {
	n int64
	h string // sum of the 64-bit row hashes, as numeric text
}

// checksums returns the checksum of every non-empty child (by index in
// kids, which are sorted and disjoint); parents are the segments the
// children cut, read by index ranges when join is set.
func (sd *side) checksums(ctx context.Context, kids, parents []segment, join bool, bucket string) (map[int]sum, error) {
	q := sd.checksumSQL(join, bucket)
	if sd.ranged {
		q, bucket, join = sd.rangedSQL(), "", false
	}
	if bucket != "" {
		// The planner takes the child of a row, a function of the key, to
		// have as many values as the key, and would sort whole rows to
		// group them; there are rows/leaf children, which a hash table
		// holds.
		if _, err := sd.conn.Exec(ctx, "SET enable_sort = off"); err != nil {
			return nil, fmt.Errorf("checksum %s %s: %w", sd.role, sd.table, err)
		}
		defer sd.conn.Exec(context.WithoutCancel(ctx), "RESET enable_sort") //nolint:errcheck // a failed reset only leaves a planner preference on a connection that closes after reconcile
	}
	var args []any
	if bucket == "" {
		lo, hi := bounds(kids)
		args = append(args, lo, hi)
	}
	if join {
		plo, phi := bounds(parents)
		args = append(args, plo, phi)
	}
	rows, err := sd.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("checksum %s %s: %w", sd.role, sd.table, err)
	}
	out := map[int]sum{}
	var i int
	var s sum
	if _, err := pgx.ForEachRow(rows, []any{&i, &s.n, &s.h}, func() error {
		out[i-1] = s // 1-based in SQL
		return nil
	}); err != nil {
		return nil, fmt.Errorf("checksum %s %s: %w", sd.role, sd.table, err)
	}
	return out, nil
}

// rangedSQL is the query of checksums for a ranged side: its parameters
// are the children's lows and highs; each child is one index range scan
// under a plain aggregate, and its 1-based index is its place in the
// arrays. No row is hashed into a table of children: on the bench's 1M
// keys read from the index, a first level of 62,500 children took 1.3-2.9 s
// through a HashAggregate and 0.25-0.4 s as 4,096 ranges, about as long as
// one sum over the whole index (docs/BENCHMARKS.md, key check).
func (sd *side) rangedSQL() string {
	cond := "y." + ident(sd.keys[0].Name) + " BETWEEN s.syncd_lo AND s.syncd_hi"
	if sd.scope != "" {
		cond = and(sd.scope, cond)
	}
	if sd.synced != "" {
		cond = and(cond, sd.synced)
	}
	return "SELECT s.syncd_i, a.n, a.h::text FROM unnest($1::int8[], $2::int8[]) WITH ORDINALITY AS s(syncd_lo, syncd_hi, syncd_i), " +
		"LATERAL (SELECT count(*)::int8 AS n, coalesce(sum(" + sd.hash(rowText("y.", sd.cols)) + "), 0) AS h FROM " + sd.qualified() + " y WHERE " + cond + ") a WHERE a.n > 0"
}

// checksumSQL is the query of checksums: see checksums; its parameters
// are the children's lows and highs unless bucket is given, then the
// parents' when join is set.
func (sd *side) checksumSQL(join bool, bucket string) string {
	cond := sd.scope
	if sd.synced != "" {
		cond = and(cond, sd.synced)
	}
	if bucket == "" {
		return "SELECT p.syncd_i::int8, count(*)::int8, coalesce(sum(p.syncd_x0), 0)::text FROM (" +
			sd.placed(cond, join, bucket, sd.hash(rowText("y.", sd.cols))) + ") p GROUP BY 1"
	}
	// No subquery fence: each row's child is computed once anyway (it is
	// the grouping key), and a flat query can run in parallel workers, as
	// a plain sum over the table would.
	from := sd.qualified() + " y"
	if join {
		from = sd.rangeJoin(1, 2)
	}
	q := "SELECT (" + fmt.Sprintf(bucket, sd.ord("y")) + ")::int8, count(*)::int8, coalesce(sum(" + sd.hash(rowText("y.", sd.cols)) + "), 0)::text FROM " + from
	if cond != "" {
		q += " WHERE " + cond
	}
	return q + " GROUP BY 1"
}

// row is one fetched row: the canonical text and the text output of each
// compared column (nil: NULL), and for a source row whether it is compared
// (synced, or with a NULL cursor or ahead of the clock), inside the scope
// and inside source.where.
type row struct {
	canon [][]byte
	raw   [][]byte
	// hash is the text of the row's hash when the row was streamed as its
	// key and hash (canon and raw then hold the key columns only).
	hash    []byte
	ord     int64
	synced  bool
	inScope bool
	inWhere bool
}

// selectList is what every fetch reads from alias y.
func (sd *side) selectList() string {
	return strings.Join(sd.rowExprs(sd.cols), ", ")
}

// rowExprs are the expressions a row of alias y is read with: the
// canonical text of each of cols, then its text output, then, for the
// source, whether the row is synced, in scope and in source.where.
func (sd *side) rowExprs(cols []column) []string {
	var parts []string
	for _, c := range cols {
		parts = append(parts, canonOf("y.", c))
	}
	for _, c := range cols {
		parts = append(parts, "y."+ident(c.Name))
	}
	if sd.role == "source" {
		parts = append(parts, "("+orTrue(sd.synced)+")::text", "("+orTrue(sd.scope)+")::text", "("+orTrue(sd.where)+")::text")
	}
	return parts
}

// fetchKeys reads the rows with the given keys (the text of each key
// column), whatever the scope and the watermark.
func (sd *side) fetchKeys(ctx context.Context, keys [][]string, fn func(row)) error {
	k := sd.keyArrays(keys)
	q := "SELECT " + sd.selectList() + " FROM " + sd.qualified() + " y WHERE (" + strings.Join(k.cols, ", ") + ") IN (SELECT " +
		strings.Join(k.casts, ", ") + " FROM unnest(" + strings.Join(k.params, ", ") + ") AS u(" + strings.Join(k.names, ", ") + "))"
	return sd.read(ctx, q, k.args, k.oids, fn)
}

// keyArrays is keys (the text of each key column) as one text array
// parameter per key column, unnested as u.syncd_k1...: the parameters,
// their SQL, the unnested columns' names, each cast to its key column's
// type, and the key columns of alias y.
type keyArrays struct {
	args                       []any
	oids                       []uint32
	params, names, casts, cols []string
}

func (sd *side) keyArrays(keys [][]string) keyArrays {
	n := len(sd.keys)
	k := keyArrays{args: make([]any, n), oids: make([]uint32, n), params: make([]string, n), names: make([]string, n), casts: make([]string, n), cols: make([]string, n)}
	for i, c := range sd.keys {
		vals := make([]string, len(keys))
		for j, key := range keys {
			vals[j] = key[i]
		}
		k.args[i], k.oids[i] = vals, pgtype.TextArrayOID
		k.params[i] = fmt.Sprintf("$%d::text[]", i+1)
		k.names[i] = fmt.Sprintf("syncd_k%d", i+1)
		k.casts[i] = fmt.Sprintf("u.syncd_k%d::%s", i+1, c.Type)
		k.cols[i] = "y." + ident(c.Name)
	}
	return k
}

// fetchEqual reads, for each of keys (the text of each key column), a row
// of the side whose key equals it by the table's own equality: under a
// nondeterministic collation 'Alpha' finds 'alpha', which fetchKeys'
// caller, matching keys by their text, does not. fn gets the index of
// the key in keys.
func (sd *side) fetchEqual(ctx context.Context, keys [][]string, fn func(int, row)) error {
	k := sd.keyArrays(keys)
	eq := make([]string, len(k.cols))
	for i := range k.cols {
		eq[i] = k.cols[i] + " = " + k.casts[i]
	}
	q := "SELECT " + sd.selectList() + ", u.syncd_ord FROM unnest(" + strings.Join(k.params, ", ") + ") WITH ORDINALITY AS u(" + strings.Join(k.names, ", ") +
		", syncd_ord) CROSS JOIN LATERAL (SELECT * FROM " + sd.qualified() + " y WHERE " + strings.Join(eq, " AND ") + " LIMIT 1) y"
	return sd.readVals(ctx, q, k.args, k.oids, func(r row, vals [][]byte) error {
		ord, err := strconv.Atoi(string(vals[len(vals)-1]))
		if err != nil || ord < 1 || ord > len(keys) {
			return fmt.Errorf("read rows of %s %s: key number %q", sd.role, sd.table, vals[len(vals)-1])
		}
		fn(ord-1, r)
		return nil
	})
}

// read runs q with text results and decodes each row.
func (sd *side) read(ctx context.Context, q string, args []any, oids []uint32, fn func(row)) error {
	return sd.readVals(ctx, q, args, oids, func(r row, _ [][]byte) error { fn(r); return nil })
}

// readVals is read, fn also given the row's values as they came (columns
// past the side's select list follow them).
func (sd *side) readVals(ctx context.Context, q string, args []any, oids []uint32, fn func(row, [][]byte) error) error {
	m := sd.conn.TypeMap()
	params := make([][]byte, len(args))
	for i, a := range args {
		b, err := m.Encode(oids[i], pgtype.TextFormatCode, a, nil)
		if err != nil {
			return fmt.Errorf("encode parameter: %w", err)
		}
		params[i] = b
	}
	n := len(sd.cols)
	rr := sd.conn.PgConn().ExecParams(ctx, q, params, oids, nil, nil)
	for rr.NextRow() {
		vals := rr.Values()
		r := row{canon: clone(vals[:n]), raw: clone(vals[n : 2*n])}
		if sd.role == "source" {
			r.synced = string(vals[2*n]) == "true"
			r.inScope = string(vals[2*n+1]) == "true"
			r.inWhere = string(vals[2*n+2]) == "true"
		}
		if err := fn(r, vals); err != nil {
			_, _ = rr.Close()
			return err
		}
	}
	if _, err := rr.Close(); err != nil {
		return fmt.Errorf("read rows of %s %s: %w", sd.role, sd.table, err)
	}
	return nil
}

func clone(vals [][]byte) [][]byte {
	out := make([][]byte, len(vals))
	for i, v := range vals {
		if v != nil {
			out[i] = append([]byte{}, v...)
		}
	}
	return out
}

func bounds(segs []segment) (lo, hi []int64) {
	lo = make([]int64, len(segs))
	hi = make([]int64, len(segs))
	for i, s := range segs {
		lo[i], hi[i] = s.lo.Int64(), s.hi.Int64()
	}
	return lo, hi
}

func and(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return "(" + a + ") AND (" + b + ")"
}

func orTrue(cond string) string {
	if cond == "" {
		return "true"
	}
	return cond
}

// literal quotes s as an SQL string constant, whatever
// standard_conforming_strings says.
func literal(s string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + "'"
}
