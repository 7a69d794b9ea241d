package config

import (
	"errors"
	"testing"
)

// FuzzParse: no input makes the loader panic, and every rejection is a
// config error (exit 2) rather than an internal one.
func FuzzParse(f *testing.F) {
	f.Add([]byte(valid))
	f.Add([]byte("name: x\nsource: [\n"))
	f.Add([]byte("name: x\nsource:\n  dsn: ${NOPE}\n"))
	f.Add([]byte("a: &x 1\nb: *x\n"))
	f.Add([]byte("name: x\nsource:\n  dsn: d\n  table: '\"a.b\".\"c\"\"d\"'\n  cursor: [a, b]\n  page_size: 99999999999999999999\nsink:\n  dsn: d\n  table: t\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		if c.Name == "" || c.Source.Table == "" || len(c.Source.Cursor) == 0 || c.Source.PageSize < 1 || (len(c.Sink.Key) == 0 && !c.IsPattern()) {
			t.Fatalf("accepted an incomplete config: %+v", c)
		}
		if _, err := ParseTable(c.Source.Table); err != nil {
			t.Fatalf("accepted source.table %q that ParseTable refuses: %v", c.Source.Table, err)
		}
	})
}

// FuzzParseTable: no panic, no empty part, and a parsed name written back
// with Table.String parses to the same name.
func FuzzParseTable(f *testing.F) {
	for _, s := range []string{"orders", "public.orders", `"a.b"."c""d"`, `"Order ""Lines""; DROP TABLE x; --"`, `a.b.c`, `"unterminated`, `""`, `.`, `"x"y`, "schéma.tÿble"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tb, err := ParseTable(s)
		if err != nil {
			return
		}
		if tb.Schema == "" || tb.Name == "" {
			t.Fatalf("ParseTable(%q) = %+v with an empty part", s, tb)
		}
		back, err := ParseTable(tb.String())
		if err != nil || back != tb {
			t.Fatalf("ParseTable(%q) = %+v; String %q parses to %+v, %v", s, tb, tb.String(), back, err)
		}
	})
}
