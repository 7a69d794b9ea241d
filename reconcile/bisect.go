package reconcile

import (
	"context"
	"math"
	"math/big"
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

// bisect compares the checksums of the segments in todo level by level and
// calls leaves with batches of differing segments small enough to fetch.
func (c *comparer) bisect(ctx context.Context, todo []segment, leaves func([]segment) error) error {
	for len(todo) > 0 {
		sort.Slice(todo, func(i, j int) bool { return todo[i].lo.Cmp(todo[j].lo) < 0 })
		widths := make([]*big.Int, len(todo))
		for i, s := range todo {
			f := big.NewInt(fanout(s.n, c.leaf))
			size := s.size()
			w := new(big.Int).Div(new(big.Int).Add(size, new(big.Int).Sub(f, big.NewInt(1))), f)
			widths[i] = w
		}
		var a, b map[child]sum
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() (err error) { a, err = c.src.checksums(gctx, todo, widths); return err })
		g.Go(func() (err error) { b, err = c.dst.checksums(gctx, todo, widths); return err })
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
		differ := map[child]bool{}
		for k, s := range a {
			if b[k] != s {
				differ[k] = true
			}
		}
		for k, s := range b {
			if a[k] != s {
				differ[k] = true
			}
		}
		var next, leaf []segment
		for k := range differ {
			s, w := todo[k.seg], widths[k.seg]
			lo := new(big.Int).Add(s.lo, new(big.Int).Mul(w, big.NewInt(k.idx)))
			hi := new(big.Int).Sub(new(big.Int).Add(lo, w), big.NewInt(1))
			if hi.Cmp(s.hi) > 0 {
				hi = s.hi
			}
			ch := segment{lo: lo, hi: hi, n: max(a[k].n, b[k].n)}
			if ch.n <= int64(c.leaf) || lo.Cmp(hi) == 0 {
				leaf = append(leaf, ch)
			} else {
				next = append(next, ch)
			}
		}
		sort.Slice(leaf, func(i, j int) bool { return leaf[i].lo.Cmp(leaf[j].lo) < 0 })
		// Fetch in batches of about batchRows rows per side.
		for len(leaf) > 0 {
			n, rows := 0, int64(0)
			for n < len(leaf) && (n == 0 || rows+leaf[n].n <= batchRows) {
				rows += leaf[n].n
				n++
			}
			if err := leaves(leaf[:n]); err != nil {
				return err
			}
			leaf = leaf[n:]
		}
		todo = next
	}
	return nil
}

// batchRows bounds the rows fetched per side by one query.
const batchRows = 5000

// wholeLine is the segment covering every 64-bit hash.
func wholeLine(estimate int64) segment {
	return segment{lo: big.NewInt(math.MinInt64), hi: big.NewInt(math.MaxInt64), n: estimate}
}
