// Package page holds the types that travel from a source to a sink: the
// description of the selected columns and one page of rows in PostgreSQL's
// text format, which round-trips every type exactly between servers of any
// version.
package page

import "time"

// Column describes one selected source column.
type Column struct {
	Name    string
	Type    string // format_type(atttypid, atttypmod), for example "numeric(12,2)"
	TypeOID uint32
	NotNull bool
}

// Page is one page of rows read in cursor order.
type Page struct {
	// Rows holds each row's values in column order, as PostgreSQL's text
	// output; a nil value is SQL NULL.
	Rows [][][]byte
	// Last is the cursor of the last row, one text value per cursor column.
	Last []string
	// Mark, when set, is the watermark the page moves the copy to (Last,
	// unless the page re-reads rows behind the watermark): a sink that
	// keeps its own record of its position writes it in the page's
	// transaction.
	Mark []string
	// More is set on a page that ended before its row limit because the
	// next row would have taken it past its byte limit: rows may follow
	// although the page is short (a short page without it means the reader
	// reached the end).
	More bool
	// Binary, when set, says that every value of Rows is in PostgreSQL's
	// binary send format instead of text. The source reads binary only when
	// the sink asked for it (sink.BinaryWriter) and every column's type is
	// built in and the same on both sides.
	Binary bool
	// Span, when set, is a page whose rows stay in the sink's database: it
	// stands for the Span.Count rows after Span.After up to Last, and Rows
	// is empty (a coupon campaign's grant page, granted by one statement on
	// the sink's server from its frozen targets).
	Span *Span
	// End, set on the last page of a run that catches up (with Mark), is
	// how the run ended: a sink that records its position records the run
	// with the page's mark, instead of in a statement of its own.
	End *RunEnd
}

// RunEnd is how a run that caught up ended (Page.End): the read bound it
// reached (zero: none), the point up to which the copy then holds every
// committed source row, and how often, at most, its writer records an
// idle run.
type RunEnd struct {
	Bound, Fresh time.Time
	Every        time.Duration
}

// Span is the range of a page whose rows are not carried (Page.Span).
type Span struct {
	// After is the key the range starts after (nil: from the first row).
	After []string
	// From is the position the range starts after, in the order its rows
	// are stored (0: from the first row).
	From int64
	// Count is the number of rows in the range, up to and including Last.
	Count int
}

// Len is the number of rows in the page.
func (p *Page) Len() int {
	if p.Span != nil {
		return p.Span.Count
	}
	return len(p.Rows)
}
