package reconcile

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/syncd/syncd/sink"
	"golang.org/x/sync/errgroup"
)

// comparer runs one comparison of the source and the copy.
type comparer struct {
	src, dst *side
	keyIdx   []int // positions of the key columns in the compared columns
	leaf     int
	// first, when set, is the rows per child of the first level (leaf
	// below it).
	first int
	level int
	log   *slog.Logger
	rep   *Report
	cov   *coverage
	// skip holds the keys the copy holds more than once: reported as
	// duplicates, left out of the comparison.
	skip map[string]bool
	// repair, when set, is given the fixes of each batch of differences;
	// replace those of duplicate and NULL keys.
	repair, replace func(context.Context, []sink.Fix) error
	// tableRows is the planner's estimate of the larger table's rows.
	tableRows int64
	// hashesRead counts the streamed (key, row hash) pairs, both sides.
	hashesRead atomic.Int64
	// recheckWith, when set, re-reads the differing keys a stream found
	// instead of recheck (the key check: keys.go).
	recheckWith func(context.Context, [][]string) error
	// looseKey is whether a source key column has a nondeterministic
	// collation (keys of other texts may be equal), read once.
	looseOnce sync.Once
	looseKey  bool
	looseErr  error
}

type kind int

const (
	same kind = iota
	missing
	extra
	changed
	unsynced
)

// classify compares the source row s and the copy row d of one key (nil:
// absent).
func classify(s, d *row) kind {
	in := s != nil && s.inScope
	switch {
	case in && d != nil && sameRow(s, d):
		return same
	case s != nil && !s.synced && (in || d != nil):
		return unsynced
	case in && d == nil:
		return missing
	case !in && d != nil:
		return extra
	case in:
		return changed
	}
	return same
}

// sameRow compares two rows by their hashes when both were streamed, else
// value by value.
func sameRow(s, d *row) bool {
	if s.hash != nil && d.hash != nil {
		return bytes.Equal(s.hash, d.hash)
	}
	return equalValues(s.canon, d.canon)
}

