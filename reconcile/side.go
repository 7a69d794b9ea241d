package reconcile

import (
	"context"
	"fmt"
	"math/big"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
)

var ident = pgutil.Ident

// side is one of the two tables: the source or the copy.
type side struct {
	role  string // "source" or "copy"
	conn  *pgx.Conn
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
}

func (sd *side) qualified() string { return pgutil.Qualified(sd.table.Schema, sd.table.Name) }

// ord is the SQL of a row's place on the line, over alias a.
func (sd *side) ord(a string) string {
	if sd.intKey {
		return a + "." + ident(sd.keys[0].Name)
	}
	return hash64(rowText(a+".", sd.keys))
}

// segmentFrom returns a FROM clause and a WHERE condition whose rows (alias
// y) are the side's rows satisfying cond (bare column names, may be "") that
// lie inside one of the segments given as $1 (lows, int8[]) and $2 (highs,
// int8[], inclusive, sorted and disjoint), with the SQL of the segment's
// 1-based index and of the row's place on the line.
func (sd *side) segmentFrom(cond string) (from, where, segIdx, ord string) {
	if sd.intKey {
		// A join the planner runs as one index range scan per segment.
		from = "unnest($1::int8[], $2::int8[]) WITH ORDINALITY AS s(syncd_lo, syncd_hi, syncd_i) JOIN " + sd.qualified() +
			" y ON y." + ident(sd.keys[0].Name) + " BETWEEN s.syncd_lo AND s.syncd_hi"
		return from, cond, "s.syncd_i", sd.ord("y")
	}
	// The hash has no index: one scan, the hash computed once per row
	// (OFFSET 0 keeps the planner from inlining it), the segment found by
	// binary search.
	inner := "SELECT " + sd.ord("z") + " AS syncd_o, z.* FROM " + sd.qualified() + " z"
	if cond != "" {
		inner += " WHERE " + cond
	}
	from = "(SELECT x.*, width_bucket(x.syncd_o, $1::int8[]) AS syncd_i FROM (" + inner + " OFFSET 0) x OFFSET 0) y"
	return from, "y.syncd_i > 0 AND y.syncd_o <= ($2::int8[])[y.syncd_i]", "y.syncd_i", "y.syncd_o"
}

// sum is the checksum of the rows of one child segment.
type sum struct {
	n int64
	h string // sum of the 64-bit row hashes, as numeric text
}

type child struct{ seg, idx int64 }

// checksums returns the checksum of every non-empty child of segs, each
// segment being cut into children of width widths[i] from its low end.
func (sd *side) checksums(ctx context.Context, segs []segment, widths []*big.Int) (map[child]sum, error) {
	cond := sd.scope
	if sd.synced != "" {
		cond = and(cond, sd.synced)
	}
	from, where, segIdx, ord := sd.segmentFrom(cond)
	q := "SELECT " + segIdx + "::int8, div(" + ord + "::numeric - (($1::int8[])[" + segIdx + "])::numeric, (($3::text[])[" + segIdx + "])::numeric)::int8, count(*)::int8, coalesce(sum(" +
		hash64(rowText("y.", sd.cols)) + "), 0)::text FROM " + from
	if where != "" {
		q += " WHERE " + where
	}
	q += " GROUP BY 1, 2"
	lo, hi := bounds(segs)
	w := make([]string, len(widths))
	for i, x := range widths {
		w[i] = x.String()
	}
	rows, err := sd.conn.Query(ctx, q, lo, hi, w)
	if err != nil {
		return nil, fmt.Errorf("checksum %s %s: %w", sd.role, sd.table, err)
	}
	out := map[child]sum{}
	var c child
	var s sum
	if _, err := pgx.ForEachRow(rows, []any{&c.seg, &c.idx, &s.n, &s.h}, func() error {
		c.seg-- // 1-based in SQL
		out[c] = s
		return nil
	}); err != nil {
		return nil, fmt.Errorf("checksum %s %s: %w", sd.role, sd.table, err)
	}
	return out, nil
}

// row is one fetched row: the canonical text and the text output of each
// compared column (nil: NULL), and for a source row whether it is compared
// (synced, or with a NULL cursor or ahead of the clock), inside the scope
// and inside source.where.
type row struct {
	canon   [][]byte
	raw     [][]byte
	synced  bool
	inScope bool
	inWhere bool
}

// selectList is what every fetch reads from alias y.
func (sd *side) selectList() string {
	var parts []string
	for _, c := range sd.cols {
		parts = append(parts, canon("y."+ident(c.Name), c.Base, c.Elem))
	}
	for _, c := range sd.cols {
		parts = append(parts, "y."+ident(c.Name))
	}
	if sd.role == "source" {
		parts = append(parts, "("+orTrue(sd.synced)+")::text", "("+orTrue(sd.scope)+")::text", "("+orTrue(sd.where)+")::text")
	}
	return strings.Join(parts, ", ")
}

// fetchSegments reads the rows in scope inside segs (not limited to the
// synced ones: the caller classifies).
func (sd *side) fetchSegments(ctx context.Context, segs []segment, fn func(row)) error {
	from, where, _, _ := sd.segmentFrom(sd.scope)
	q := "SELECT " + sd.selectList() + " FROM " + from
	if where != "" {
		q += " WHERE " + where
	}
	lo, hi := bounds(segs)
	return sd.read(ctx, q, []any{lo, hi}, []uint32{pgtype.Int8ArrayOID, pgtype.Int8ArrayOID}, fn)
}

// fetchKeys reads the rows with the given keys (the text of each key
// column), whatever the scope and the watermark.
func (sd *side) fetchKeys(ctx context.Context, keys [][]string, fn func(row)) error {
	cols := make([]string, len(sd.keys))
	casts := make([]string, len(sd.keys))
	args := make([]any, len(sd.keys))
	oids := make([]uint32, len(sd.keys))
	for i, k := range sd.keys {
		cols[i] = "y." + ident(k.Name)
		casts[i] = fmt.Sprintf("u.syncd_k%d::%s", i+1, k.Type)
		vals := make([]string, len(keys))
		for j, key := range keys {
			vals[j] = key[i]
		}
		args[i] = vals
		oids[i] = pgtype.TextArrayOID
	}
	params := make([]string, len(sd.keys))
	names := make([]string, len(sd.keys))
	for i := range sd.keys {
		params[i] = fmt.Sprintf("$%d::text[]", i+1)
		names[i] = fmt.Sprintf("syncd_k%d", i+1)
	}
	q := "SELECT " + sd.selectList() + " FROM " + sd.qualified() + " y WHERE (" + strings.Join(cols, ", ") + ") IN (SELECT " +
		strings.Join(casts, ", ") + " FROM unnest(" + strings.Join(params, ", ") + ") AS u(" + strings.Join(names, ", ") + "))"
	return sd.read(ctx, q, args, oids, fn)
}

// read runs q with text results and decodes each row.
func (sd *side) read(ctx context.Context, q string, args []any, oids []uint32, fn func(row)) error {
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
		fn(r)
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
