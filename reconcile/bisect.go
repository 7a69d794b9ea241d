package reconcile

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"sort"

	"golang.org/x/sync/errgroup"
)

// segment is an inclusive range [lo, hi] of the line; n is the larger of
// the two sides' row counts in it when known (an estimate at the top).
type segment struct {
	lo, hi *big.Int
	n      int64
}

func (s segment) size() *big.Int {
	return new(big.Int).Add(new(big.Int).Sub(s.hi, s.lo), big.NewInt(1))
}

// maxFanout bounds the children of one segment in one query.
const maxFanout = 1 << 16

// fanout is how many children a segment of about n rows is cut into so
// that each holds about leaf rows.
func fanout(n int64, leaf int) int64 {
	f := (n + int64(leaf) - 1) / int64(leaf)
	return max(2, min(f, maxFanout))
}

// split cuts each segment of todo (sorted, disjoint) into children of
// about c.leaf rows, in order. When todo is one segment whose children can
// be found by arithmetic, bucket is the SQL of a place's 1-based child (a
// format of the place, "%s"): the first level, which reads every row, then
// needs no search.
func (c *comparer) split(todo []segment) (kids []segment, bucket string) {
	one := big.NewInt(1)
	if len(todo) == 1 {
		s := todo[0]
		per := c.leaf
		if c.level == 0 && c.first > 0 {
			per = c.first
		}
		f := fanout(s.n, per)
		if !c.src.intKey && s.lo.Int64() == math.MinInt64 && s.hi.Int64() == math.MaxInt64 {
			// The whole hash line: 2^b children of 2^(64-b) hashes, the
			// child of o is o >> (64-b), shifted to start at 0.
			b := max(1, bits.Len64(uint64(f-1)))
			w := new(big.Int).Lsh(one, uint(64-b))
			for lo := new(big.Int).Set(s.lo); lo.Cmp(s.hi) <= 0; lo = new(big.Int).Add(lo, w) {
				kids = append(kids, segment{lo: lo, hi: new(big.Int).Sub(new(big.Int).Add(lo, w), one)})
			}
			return kids, fmt.Sprintf("((%%s >> %d) + %d)", 64-b, int64(1)<<(b-1)+1)
		}
		if c.src.intKey && new(big.Int).Sub(s.hi, s.lo).IsInt64() {
			// An integer key whose range fits: (o - lo) / width.
			size := s.size()
			w := new(big.Int).Div(new(big.Int).Add(size, big.NewInt(f-1)), big.NewInt(f))
			for lo := new(big.Int).Set(s.lo); lo.Cmp(s.hi) <= 0; lo = new(big.Int).Add(lo, w) {
				hi := new(big.Int).Sub(new(big.Int).Add(lo, w), one)
				if hi.Cmp(s.hi) > 0 {
					hi = new(big.Int).Set(s.hi)
				}
				kids = append(kids, segment{lo: lo, hi: hi})
			}
			return kids, fmt.Sprintf("((%%s - (%d)) / %d + 1)", s.lo.Int64(), w.Int64())
		}
	}
	for _, s := range todo {
		f := big.NewInt(fanout(s.n, c.leaf))
		size := s.size()
		w := new(big.Int).Div(new(big.Int).Add(size, new(big.Int).Sub(f, one)), f)
		for lo := new(big.Int).Set(s.lo); lo.Cmp(s.hi) <= 0; {
			hi := new(big.Int).Sub(new(big.Int).Add(lo, w), one)
			if hi.Cmp(s.hi) > 0 {
				hi = new(big.Int).Set(s.hi)
			}
			kids = append(kids, segment{lo: lo, hi: hi})
			lo = new(big.Int).Add(hi, one)
		}
	}
	return kids, ""
}

// bisect compares the checksums of the children of the segments in todo
// level by level: equal children are done, differing ones are split again
// while that is expected to narrow them, and streamed as (key, row hash)
// pairs (c.stream) once they are small or dense with differences.
func (c *comparer) bisect(ctx context.Context, todo []segment) error {
	for len(todo) > 0 {
		sort.Slice(todo, func(i, j int) bool { return todo[i].lo.Cmp(todo[j].lo) < 0 })
		kids, bucket := c.split(todo)
		// The first level reads every row anyway: a scan. Below it an
		// integer key is read by index ranges.
		join := c.src.intKey && c.level > 0
		var a, b map[int]sum
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() (err error) { a, err = c.src.checksums(gctx, kids, todo, join, bucket); return err })
		g.Go(func() (err error) { b, err = c.dst.checksums(gctx, kids, todo, join, bucket); return err })
		if err := g.Wait(); err != nil {
			return err
		}
		c.rep.ChecksumQueries += 2
		if c.level == 0 {
			for _, s := range a {
				c.rep.RowsCompared += s.n
			}
			for _, s := range b {
				c.rep.CopyRows += s.n
			}
		}
		c.level++
		nonEmpty := map[int]bool{}
		var differ []int
		for i := range kids {
			sa, oka := a[i]
			sb, okb := b[i]
			if oka || okb {
				nonEmpty[i] = true
			}
			if sa != sb {
				differ = append(differ, i)
			}
		}
		var next, stream []segment
		var rows int64
		for _, i := range differ {
			ch := kids[i]
			ch.n = max(a[i].n, b[i].n)
			rows += ch.n
			if ch.n <= int64(c.leaf) || ch.lo.Cmp(ch.hi) == 0 {
				stream = append(stream, ch)
			} else {
				next = append(next, ch)
			}
		}
		if len(next) > 0 && c.dense(len(differ), len(nonEmpty), rows) {
			stream, next = append(stream, next...), nil
			sort.Slice(stream, func(i, j int) bool { return stream[i].lo.Cmp(stream[j].lo) < 0 })
		}
		if len(stream) > 0 {
			if err := c.stream(ctx, stream, false); err != nil {
				return err
			}
		}
		todo = next
	}
	return nil
}

// dense reports whether splitting the differing children again is
// pointless: with differing of nonEmpty children differing, holding rows
// rows, differences are spread at a density that leaves more than half of
// those rows in differing children even once they are cut down to c.leaf
// rows. Another level would then cost a checksum pass over the rows only
// to stream most of them anyway.
func (c *comparer) dense(differing, nonEmpty int, rows int64) bool {
	return c.leftShare(differing, nonEmpty, rows) > 0.5
}

// leftShare is the share of the rows of the differing children that would
// still lie in differing children of c.leaf rows: from the share p of
// differing children and their rows, the density of differences per row
// δ = -ln(1 - p) / (rows per differing child), and the share 1 - e^(-leaf δ).
func (c *comparer) leftShare(differing, nonEmpty int, rows int64) float64 {
	if differing == 0 || nonEmpty == 0 || rows == 0 {
		return 0
	}
	p := float64(differing) / float64(nonEmpty)
	if p >= 1 {
		return 1
	}
	perChild := float64(rows) / float64(differing)
	density := -math.Log1p(-p) / perChild // differences per row
	return -math.Expm1(-density * float64(c.leaf))
}

// batchRows bounds the rows fetched per side by one query.
const batchRows = 5000

// wholeLine is the segment covering every 64-bit hash.
func wholeLine(estimate int64) segment {
	return segment{lo: big.NewInt(math.MinInt64), hi: big.NewInt(math.MaxInt64), n: estimate}
}
