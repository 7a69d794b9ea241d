package sink

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// TestHolds decides, for types as a real server's format_type prints them,
// whether a copy column holds every source value exactly: narrower
// modifiers and lossy conversions are refused with a reason, exact
// widenings accepted.
func TestHolds(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TYPE mood AS ENUM ('sad', 'ok')`)
	cases := []struct {
		src, dst string
		want     bool
		why      string // part of the reason when refused
	}{
		// Exact: the same type, a wider one, or text.
		{"bigint", "bigint", true, ""},
		{"integer", "bigint", true, ""},
		{"smallint", "integer", true, ""},
		{"integer", "numeric", true, ""},
		{"integer", "numeric(12,2)", true, ""},
		{"bigint", "numeric(19,0)", true, ""},
		{"numeric(10,2)", "numeric(12,2)", true, ""},
		{"numeric(10,2)", "numeric(12,4)", true, ""},
		{"numeric(10,2)", "numeric", true, ""},
		{"varchar(20)", "varchar(50)", true, ""},
		{"varchar(20)", "text", true, ""},
		{"varchar(20)", "varchar", true, ""},
		{"text", "varchar", true, ""},
		{"mood", "text", true, ""},
		{"timestamptz(3)", "timestamptz", true, ""},
		{"timestamp(0)", "timestamp(3)", true, ""},
		{"time(2)", "time", true, ""},
		{"interval(3)", "interval", true, ""},
		{"interval day to second(3)", "interval", true, ""},
		{"date", "date", true, ""},
		{"real", "double precision", true, ""},
		{"json", "jsonb", true, ""},
		{"integer[]", "bigint[]", true, ""},
		{"numeric(12,4)[]", "numeric[]", true, ""},
		{"uuid", "text", true, ""},
		// Narrower or lossy.
		{"numeric(12,4)", "numeric(12,2)", false, "rounds to 2 decimal places and the source keeps 4"},
		{"numeric(12,2)", "numeric(11,2)", false, "holds 9 integer digits and the source up to 10"},
		{"numeric", "numeric(30,10)", false, "has no limit"},
		{"numeric", "integer", false, "rounded to whole numbers"},
		{"bigint", "integer", false, "out of its range"},
		{"bigint", "numeric(12,0)", false, "holds 12 integer digits and bigint values have up to 19"},
		{"timestamptz", "timestamptz(0)", false, "rounds to 0 fractional digits of a second and the source keeps 6"},
		{"timestamptz", "timestamp", false, "drops the time zone"},
		{"timestamp", "timestamptz", false, "cannot prove exact"},
		{"timestamptz", "date", false, "drops the time of day"},
		{"time", "time(0)", false, "rounds to 0"},
		{"interval", "interval(0)", false, "rounds to 0"},
		{"interval", "interval year to month", false, "fields"},
		{"varchar(50)", "varchar(10)", false, "at most 10 characters and the source up to 50"},
		{"text", "varchar(10)", false, "at most 10 characters and the source's values have no limit"},
		{"char(5)", "char(10)", false, "modifiers"},
		{"double precision", "real", false, "6 significant digits"},
		{"integer", "real", false, "6 significant digits"},
		{"jsonb", "json", false, "cannot prove exact"},
		{"text", "integer", false, "rounded to whole numbers or out of its range"},
		{"uuid", "bigint", false, "rounded to whole numbers or out of its range"},
		{"boolean", "date", false, "drops the time of day"},
		{"numeric(12,4)[]", "numeric(12,2)[]", false, "rounds to 2 decimal places"},
		{"integer[]", "integer", false, "array"},
		{"mood", "varchar(10)", false, "at most 10 characters"},
	}
	// Print every type as the server does, modifiers included.
	var cols []string
	for i, c := range cases {
		cols = append(cols, fmt.Sprintf("s%d %s, d%d %s", i, c.src, i, c.dst))
	}
	db.Exec(t, "CREATE TABLE types ("+strings.Join(cols, ", ")+")")
	rows, err := db.Pool.Query(context.Background(), `SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'types'::regclass AND attnum > 0`)
	if err != nil {
		t.Fatal(err)
	}
	printed := map[string]string{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			t.Fatal(err)
		}
		printed[name] = typ
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		src, dst := printed[fmt.Sprintf("s%d", i)], printed[fmt.Sprintf("d%d", i)]
		ok, why := holds(src, dst)
		if ok != c.want || !strings.Contains(why, c.why) {
			t.Errorf("holds(%q, %q) = %v, %q; want %v, %q", src, dst, ok, why, c.want, c.why)
		}
	}
}
