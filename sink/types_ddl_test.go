package sink

import (
	"slices"
	"testing"
)

// enumLabels adds the labels the sink's enum lacks in the source's place,
// keeps labels only the sink has, and refuses another order.
func TestEnumLabels(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst []string
		want     []string
		problem  bool
	}{
		{"same", []string{"G", "PG"}, []string{"G", "PG"}, nil, false},
		{"added at the end and in the middle", []string{"G", "PG", "PG-13", "R", "NC-17"}, []string{"G", "PG", "R"},
			[]string{`ALTER TYPE t ADD VALUE IF NOT EXISTS 'PG-13' AFTER 'PG'`, `ALTER TYPE t ADD VALUE IF NOT EXISTS 'NC-17' AFTER 'R'`}, false},
		{"added first", []string{"U", "G"}, []string{"G"}, []string{`ALTER TYPE t ADD VALUE IF NOT EXISTS 'U' BEFORE 'G'`}, false},
		{"quote in a label", []string{"G", "it's"}, []string{"G"}, []string{`ALTER TYPE t ADD VALUE IF NOT EXISTS 'it''s' AFTER 'G'`}, false},
		{"extra label in the sink", []string{"G", "R"}, []string{"G", "X", "R"}, nil, false},
		{"another order", []string{"G", "R"}, []string{"R", "G"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, problem := enumLabels("t", tc.src, tc.dst)
			if !slices.Equal(got, tc.want) || (problem != "") != tc.problem {
				t.Fatalf("got %q, problem %q; want %q, problem %t", got, problem, tc.want, tc.problem)
			}
		})
	}
}
