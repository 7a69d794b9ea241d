package reconcile

import (
	"math"
	"math/big"
	"testing"
)

// TestDenseStopsSplitting: ranges are cut again while few of them differ,
// and streamed at once when the differences are so dense that ranges of
// leaf rows would still mostly differ.
func TestDenseStopsSplitting(t *testing.T) {
	c := &comparer{leaf: 128}
	cases := []struct {
		differing, nonEmpty int
		rows                int64
		want                bool
	}{
		{10, 65536, 10 * 1526, false},       // 10 differences in 100M rows
		{65530, 65536, 65530 * 1526, true},  // 0.6%: nearly every range differs
		{65536, 65536, 65536 * 1526, true},  // 2% of 100M rows: every range differs
		{700, 65536, 700 * 1526, false},     // 0.0007%: a 128-row range rarely differs
		{30000, 65536, 30000 * 1526, false}, // 0.04%: 5% of 128-row ranges differ
		{0, 65536, 0, false},
	}
	for _, tc := range cases {
		if got := c.dense(tc.differing, tc.nonEmpty, tc.rows); got != tc.want {
			t.Errorf("dense(%d of %d differ, %d rows) = %v, want %v", tc.differing, tc.nonEmpty, tc.rows, got, tc.want)
		}
	}
}

// TestSplitFirstLevelBuckets: the first level's children, found in SQL by
// arithmetic, are the children split lists, in order and covering the
// segment without gaps.
func TestSplitFirstLevelBuckets(t *testing.T) {
	for _, intKey := range []bool{true, false} {
		c := &comparer{leaf: 128, src: &side{intKey: intKey}}
		top := wholeLine(1_000_000)
		if intKey {
			top = segment{lo: big.NewInt(-5), hi: big.NewInt(1_000_000), n: 1_000_000}
		}
		kids, bucket := c.split([]segment{top})
		if bucket == "" {
			t.Fatalf("intKey %v: no bucket expression for the first level", intKey)
		}
		if kids[0].lo.Cmp(top.lo) != 0 || kids[len(kids)-1].hi.Cmp(top.hi) != 0 {
			t.Fatalf("intKey %v: children span [%s, %s], want [%s, %s]", intKey, kids[0].lo, kids[len(kids)-1].hi, top.lo, top.hi)
		}
		for i := 1; i < len(kids); i++ {
			if new(big.Int).Add(kids[i-1].hi, big.NewInt(1)).Cmp(kids[i].lo) != 0 {
				t.Fatalf("intKey %v: gap between child %d and %d", intKey, i-1, i)
			}
		}
		// The bucket arithmetic, in Go: the place of each child's ends.
		for i, k := range kids {
			for _, o := range []int64{k.lo.Int64(), k.hi.Int64()} {
				var b int64
				if intKey {
					w := kids[0].size().Int64()
					b = (o-top.lo.Int64())/w + 1
				} else {
					shift := 64 - int(math.Log2(float64(len(kids))))
					b = (o >> shift) + int64(len(kids))/2 + 1
				}
				if b != int64(i+1) {
					t.Fatalf("intKey %v: place %d falls in child %d, want %d (bucket %s)", intKey, o, b, i+1, bucket)
				}
			}
		}
	}
}
