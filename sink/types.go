package sink

import (
	"fmt"
	"strconv"
	"strings"
)

// This file decides whether a copy column can hold every value of a source
// column exactly. Both types are format_type output, modifiers included
// ("numeric(12,4)", "timestamp(0) with time zone", "character varying(50)").
// PostgreSQL assigns many types to narrower ones without an error (numeric
// and timestamps are rounded to the column's modifiers, double precision
// to real), and a copy that rounds can never be repaired: the check refuses
// whatever it cannot prove exact, with the reason.

// intDigits is how many decimal digits an integer type's values can have.
var intDigits = map[string]int{"smallint": 5, "integer": 10, "bigint": 19}

// widens lists the types whose every value another type holds exactly (the
// modifiers of the wider type are checked by holds).
var widens = map[string][]string{
	"smallint":          {"integer", "bigint", "numeric"},
	"integer":           {"bigint", "numeric"},
	"bigint":            {"numeric"},
	"real":              {"double precision"},
	"character varying": {"text"},
	"json":              {"jsonb"}, // equal as JSON: reconcile compares such a column as jsonb (reconcile/canon.go, column.Loose)
}

// sqlType is a format_type string taken apart: base "numeric" and mods
// [12 4] for "numeric(12,4)"; base "interval day to second" for "interval
// day to second(3)".
type sqlType struct {
	text string
	base string
	mods []int
}

func parseType(t string) sqlType {
	st := sqlType{text: t, base: t}
	i := strings.IndexByte(t, '(')
	if i < 0 {
		return st
	}
	j := strings.IndexByte(t[i:], ')')
	if j < 0 {
		return st
	}
	st.base = t[:i] + t[i+j+1:]
	for _, m := range strings.Split(t[i+1:i+j], ",") {
		n, err := strconv.Atoi(strings.TrimSpace(m))
		if err != nil {
			return sqlType{text: t, base: t} // not a modifier syncd knows: compared as a whole
		}
		st.mods = append(st.mods, n)
	}
	return st
}

// mod returns the i-th modifier, or def when the type has none.
func (t sqlType) mod(i, def int) int {
	if i < len(t.mods) {
		return t.mods[i]
	}
	return def
}

// holds reports whether a copy column of type dst stores every value of a
// source column of type src exactly, and if not, why.
func holds(src, dst string) (bool, string) {
	if src == dst || dst == "text" || dst == "character varying" {
		// text and unbounded varchar take any value's text, as it travels.
		return true, ""
	}
	srcArr, dstArr := strings.HasSuffix(src, "[]"), strings.HasSuffix(dst, "[]")
	if srcArr != dstArr {
		return false, "one is an array and the other is not"
	}
	if srcArr {
		return holds(strings.TrimSuffix(src, "[]"), strings.TrimSuffix(dst, "[]"))
	}
	s, d := parseType(src), parseType(dst)
	if s.base == d.base {
		return holdsModifiers(s, d)
	}
	if strings.HasPrefix(s.base, "interval ") && d.base == "interval" {
		// A field-restricted interval into an unrestricted one.
		return holdsModifiers(sqlType{base: "interval", mods: s.mods}, d)
	}
	for _, w := range widens[s.base] {
		if w != d.base {
			continue
		}
		if w != "numeric" || len(d.mods) == 0 {
			return true, ""
		}
		// An integer into a constrained numeric: enough integer digits?
		if digits := d.mod(0, 0) - d.mod(1, 0); digits < intDigits[s.base] {
			return false, fmt.Sprintf("it holds %d integer digits and %s values have up to %d", digits, s.base, intDigits[s.base])
		}
		return true, ""
	}
	return false, lossy(s, d)
}

// holdsModifiers compares two types of the same base that differ in their
// modifiers.
func holdsModifiers(s, d sqlType) (bool, string) {
	switch {
	case s.base == "numeric":
		if len(d.mods) == 0 {
			return true, ""
		}
		if len(s.mods) == 0 {
			return false, fmt.Sprintf("it rounds to %d decimal places and holds %d integer digits, and the source's numeric has no limit", d.mod(1, 0), d.mod(0, 0)-d.mod(1, 0))
		}
		sScale, dScale := s.mod(1, 0), d.mod(1, 0)
		if dScale < sScale {
			return false, fmt.Sprintf("it rounds to %d decimal places and the source keeps %d", dScale, sScale)
		}
		if sInt, dInt := s.mod(0, 0)-sScale, d.mod(0, 0)-dScale; dInt < sInt {
			return false, fmt.Sprintf("it holds %d integer digits and the source up to %d", dInt, sInt)
		}
		return true, ""
	case s.base == "character varying", s.base == "bit varying":
		if len(d.mods) == 0 {
			return true, ""
		}
		if len(s.mods) == 0 {
			return false, fmt.Sprintf("it holds at most %d characters and the source's values have no limit", d.mod(0, 0))
		}
		if d.mod(0, 0) < s.mod(0, 0) {
			return false, fmt.Sprintf("it holds at most %d characters and the source up to %d", d.mod(0, 0), s.mod(0, 0))
		}
		return true, ""
	case strings.HasPrefix(s.base, "timestamp "), strings.HasPrefix(s.base, "time "):
		// No modifier is the full precision, microseconds.
		if sp, dp := s.mod(0, 6), d.mod(0, 6); dp < sp {
			return false, fmt.Sprintf("it rounds to %d fractional digits of a second and the source keeps %d", dp, sp)
		}
		return true, ""
	case s.base == "interval":
		if sp, dp := s.mod(0, 6), d.mod(0, 6); dp < sp {
			return false, fmt.Sprintf("it rounds to %d fractional digits of a second and the source keeps %d", dp, sp)
		}
		return true, ""
	}
	return false, "syncd cannot prove that its modifiers hold every source value"
}

// lossy says why a type of another base cannot hold the source's values.
func lossy(s, d sqlType) string {
	switch {
	case strings.HasPrefix(d.base, "interval"):
		return "its fields differ from the source's and would truncate values"
	case d.base == "integer" || d.base == "smallint" || d.base == "bigint":
		return fmt.Sprintf("%s values are rounded to whole numbers or out of its range", s.base)
	case d.base == "real":
		return fmt.Sprintf("it keeps about 6 significant digits and %s values have more", s.base)
	case s.base == "timestamp with time zone" && d.base == "timestamp without time zone":
		return "it drops the time zone: values would shift with the session's TimeZone"
	case d.base == "character varying" || d.base == "character":
		return fmt.Sprintf("it holds at most %d characters and the source's values have no limit", d.mod(0, 0))
	case d.base == "date":
		return "it drops the time of day"
	}
	return fmt.Sprintf("PostgreSQL would convert %s values to %s, which syncd cannot prove exact", s.base, d.base)
}
