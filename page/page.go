// Package page holds the types that travel from a source to a sink: the
// description of the selected columns and one page of rows in PostgreSQL's
// text format, which round-trips every type exactly between servers of any
// version.
package page

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
	// Binary, when set, says that every value of Rows is in PostgreSQL's
	// binary send format instead of text. The source reads binary only when
	// the sink asked for it (sink.BinaryWriter) and every column's type is
	// built in and the same on both sides.
	Binary bool
}

// Len is the number of rows in the page.
func (p *Page) Len() int { return len(p.Rows) }
