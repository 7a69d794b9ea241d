package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// mode: compare takes no cursor, no lookback and no default key (the
// primary key is read when the source opens); cursor stays the default;
// auto is only for a pattern; anything else names the choices.
func TestMode(t *testing.T) {
	const table = "name: m\n%ssource: {dsn: x, table: %s%s}\nsink: {dsn: y, table: %s}\n"
	for _, tc := range []struct {
		name, mode, table, source, sink, err string
	}{
		{name: "default", table: "orders", source: ", cursor: [updated_at, id]", sink: "orders_copy"},
		{name: "compare", mode: "compare", table: "codes", sink: "codes_copy"},
		{name: "compare with a cursor", mode: "compare", table: "codes", source: ", cursor: [id]", sink: "codes_copy", err: "source.cursor: mode: compare reads no cursor"},
		{name: "compare with lookback", mode: "compare", table: "codes", source: ", lookback: 5s", sink: "codes_copy", err: "source.lookback: mode: compare reads no cursor"},
		{name: "cursor without a cursor", mode: "cursor", table: "codes", sink: "codes_copy", err: "source.cursor: missing"},
		{name: "auto on one table", mode: "auto", table: "orders", source: ", cursor: [updated_at, id]", sink: "orders_copy", err: "mode: auto is for a pattern source.table"},
		{name: "auto on a pattern", mode: "auto", table: "public.*", source: ", cursor: [updated_at, id]", sink: "copy.*"},
		{name: "auto without a cursor", mode: "auto", table: "public.*", sink: "copy.*", err: "source.cursor: missing"},
		{name: "unknown", mode: "full", table: "orders", source: ", cursor: [id]", sink: "orders_copy", err: `mode: "full": use cursor, compare or (for a pattern source) auto`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mode := ""
			if tc.mode != "" {
				mode = "mode: " + tc.mode + "\n"
			}
			c, err := Parse("m.yaml", []byte(fmt.Sprintf(table, mode, tc.table, tc.source, tc.sink)))
			if tc.err != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tc.mode
			if want == "" {
				want = ModeCursor
			}
			if c.Mode != want || c.Compare() != (want == ModeCompare) {
				t.Fatalf("mode %q, Compare %v", c.Mode, c.Compare())
			}
			if c.Compare() && (len(c.Sink.Key) != 0 || c.Source.Lookback.Duration != 0) {
				t.Fatalf("compare mode: key %v (want none until the table is read), lookback %v", c.Sink.Key, c.Source.Lookback)
			}
		})
	}
}
