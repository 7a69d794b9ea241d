package reconcile

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/source"
)

// column is one compared column as one side's catalog describes it.
type column struct {
	Name string
	Type string // format_type, for casts
	Base string // pg_type.typname after resolving a domain: int4, numeric, _text
	Elem string // element typname of an array, else ""
	// Loose is set, on both sides, when the copy's column cannot spell
	// the source's values as the source does although it holds them
	// exactly (sink.holds accepts it): a numeric with another scale
	// (numeric(12,2) for numeric(10,1), or for an integer), jsonb for
	// json, double precision for real, or arrays of these. Such a column
	// is compared through a form that both spellings share (trailing
	// fractional zeros dropped, jsonb text, the float8 of the text);
	// every other column by its exact text.
	Loose bool
}

// describe reads the types of names in table t on conn.
func describe(ctx context.Context, conn source.Querier, t config.Table, names []string) ([]column, error) {
	rows, err := conn.Query(ctx, `
SELECT a.attname, format_type(a.atttypid, a.atttypmod), bt.typname::text,
       CASE WHEN bt.typcategory = 'A' THEN coalesce(et.typname::text, '') ELSE '' END
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_type ty ON ty.oid = a.atttypid
JOIN pg_type bt ON bt.oid = CASE WHEN ty.typtype = 'd' THEN ty.typbasetype ELSE ty.oid END
LEFT JOIN pg_type et ON et.oid = bt.typelem
WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped`, t.Schema, t.Name)
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", t, err)
	}
	byName := map[string]column{}
	var col column
	if _, err := pgx.ForEachRow(rows, []any{&col.Name, &col.Type, &col.Base, &col.Elem}, func() error {
		byName[col.Name] = col
		return nil
	}); err != nil {
		return nil, fmt.Errorf("describe %s: %w", t, err)
	}
	if len(byName) == 0 {
		return nil, fmt.Errorf("table %s does not exist (or this role cannot see it)", t)
	}
	out := make([]column, len(names))
	for i, n := range names {
		c, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("column %q is missing from %s", n, t)
		}
		out[i] = c
	}
	return out, nil
}

// plainText are the element types whose array's text output is exact and
// does not depend on the server's version or settings: an array of them is
// compared by its text output as a whole.
var plainText = map[string]bool{
	"int2": true, "int4": true, "int8": true, "oid": true, "bool": true, "uuid": true,
	"text": true, "varchar": true, "bpchar": true, "name": true, "citext": true,
	"time": true, "timetz": true, "jsonb": true, "char": true, "numeric": true, "json": true,
}

// canonOf is the canonical text of column c of alias prefix.
func canonOf(prefix string, c column) string {
	return canon(prefix+ident(c.Name), c.Base, c.Elem, c.Loose)
}

// canon returns the SQL expression of the canonical text of expr, a value
// of catalog type base (element type elem when base is an array); it is
// NULL exactly when the value is NULL. Two values get the same canonical
// text exactly when their text output is the same in sessions with the
// same settings (syncd's, internal/pgutil): numeric 1.0 and 1.00, json
// with another key order or spacing, float8 0 and -0, interval '1 day' and
// '24 hours' all differ. The form avoids what the settings or the server's
// version change (time zone, date and interval styles, float digits), so
// the two servers need not agree on them. loose (column.Loose) lets the
// spellings that the copy's column type imposes compare equal.
func canon(expr, base, elem string, loose bool) string {
	switch base {
	case "numeric":
		if loose {
			return numericCanon("(" + expr + ")::text")
		}
		return "(" + expr + ")::text"
	case "money":
		// Money is an integer count of cents (or of the locale's
		// smallest unit): its numeric value is exact, its text follows
		// lc_monetary.
		return numericCanon("(" + expr + ")::numeric::text")
	case "float4", "float8":
		// The IEEE-754 bits (float8out follows extra_float_digits and the
		// server's version), -0 apart from 0, but every NaN alike: all
		// print as NaN, and 'NaN' and 'Infinity' * 0 differ in the sign
		// bit. A real is compared as the double of its text when the
		// copy holds it as double precision (the text is what the sink
		// writes).
		v := "(" + expr + ")::float8"
		if loose && base == "float4" {
			v = "(" + expr + ")::text::float8"
		}
		return "CASE WHEN " + v + " = 'NaN'::float8 THEN 'NaN' ELSE encode(float8send(" + v + "), 'hex') END"
	case "timestamptz":
		return dateCanon(expr, "("+expr+") AT TIME ZONE 'UTC'", "'0001-01-01 00:00:00+00'", "YYYY-MM-DD\"T\"HH24:MI:SS.US")
	case "timestamp":
		return dateCanon(expr, expr, "'0001-01-01 00:00:00'", "YYYY-MM-DD\"T\"HH24:MI:SS.US")
	case "date":
		return dateCanon(expr, expr, "'0001-01-01'", "YYYY-MM-DD")
	case "interval":
		// Months, days and microseconds, as the type stores them and as
		// its text output shows them ('1 day' is not '24 hours'); not
		// the text output itself, which IntervalStyle changes.
		return "((extract(year from " + expr + ") * 12 + extract(month from " + expr + "))::int8)::text || 'mon ' || (extract(day from " + expr + ")::int8)::text || 'd ' || " +
			"((extract(hour from " + expr + ") * 3600000000 + extract(minute from " + expr + ") * 60000000 + extract(microseconds from " + expr + "))::int8)::text || 'us'"
	case "json":
		if loose {
			return "(" + expr + ")::jsonb::text"
		}
		return "(" + expr + ")::text"
	case "bpchar":
		// The text output, trailing blanks included (a cast to text drops
		// them).
		return "textin(bpcharout(" + expr + "))"
	case "bytea":
		return "encode(" + expr + ", 'hex')"
	}
	// Element by element, with dimensions; also both sides of a loose
	// array column, whose element types differ.
	if strings.HasPrefix(base, "_") && elem != "" && (!plainText[elem] || loose) {
		inner := canon("u.v", elem, "", loose)
		return "CASE WHEN " + expr + " IS NULL THEN NULL ELSE coalesce(array_dims(" + expr + "), '') || '{' || coalesce((SELECT string_agg(quote_nullable(" +
			inner + "), ',' ORDER BY u.n) FROM unnest(" + expr + ") WITH ORDINALITY AS u(v, n)), '') || '}' END"
	}
	return "(" + expr + ")::text"
}

