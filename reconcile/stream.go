package reconcile

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"
	"golang.org/x/sync/errgroup"
)

// stream reads the key and row hash of every row inside segs (sorted,
// disjoint) from both sides at once, in line order, merges the two streams
// and re-reads the differing keys (c.recheckAll). Memory holds the differing
// keys only, not the rows. With count (the whole line streamed without a
// checksum level) it counts the rows compared on each side, as the first
// checksum level does.
func (c *comparer) stream(ctx context.Context, segs []segment, count bool) error {
	var est int64
	for _, s := range segs {
		est += s.n
	}
	// Index ranges for an integer key while they hold a small part of the
	// table; past that one scan is cheaper.
	join := c.src.intKey && est*5 < c.tableRows
	srcRows, dstRows := make(chan []row, 4), make(chan []row, 4)
	var recheck [][]string
	var compared, copyRows int64
	g, gctx := errgroup.WithContext(ctx)
	// The whole line of an integer key is one range of the key: read in
	// the key's order by a plain query (streamSide sorts it).
	flat := count && len(segs) == 1 && c.src.intKey
	g.Go(func() error { defer close(srcRows); return c.streamSide(gctx, c.src, segs, join, flat, srcRows) })
	g.Go(func() error { defer close(dstRows); return c.streamSide(gctx, c.dst, segs, join, flat, dstRows) })
	g.Go(func() error {
		s, d := rowCursor{in: srcRows}, rowCursor{in: dstRows}
		s.next()
		d.next()
		for s.ok || d.ok {
			order := 0
			switch {
			case !d.ok:
				order = -1
			case !s.ok:
				order = 1
			default:
				order = c.lineOrder(&s.cur, &d.cur)
			}
			var sr, dr row
			var sp, dp *row
			if order <= 0 {
				sr, sp = s.cur, &sr
				s.next()
			}
			if order >= 0 {
				dr, dp = d.cur, &dr
				d.next()
			}
			if sp != nil && sp.synced {
				compared++
			}
			if dp != nil {
				copyRows++
			}
			r := sp
			if r == nil {
				r = dp
			}
			if len(c.skip) > 0 && c.skip[c.key(r)] {
				continue
			}
			switch classify(sp, dp) {
			case same:
			case unsynced:
				c.unsynced(sp)
			default:
				recheck = append(recheck, c.rawKey(r))
			}
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return err
	}
	if count {
		c.rep.RowsCompared += compared
		c.rep.CopyRows += copyRows
	}
	return c.recheckAll(ctx, recheck)
}

// rowBatch is how many streamed rows travel together from a side's reader
// to the merge: one channel operation per row cost more than the merge.
const rowBatch = 256

// rowCursor walks the batches of one side's stream: cur is the current
// row while ok.
type rowCursor struct {
	in  <-chan []row
	buf []row
	cur row
	ok  bool
}

// next moves to the next row, ok false at the end of the stream.
func (u *rowCursor) next() {
	for len(u.buf) == 0 {
		b, more := <-u.in
		if !more {
			u.cur, u.ok = row{}, false
			return
		}
		u.buf = b
	}
	u.cur, u.buf, u.ok = u.buf[0], u.buf[1:], true
}

// lineOrder orders two streamed rows as both queries do: by place on the
// line, then (for a hash line, whose places may collide) by the canonical
// key text byte by byte.
func (c *comparer) lineOrder(a, b *row) int {
	if o := cmp.Compare(a.ord, b.ord); o != 0 || c.src.intKey {
		return o
	}
	for _, k := range c.keyIdx {
		if o := bytes.Compare(a.canon[k], b.canon[k]); o != 0 {
			return o
		}
	}
	return 0
}

// streamSide sends the rows in scope of sd inside segs to out in line
// order, each with its key (canonical text and text output), its row hash
// and, for the source, whether it is compared, in scope and in
// source.where. Not limited to the synced rows: the merge classifies.
// flat (an integer key, one segment) selects the rows by a range of the
// key in a plain query ordered by the key.
func (c *comparer) streamSide(ctx context.Context, sd *side, segs []segment, join, flat bool, out chan<- []row) error {
	nk := len(sd.keys)
	extra := append([]string{sd.hash(rowText("y.", sd.cols))}, sd.rowExprs(sd.keys)...)
	lo, hi := bounds(segs)
	var args []any
	var oids []uint32
	var q string
	if flat {
		k := "y." + ident(sd.keys[0].Name)
		q = "SELECT " + k + " AS syncd_o"
		for i, e := range extra {
			q += fmt.Sprintf(", %s AS syncd_x%d", e, i)
		}
		// Sorted by k + 0, not k: ordered by the key itself the planner
		// walks the key's index, one heap fetch per row, which took 2-3
		// times as long as a scan and a sort on the bench's 1M rows
		// (EXPLAIN ANALYZE: 23-27 s against 9-12 s; docs/BENCHMARKS.md,
		// round three). The order is the same.
		q += " FROM " + sd.qualified() + " y WHERE " + and(sd.scope, k+" BETWEEN $1 AND $2") + " ORDER BY " + k + " + 0"
		args, oids = []any{lo[0], hi[0]}, []uint32{pgtype.Int8OID, pgtype.Int8OID}
	} else {
		q = "SELECT p.syncd_o"
		for i := range extra {
			q += fmt.Sprintf(", p.syncd_x%d", i)
		}
		q += " FROM (" + sd.placed(sd.scope, join, "", extra...) + ") p ORDER BY p.syncd_o"
		if !sd.intKey {
			for i := range nk {
				q += fmt.Sprintf(", p.syncd_x%d COLLATE \"C\"", i+1)
			}
		}
		args = []any{lo, hi}
		oids = []uint32{pgtype.Int8ArrayOID, pgtype.Int8ArrayOID}
		if join {
			args = append(args, lo, hi)
			oids = append(oids, pgtype.Int8ArrayOID, pgtype.Int8ArrayOID)
		}
	}
	m := sd.conn.TypeMap()
	params := make([][]byte, len(args))
	for i, a := range args {
		b, err := m.Encode(oids[i], pgtype.TextFormatCode, a, nil)
		if err != nil {
			return fmt.Errorf("encode parameter: %w", err)
		}
		params[i] = b
	}
	var read int64
	n := len(sd.cols)
	// The rows of a batch share their allocations: a slab of column
	// slices and slabs of bytes (a few allocations per batch, not per row).
	var batch []row
	var cols [][]byte
	var slab []byte
	fresh := func() {
		batch, cols = make([]row, 0, rowBatch), make([][]byte, 2*n*rowBatch)
	}
	fresh()
	keep := func(v []byte) []byte {
		if v == nil {
			return nil
		}
		if cap(slab)-len(slab) < len(v) {
			slab = make([]byte, 0, max(len(v), 32<<10))
		}
		at := len(slab)
		slab = append(slab, v...)
		return slab[at:len(slab):len(slab)]
	}
	send := func() error {
		if len(batch) == 0 {
			return nil
		}
		select {
		case out <- batch:
		case <-ctx.Done():
			return ctx.Err()
		}
		fresh()
		return nil
	}
	rr := sd.conn.PgConn().ExecParams(ctx, q, params, oids, nil, nil)
	for rr.NextRow() {
		vals := rr.Values()
		ord, err := strconv.ParseInt(string(vals[0]), 10, 64)
		if err != nil {
			rr.Close()
			return fmt.Errorf("read the row hashes of %s %s: place %q: %w", sd.role, sd.table, vals[0], err)
		}
		at := 2 * n * len(batch)
		r := row{ord: ord, hash: keep(vals[1]), canon: cols[at : at+n : at+n], raw: cols[at+n : at+2*n : at+2*n]}
		for j, k := range c.keyIdx {
			r.canon[k] = keep(vals[2+j])
			r.raw[k] = keep(vals[2+nk+j])
		}
		if sd.role == "source" {
			f := vals[2+2*nk:]
			r.synced, r.inScope, r.inWhere = string(f[0]) == "true", string(f[1]) == "true", string(f[2]) == "true"
		}
		read++
		if batch = append(batch, r); len(batch) == rowBatch {
			if err := send(); err != nil {
				rr.Close()
				return err
			}
		}
	}
	if err := send(); err != nil {
		rr.Close()
		return err
	}
	if _, err := rr.Close(); err != nil {
		return fmt.Errorf("read the row hashes of %s %s: %w", sd.role, sd.table, err)
	}
	c.hashesRead.Add(read)
	return nil
}