func equalValues(a, b [][]byte) bool {
	for i := range a {
		if (a[i] == nil) != (b[i] == nil) || !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// key is the map key of a row: its canonical key values.
func (c *comparer) key(r *row) string {
	var b strings.Builder
	for i, k := range c.keyIdx {
		if i > 0 {
			b.WriteByte(0)
		}
		b.Write(r.canon[k])
	}
	return b.String()
}

// display renders a row's key for the report, parts joined with ",", a
// NULL part as NULL.
func (c *comparer) display(r *row) string {
	parts := make([]string, len(c.keyIdx))
	for i, k := range c.keyIdx {
		parts[i] = string(r.canon[k])
		if r.canon[k] == nil {
			parts[i] = "NULL"
		}
	}
	return strings.Join(parts, ",")
}

// rawKey is the text output of a row's key columns, to read it back by key.
func (c *comparer) rawKey(r *row) []string {
	out := make([]string, len(c.keyIdx))
	for i, k := range c.keyIdx {
		out[i] = string(r.raw[k])
	}
	return out
}

// recheck re-reads keys on both sides, the copy first: a copy row can only
// change through a sync of a newer source row, which the source read then
// sees past the watermark.
func (c *comparer) recheck(ctx context.Context, keys [][]string) error {
	dstRows, srcRows, err := c.reread(ctx, keys, false)
	if err != nil {
		return err
	}
	return c.judge(ctx, dstRows, srcRows)
}

// judge classifies the rows re-read for a batch of keys (by map key, the
// copy's read before the source's), counts and lists the differences and,
// with repair, repairs them.
func (c *comparer) judge(ctx context.Context, dstRows, srcRows map[string]*row) error {
	var fixes []sink.Fix
	record := func(k kind, s, d *row) {
		r := s
		if r == nil {
			r = d
		}
		var list *[]string
		switch k {
		case same:
			return
		case unsynced:
			c.unsynced(s)
			return
		case missing:
			c.rep.Missing++
			list = &c.rep.Keys.Missing
			fixes = append(fixes, sink.Fix{Row: s.raw})
		case extra:
			c.rep.Extra++
			list = &c.rep.Keys.Extra
			fixes = append(fixes, sink.Fix{Seen: d.raw})
		case changed:
			c.rep.Changed++
			list = &c.rep.Keys.Changed
			fixes = append(fixes, sink.Fix{Row: s.raw, Seen: d.raw})
		}
		if len(*list) < MaxKeys {
			*list = append(*list, c.display(r))
		}
		c.log.Debug("difference", "kind", kindName[k], "key", c.display(r))
	}
	done := map[string]bool{}
	for k, s := range srcRows {
		done[k] = true
		if c.skip[k] {
			continue
		}
		record(classify(s, dstRows[k]), s, dstRows[k])
	}
	for k, d := range dstRows {
		if !done[k] && !c.skip[k] {
			record(classify(nil, d), nil, d)
		}
	}
	if c.repair != nil && len(fixes) > 0 {
		return c.repair(ctx, fixes)
	}
	return nil
}

// recheckAll re-reads keys in batches of batchRows (recheck, or
// c.recheckWith when set). Without a repair, which writes through the
// copy's session, the two sessions work side by side: the copy's read of a
// batch runs while the source reads the batch before, so each key is
// still read on the copy before the source.
func (c *comparer) recheckAll(ctx context.Context, keys [][]string) error {
	if c.recheckWith != nil || c.repair != nil || len(keys) <= batchRows {
		again := c.recheck
		if c.recheckWith != nil {
			again = c.recheckWith
		}
		for len(keys) > 0 {
			n := min(len(keys), batchRows)
			if err := again(ctx, keys[:n]); err != nil {
				return err
			}
			keys = keys[n:]
		}
		return nil
	}
	read := make(chan map[string]*row, 1)
	var batches [][][]string
	for len(keys) > 0 {
		n := min(len(keys), batchRows)
		batches, keys = append(batches, keys[:n]), keys[n:]
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(read)
		for _, b := range batches {
			dstRows := map[string]*row{}
			if err := c.dst.fetchKeys(gctx, b, func(r row) { dstRows[c.key(&r)] = &r }); err != nil {
				return err
			}
			select {
			case read <- dstRows:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	g.Go(func() error {
		i := 0
		for dstRows := range read {
			srcRows := map[string]*row{}
			if err := c.src.fetchKeys(gctx, batches[i], func(r row) { srcRows[c.key(&r)] = &r }); err != nil {
				return err
			}
			i++
			c.rep.RowsFetched += int64(len(srcRows) + len(dstRows))
			if err := c.judge(gctx, dstRows, srcRows); err != nil {
				return err
			}
		}
		return nil
	})
	return g.Wait()
}

// reread reads the rows of keys on both sides, the copy first, by map key
// (c.key), and counts them as fetched. With copyKeys the copy's rows hold
// their key columns only: its key index answers without a visit to the
// heap for each row.
func (c *comparer) reread(ctx context.Context, keys [][]string, copyKeys bool) (dstRows, srcRows map[string]*row, err error) {
	dstRows, srcRows = map[string]*row{}, map[string]*row{}
	dst := c.dst
	if copyKeys {
		k := *c.dst
		k.cols = k.keys
		dst = &k
	}
	if err := dst.fetchKeys(ctx, keys, func(r row) {
		if copyKeys {
			// In place: the key columns at their places among the columns.
			w := row{canon: make([][]byte, len(c.dst.cols)), raw: make([][]byte, len(c.dst.cols))}
			for j, i := range c.keyIdx {
				w.canon[i], w.raw[i] = r.canon[j], r.raw[j]
			}
			r = w
		}
		dstRows[c.key(&r)] = &r
	}); err != nil {
		return nil, nil, err
	}
	if err := c.src.fetchKeys(ctx, keys, func(r row) { srcRows[c.key(&r)] = &r }); err != nil {
		return nil, nil, err
	}
	c.rep.RowsFetched += int64(len(srcRows) + len(dstRows))
	return dstRows, srcRows, nil
}

// unsynced counts a difference whose source row s is not compared (past
// the watermark): skipped, and pending when s is outside source.where (the
// rows inside it are counted by countCoverage).
func (c *comparer) unsynced(s *row) {
	c.rep.SkippedUnsynced++
	if !s.inWhere {
		c.rep.NotCovered[ReasonPending]++
	}
}

var kindName = map[kind]string{missing: "missing", extra: "extra", changed: "changed"}
