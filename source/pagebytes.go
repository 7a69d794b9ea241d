package source

import (
	"fmt"
	"strings"
)

// A page is bounded by bytes as well as by rows (source.page_bytes): a
// page holds at most page_bytes of values, or its first row alone when that
// row is larger, whatever the rows' width. The keyset cursor is unaffected
// (a page can end at any row), and a page that ends at its byte limit says
// so (page.Page.More): "a page shorter than page_size means caught up"
// still holds for the others.
//
// Two limits work together:
//
//   - The reader counts the bytes of the values it keeps, and once the next
//     row would pass page_bytes it keeps no more rows of the page (the ones
//     the server still sends are read and dropped). This alone bounds the
//     memory, but the rows after the cut still travel.
//   - So that they do not, the server counts too while rows may be wide:
//     the page query is wrapped in a running sum of each row's size in
//     cursor order, and only the rows whose sum stays within page_bytes
//     are sent, with a column saying whether a row that did not fit
//     follows. That window costs the server about 0.5 ms per 1,000-row page
//     (it copies every row once more), so a reader whose last page's
//     widest row times page_size is at most half of page_bytes reads the
//     next page without it (Reader.narrow); the first page of a run always
//     has it.
//
// The server's count uses the length of the stored text or bytes for
// text, varchar, char, json, xml and bytea (read from the TOAST header,
// without reading the value) and the stored size, compressed or not, for
// other types (jsonb, arrays, numeric, user types); the reader's count is
// exact.

// fixedTypes are column types of a bounded text size: a page of them
// never needs the byte limit unless page_size times the row is larger.
var fixedTypes = map[string]bool{
	"smallint": true, "integer": true, "bigint": true, "real": true, "double precision": true,
	"boolean": true, "date": true, "timestamp with time zone": true, "timestamp without time zone": true,
	"time without time zone": true, "time with time zone": true, "uuid": true, "oid": true,
	"money": true, "interval": true, `"char"`: true,
}

// fixedTextWidth bounds the text size of a value of a fixedTypes column.
const fixedTextWidth = 48

// valueSize is the SQL for the size in bytes of the value of column x (of
// type typ) as a page carries it: the length of the stored text or bytes
// for the types whose stored length is the length sent (computed from the
// TOAST header, without reading the value), else the stored size.
func valueSize(x, typ string, binary bool) string {
	switch baseType(typ) {
	case "text", "character varying", "character":
		return "octet_length(" + x + ")"
	case "json", "xml":
		return "octet_length(" + x + "::text)"
	case "bytea":
		if binary {
			return "octet_length(" + x + ")"
		}
		return "(2 * octet_length(" + x + ")::int8 + 2)" // \x and two hex digits a byte
	}
	// jsonb, arrays, numeric, user types: the stored size, which is the
	// compressed size of a compressed value (docs/HOW-IT-WORKS.md, "Memory").
	return "pg_column_size(" + x + ")"
}

// sized reports whether pages of r need the byte limit: some column has
// no bounded size, or page_size rows of bounded ones could pass it.
func (r *Reader) sized(limit int) bool {
	budget := r.cfg.Source.PageBytes.Bytes
	if budget <= 0 {
		return false
	}
	for _, col := range r.table.Columns {
		if !fixedTypes[baseType(col.Type)] {
			return true
		}
	}
	return int64(limit)*int64(len(r.table.Columns))*fixedTextWidth > budget
}

// sizedQuery wraps the page query q (whose select list is r's columns,
// then the text copies of the cursor in binary mode) so that it returns
// only the rows that fit in page_bytes, the first row always, and one more
// column, "true" when a row that did not fit follows.
func (r *Reader) sizedQuery(q string, params []string) (string, []string) {
	n := len(r.table.Columns)
	total := n
	if r.formats != nil {
		total += len(r.table.Cursor)
	}
	alias := func(i int) string { return fmt.Sprintf("syncd_c%d", i+1) }
	// q selects its columns by name; the wrapper renames them by position,
	// which keeps a column named like one of the wrapper's own apart.
	names := make([]string, total)
	for i := range total {
		names[i] = alias(i)
	}
	order := make([]string, len(r.table.CursorIdx))
	for i, idx := range r.table.CursorIdx {
		order[i] = alias(idx)
	}
	sizes := []string{fmt.Sprint(4 * n)} // each value's length word
	for i, col := range r.table.Columns {
		if !fixedTypes[baseType(col.Type)] {
			// int8 before adding: two values of 1 GB pass int4.
			sizes = append(sizes, "coalesce("+valueSize(alias(i), col.Type, r.formats != nil)+", 0)::int8")
		} else {
			sizes = append(sizes, fmt.Sprint(fixedTextWidth))
		}
	}
	params = append(params, fmt.Sprint(r.cfg.Source.PageBytes.Bytes))
	budget := fmt.Sprintf("$%d::int8", len(params))
	list := strings.Join(names, ", ")
	w := "(ORDER BY " + strings.Join(order, ", ") + " ROWS UNBOUNDED PRECEDING)"
	sized := "SELECT " + list + ", syncd_more::text FROM (" +
		"SELECT " + list + ", sum(" + strings.Join(sizes, " + ") + ") OVER " + w + " AS syncd_bytes, " +
		"row_number() OVER " + w + " AS syncd_row, " +
		"lead(true, 1, false) OVER " + w + " AS syncd_more " +
		"FROM (" + q + ") AS syncd_page (" + list + ")" +
		") AS syncd_sized WHERE syncd_row = 1 OR syncd_bytes <= " + budget +
		" ORDER BY " + strings.Join(order, ", ")
	return sized, params
}

// rowBytes is what a row's values take in a page: their bytes and a length
// word each.
func rowBytes(vals [][]byte) int64 {
	n := int64(4 * len(vals))
	for _, v := range vals {
		n += int64(len(v))
	}
	return n
}
