package sink

import (
	"fmt"
	"testing"
)

// enumRenames pairs the sink's labels the source no longer has with the
// source's labels in their place, one to one and in order, and leaves
// the others unpaired.
func TestEnumRenames(t *testing.T) {
	for _, tc := range []struct {
		src, dst []string
		pairs    string
		unpaired string
	}{
		{[]string{"a", "b"}, []string{"a", "b"}, "[]", "[]"},
		{[]string{"a", "x", "c"}, []string{"a", "b", "c"}, "[[b x]]", "[]"},
		{[]string{"x", "b", "y"}, []string{"a", "b", "c"}, "[[a x] [c y]]", "[]"},
		{[]string{"a", "b", "n"}, []string{"a", "b"}, "[]", "[]"},                // added
		{[]string{"a", "b"}, []string{"a", "old", "b"}, "[]", "[]"},              // an extra label of the sink, nothing in its place
		{[]string{"a", "x", "y", "b"}, []string{"a", "old", "b"}, "[]", "[old]"}, // renamed and added: which is which?
		{[]string{"b", "a"}, []string{"a", "b", "c"}, "[]", "[]"},                // another order: enumLabels says so
	} {
		pairs, unpaired := enumRenames(tc.src, tc.dst)
		if got := fmt.Sprint(pairs); got != tc.pairs && !(len(pairs) == 0 && tc.pairs == "[]") {
			t.Errorf("enumRenames(%v, %v) pairs %s, want %s", tc.src, tc.dst, got, tc.pairs)
		}
		if got := fmt.Sprint(unpaired); got != tc.unpaired {
			t.Errorf("enumRenames(%v, %v) unpaired %s, want %s", tc.src, tc.dst, got, tc.unpaired)
		}
	}
}