// loosen sets Loose on the columns of a and b (the same columns of the
// source and of the copy) whose copy type imposes its own spelling of the
// source's values (see column.Loose).
func loosen(a, b []column) {
	for i := range a {
		l := looseType(a[i], b[i])
		a[i].Loose, b[i].Loose = l, l
	}
}

// looseType reports whether copy column d spells some values of source
// column s otherwise than the source does.
func looseType(s, d column) bool {
	if s.Type == d.Type {
		return false
	}
	sb, db := s.Base, d.Base
	if strings.HasPrefix(sb, "_") && strings.HasPrefix(db, "_") {
		sb, db = s.Elem, d.Elem
	}
	switch {
	case db == "numeric":
		// An unconstrained numeric keeps the scale of what it is given.
		return d.Type != "numeric" && d.Type != "numeric[]"
	case sb == "json" && db == "jsonb", sb == "float4" && db == "float8":
		return true
	}
	return false
}

// dateCanon formats a date or timestamp with to_char (utc is the value at
// UTC, for timestamptz), marks years before 1 AD with " BC", and leaves
// ±infinity as their text, which no setting changes.
func dateCanon(expr, utc, firstAD, format string) string {
	return "CASE WHEN isfinite(" + expr + ") THEN to_char(" + utc + ", '" + format + "') || CASE WHEN " + expr + " < " + firstAD +
		" THEN ' BC' ELSE '' END ELSE (" + expr + ")::text END"
}

// numericCanon drops trailing fractional zeros (and a bare point) from the
// text of a numeric: 1.50 -> 1.5, 2.00 -> 2. It works on every server
// version (trim_scale needs PostgreSQL 13).
func numericCanon(text string) string {
	return "CASE WHEN strpos(" + text + ", '.') > 0 THEN rtrim(rtrim(" + text + ", '0'), '.') ELSE " + text + " END"
}

// rowText is the SQL of the canonical text of a row: each column's canonical
// text quoted with quote_nullable (NULL stays distinct from ”), joined by
// commas. prefix qualifies the column names ("x.").
func rowText(prefix string, cols []column) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = "quote_nullable(" + canonOf(prefix, c) + ")"
	}
	return strings.Join(parts, " || ',' || ")
}

// hash64 is the SQL of the first 64 bits of md5(text) as a bigint: the same
// on every PostgreSQL version and platform.
func hash64(text string) string {
	return "('x' || substr(md5(" + text + "), 1, 16))::bit(64)::int8"
}

// fastHash is the SQL of PostgreSQL's own 64-bit hash of text
// (hashtextextended, PostgreSQL 11 and later) under the byte-wise collation
// "C": about a third of the cost of md5 per row. Its value is stable across
// versions (hash partitioning depends on it) but not promised across
// platforms, so it is used only when both servers agree on probeHash.
func fastHash(text string) string {
	return "hashtextextended((" + text + ") COLLATE \"C\", 0)"
}

// probeHash hashes texts of every length up to 200 bytes, multi-byte
// characters included, with fastHash.
var probeHash = "SELECT sum(" + fastHash("repeat(md5(g::text) || 'é', g % 7) || g") + ")::text FROM generate_series(1, 200) g"

// probe is a server's answer to probeHash ("" when it cannot compute it).
func probe(ctx context.Context, q source.Querier) string {
	var x string
	if q.QueryRow(ctx, probeHash).Scan(&x) != nil {
		return ""
	}
	return x
}

// pickHash returns fastHash when both servers computed probeHash (probe)
// and agree on it, else hash64.
func pickHash(a, b string) (func(string) string, string) {
	if a == "" || a != b {
		return hash64, "md5"
	}
	return fastHash, "hashtextextended"
}
