package source

import (
	"github.com/syncd/syncd/internal/pgutil"
)

// UseBinary makes every later ReadPage return its values in PostgreSQL's
// binary send format (page.Page.Binary), which a sink can hand to COPY
// (FORMAT binary) without parsing: the fastest path for built-in types. The
// cursor columns are selected a second time as text, so the page's cursor
// stays text (the watermark, Less and the next page's parameters need it).
// Call it once, before the first page, and only when the sink asked for
// binary values.
func (r *Reader) UseBinary() {
	n := len(r.table.Columns)
	names := make([]string, 0, n+len(r.table.Cursor))
	for _, col := range r.table.Columns {
		names = append(names, col.Name)
	}
	for _, col := range r.table.Cursor {
		names = append(names, col.Name)
	}
	r.sel = "SELECT " + pgutil.IdentList("", names) + " FROM " + pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name)
	r.formats = make([]int16, len(names))
	for i := range n {
		r.formats[i] = 1
	}
}

// arena hands out the memory of one page in a few large blocks instead of
// one or two allocations per row.
type arena struct {
	data []byte
	ptrs [][]byte
}

const arenaBlock = 256 << 10

// row returns a row of n values, copying vals[:n] into the arena; nil
// values stay nil (SQL NULL).
func (a *arena) row(vals [][]byte, n int) [][]byte {
	if cap(a.ptrs)-len(a.ptrs) < n {
		a.ptrs = make([][]byte, 0, max(n, 1024))
	}
	row := a.ptrs[len(a.ptrs) : len(a.ptrs)+n : len(a.ptrs)+n]
	a.ptrs = a.ptrs[:len(a.ptrs)+n]
	size := 0
	for _, v := range vals[:n] {
		size += len(v)
	}
	if cap(a.data)-len(a.data) < size {
		a.data = make([]byte, 0, max(size, arenaBlock))
	}
	for i, v := range vals[:n] {
		if v == nil {
			row[i] = nil
			continue
		}
		start := len(a.data)
		a.data = append(a.data, v...)
		row[i] = a.data[start:len(a.data):len(a.data)]
	}
	return row
}
