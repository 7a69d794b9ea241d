// Package source reads a PostgreSQL table in pages by a composite keyset
// cursor: WHERE (c1, ..., id) > ($1, ..., $n) ORDER BY c1, ..., id LIMIT n,
// with row-value comparison and never OFFSET. Values travel as PostgreSQL's
// text output, so a timestamp keeps its microseconds and a cursor value is
// handed back to the server exactly as the server printed it.
//
// The package is also the boundary between a run and where its rows come
// from (source.go). Source is the small interface a run needs: the
// table's description, the commit-safe bound, a page from a position,
// the order of two cursors, the clock, Close. What only PostgreSQL offers
// is a capability the callers look for: settling the bound (Settler), the
// outside pass (OutsideReader), following the schema (SchemaReader),
// binary pages (BinaryReader), the index and time zone checks (Checker),
// row estimates and counts (Counter), the first load from an exported
// snapshot (Snapshotter), and SQL on the source's own session (Querier,
// and Session for reconcile's hashes and a campaign's freeze). Reader is
// the PostgreSQL implementation and has them all; syncer, reconcile,
// coupon and cli hold a Source (or a named set of capabilities), never a
// *Reader or its connection. How Open obtains the session is not part of
// the boundary.
package source

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgpool"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
)

// Position says where a page starts.
type Position struct {
	// After, when set, starts strictly after this cursor (one text per column).
	After []string
	// AtLeast, when set (and After is not), starts at rows whose first cursor
	// column is at or after this value minus Lookback.
	AtLeast  string
	Lookback time.Duration
	// Before, when set, is an exclusive upper bound on the first cursor
	// column: rows at or past it are left for a later run.
	Before string
	// Seen, when set, leaves out the rows at or before its cursor Upto
	// whose version a transaction below Xmin wrote: the run before read
	// them (syncer/idle.go).
	Seen *SeenBefore
}

// SeenBefore is Position.Seen: Xmin is a Seen.Xmin of the source.
type SeenBefore struct {
	Xmin uint64
	Upto []string
}

// Reader reads pages from one PostgreSQL source table over one
// connection: the PostgreSQL implementation of Source, with every
// capability (source.go).
type Reader struct {
	conn  *pgx.Conn
	sess  *pgpool.Session
	cfg   *config.Config
	table *Table
	sel   string // SELECT ... FROM ... (without WHERE)
	order string
	// formats are the result formats of sel's columns when UseBinary was
	// called: binary for the columns, text for the trailing cursor copies.
	formats []int16
	// narrow is set while the rows read are so narrow that a page of
	// page_size rows stays well within source.page_bytes: the next page
	// is read without the server counting its bytes (pagebytes.go).
	narrow bool
	// Described is true when Open read the table from the catalog, false
	// when it took an earlier run's description (OpenCached).
	Described bool
	// stmts maps a page query to its prepared statement (prepared.go).
	stmts   map[string]string
	stmtSeq int
	// pre is the bound's statements as the run's first round trip read
	// them (Opening.Start), for the first Bound; aheadWithin, set by
	// ReadAheadWith, makes the next bound look ahead of the clock too,
	// and ahead is what that look found, for AheadOfClock (bound.go).
	pre         *boundRead
	aheadWithin time.Duration
	ahead       *aheadRead
}

// Open connects to the source (a session of the context's pool when it
// carries one, see package pgpool) and describes its table.
func Open(ctx context.Context, c *config.Config) (*Reader, error) {
	sess, err := OpenSession(ctx, c)
	if err != nil {
		return nil, err
	}
	t, err := Describe(ctx, sess.Conn, c)
	if err != nil {
		pgpool.Broken(ctx, sess.Conn)
		_ = sess.Release(context.WithoutCancel(ctx), "")
		return nil, err
	}
	r := newReader(sess.Conn, c, t)
	r.sess, r.Described = sess, true
	return r, nil
}

// OpenCached opens the session of a run that knows the table from an
// earlier run: known, described when the table's catalog fingerprint was
// fp (see pgutil.Fingerprint). It sends nothing on a session of the
// context's pool; Opening.Start reads.
func OpenCached(ctx context.Context, c *config.Config, fp string, known *Table) (*Opening, error) {
	sess, err := OpenSession(ctx, c)
	if err != nil {
		return nil, err
	}
	return &Opening{sess: sess, c: c, fp: fp, known: known}, nil
}

// Opening is a session opened by OpenCached, not read yet.
type Opening struct {
	sess  *pgpool.Session
	c     *config.Config
	fp    string
	known *Table
}

// Prefetch is what Opening.Start reads besides the table's fingerprint,
// in the same round trip.
type Prefetch struct {
	// Ahead is the wait of the run's AheadOfClock after its first Bound
	// (ReadAheadWith; 0: none).
	Ahead time.Duration
	// Extra queues the caller's own statements (the copy's catalog
	// identity of the table): they run whatever the fingerprint says,
	// after the bound's.
	Extra func(*pgx.Batch)
}

// Start reads the table's catalog fingerprint and describes the table
// again only when it differs from the known one (Described says which).
// It returns the reader and the fingerprint read ("": the table does not
// exist).
//
// One round trip (one implicit transaction) carries the fingerprint, the
// statements of the first Bound (queueBound, when the known table's first
// cursor column is a date or timestamp) and p.Extra's. The bound read there
// is kept for the first Bound only under an unchanged fingerprint: the
// known table it is interpreted with (the cursor column's type, the look
// ahead's column) is then the table as it is; a table that changed reads
// its bound again. Should that round trip fail (the table dropped or
// renamed: a statement that names it fails), the fingerprint is read alone
// and the table described as Open does, for Open's own errors.
func (o *Opening) Start(ctx context.Context, p Prefetch) (*Reader, string, error) {
	c, conn := o.c, o.sess.Conn
	fail := func(err error) (*Reader, string, error) {
		pgpool.Broken(ctx, conn)
		_ = o.sess.Release(context.WithoutCancel(ctx), "")
		return nil, "", err
	}
	var (
		batch pgx.Batch
		now   string
		read  bool
		pre   *boundRead
	)
	pgutil.QueueFingerprint(&batch, c.Source.Ident.Schema, c.Source.Ident.Name, &now, &read)
	var r *Reader
	if o.known != nil {
		r = newReader(conn, c, o.known.Clone())
		if o.known.Temporal {
			pre = r.queueBound(&batch, p.Ahead)
		}
	}
	if p.Extra != nil {
		p.Extra(&batch)
	}
	err := conn.SendBatch(ctx, &batch).Close()
	if err != nil && ctx.Err() == nil {
		pre = nil
		now, err = pgutil.Fingerprint(ctx, conn, c.Source.Ident.Schema, c.Source.Ident.Name)
	}
	if err != nil {
		return fail(err)
	}
	described := o.known == nil || now == "" || now != o.fp
	if described {
		t, err := Describe(ctx, conn, c)
		if err != nil {
			return fail(err)
		}
		r = newReader(conn, c, t)
	} else {
		r.pre = pre
	}
	r.sess, r.Described = o.sess, described
	return r, now, nil
}

// OpenOn is Open on a session the caller opened to c's source database
// and keeps: `syncd validate` checks the tables of a pattern on a few
// sessions instead of one each. Close closes conn.
func OpenOn(ctx context.Context, conn *pgx.Conn, c *config.Config) (*Reader, error) {
	t, err := Describe(ctx, conn, c)
	if err != nil {
		return nil, err
	}
	return OpenDescribed(conn, c, t), nil
}

// OpenDescribed is OpenOn with c's table as Describe described it already
// (Expansion.Tables): a pattern's tables are not described twice.
func OpenDescribed(conn *pgx.Conn, c *config.Config, t *Table) *Reader {
	r := newReader(conn, c, t)
	r.Described = true
	return r
}

// newReader is the reader of table t on conn.
func newReader(conn *pgx.Conn, c *config.Config, t *Table) *Reader {
	names := make([]string, len(t.Columns))
	for i, col := range t.Columns {
		names[i] = col.Name
	}
	return &Reader{
		conn:  conn,
		cfg:   c,
		table: t,
		sel:   "SELECT " + pgutil.IdentList("", names) + " FROM " + pgutil.Qualified(t.Ident.Schema, t.Ident.Name),
		order: " ORDER BY " + pgutil.IdentList("", c.Source.Cursor),
	}
}

// Clone is a copy of t whose slices a run may change without touching t.
func (t *Table) Clone() *Table {
	if t == nil {
		return nil
	}
	c := *t
	c.Columns, c.Nums, c.Cursor, c.CursorIdx = slices.Clone(t.Columns), slices.Clone(t.Nums), slices.Clone(t.Cursor), slices.Clone(t.CursorIdx)
	c.Types, c.Checks = slices.Clone(t.Types), slices.Clone(t.Checks)
	return &c
}

// HasEnums reports whether a column's type is, or is built on, an enum:
// its labels can change without the table's catalog rows changing.
func (t *Table) HasEnums() bool {
	return slices.ContainsFunc(t.Types, func(u page.UserType) bool { return u.Kind == 'e' })
}

// Table is the source table as Open described it.
func (r *Reader) Table() *Table { return r.table }

// OpenSession opens a session on the source database of c: from the
// context's pool when it carries one, else a new connection.
func OpenSession(ctx context.Context, c *config.Config) (*pgpool.Session, error) {
	dsn := c.Source.DSN
	sess, err := pgpool.Open(ctx, "source\x00"+dsn, pgpool.Reset, func(ctx context.Context) (*pgx.Conn, error) {
		return pgutil.Connect(ctx, dsn, "source")
	})
	if err != nil {
		return nil, pgutil.Locate(c, err)
	}
	return sess, nil
}

// SchemaChanged drops the prepared statements of the reader's session
// when it came from a pool, and makes every other session of the pool drop
// its own before it is lent again: the table changed since the last run
// (see pgpool.Session.SchemaChanged).
func (r *Reader) SchemaChanged(ctx context.Context) error {
	if r.sess == nil {
		return nil
	}
	return r.sess.SchemaChanged(ctx)
}

// Broken marks the reader's session as one not to give back to its pool
// (a run that failed may have left it in any state).
func (r *Reader) Broken(ctx context.Context) { pgpool.Broken(ctx, r.conn) }

// Reused reports whether the reader's session ran before (it came from a
// pool).
func (r *Reader) Reused() bool { return r.sess != nil && r.sess.Reused }

// Close gives the session back to its pool, without the reader's
// prepared page statements, or closes it.
func (r *Reader) Close(ctx context.Context) error {
	if r.sess == nil {
		return r.conn.Close(ctx)
	}
	var drop strings.Builder
	for _, name := range r.stmts {
		drop.WriteString("DEALLOCATE " + pgutil.Ident(name) + "; ")
	}
	r.stmts = nil
	return r.sess.Release(ctx, drop.String())
}

// Clock reads the source's clock (clock_timestamp(), in UTC).
func (r *Reader) Clock(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := r.conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t); err != nil {
		return t, fmt.Errorf("read the source's clock: %w", err)
	}
	return t.UTC(), nil
}

// PageQuery builds the SQL and text parameters of one page.
func (r *Reader) PageQuery(pos Position, limit int) (string, []string) {
	var conds, params []string
	arg := func(v string, typ string) string {
		params = append(params, v)
		return fmt.Sprintf("$%d::%s", len(params), typ)
	}
	if f := r.filter(); f != "" {
		conds = append(conds, f)
	}
	first := r.table.Cursor[0]
	switch {
	case pos.After != nil:
		cols := make([]string, len(r.table.Cursor))
		vals := make([]string, len(r.table.Cursor))
		for i, col := range r.table.Cursor {
			cols[i] = pgutil.Ident(col.Name)
			vals[i] = arg(pos.After[i], col.Type)
		}
		if len(cols) == 1 {
			conds = append(conds, cols[0]+" > "+vals[0])
		} else {
			conds = append(conds, "("+strings.Join(cols, ", ")+") > ("+strings.Join(vals, ", ")+")")
		}
	case pos.AtLeast != "":
		v := arg(pos.AtLeast, first.Type)
		if pos.Lookback > 0 {
			v = "(" + v + " - " + arg(fmt.Sprintf("%d microseconds", pos.Lookback.Microseconds()), "interval") + ")"
		}
		conds = append(conds, pgutil.Ident(first.Name)+" >= "+v)
	}
	if pos.Before != "" {
		conds = append(conds, pgutil.Ident(first.Name)+" < "+arg(pos.Before, first.Type))
	}
	if s := pos.Seen; s != nil && len(s.Upto) == len(r.table.Cursor) {
		// age() counts back from the same transaction id for both sides,
		// so a row version written at or after Xmin is never older than
		// Xmin: such a row is always read, whatever wrapped. Only rows
		// strictly older (their transaction had ended before the last run
		// read its bound) are left out.
		cols := make([]string, len(r.table.Cursor))
		vals := make([]string, len(r.table.Cursor))
		for i, col := range r.table.Cursor {
			cols[i] = pgutil.Ident(col.Name)
			vals[i] = arg(s.Upto[i], col.Type)
		}
		xmin := arg(strconv.FormatUint(s.Xmin%(1<<32), 10), "text")
		conds = append(conds, "(("+strings.Join(cols, ", ")+") > ("+strings.Join(vals, ", ")+") OR age(xmin) <= age("+xmin+"::xid))")
	}
	q := r.sel
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	q += r.order + fmt.Sprintf(" LIMIT %d", limit)
	return q, params
}

// readQuery is the query ReadPage runs while rows may be wide: PageQuery,
// bounded by bytes when the table needs it (pagebytes.go).
func (r *Reader) readQuery(pos Position, limit int) (string, []string) {
	q, params := r.PageQuery(pos, limit)
	if r.sized(limit) {
		return r.sizedQuery(q, params)
	}
	return q, params
}

// CountBefore counts the rows a page read from pos reaches whose first
// cursor column is before t (a date column: before the day t falls in).
func (r *Reader) CountBefore(ctx context.Context, pos Position, t time.Time) (int64, error) {
	if !r.table.Temporal {
		return 0, fmt.Errorf("count rows of %s before %s: the first cursor column %q is not a timestamp", r.table.Ident, t.Format(time.RFC3339Nano), r.table.Cursor[0].Name)
	}
	_, pos.Before = limitText(r.table.Cursor[0].Type, t)
	q, params := r.PageQuery(pos, math.MaxInt32)
	args := make([]any, len(params))
	for i, p := range params {
		args[i] = p
	}
	var n int64
	if err := r.conn.QueryRow(ctx, "SELECT count(*) FROM ("+q+") AS page", args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count rows of %s before %s: %w", r.table.Ident, t.Format(time.RFC3339Nano), err)
	}
	return n, nil
}

// EstimateRows asks the planner how many rows a read from pos reaches:
// the estimated rows of the page query without its limit.
func (r *Reader) EstimateRows(ctx context.Context, pos Position) (int64, error) {
	q, params := r.PageQuery(pos, math.MaxInt32)
	args := make([]any, len(params))
	for i, p := range params {
		args[i] = p
	}
	var raw []byte
	if err := r.conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q, args...).Scan(&raw); err != nil {
		return 0, fmt.Errorf("explain the page query: %w", err)
	}
	var plans []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plans); err != nil || len(plans) == 0 {
		return 0, fmt.Errorf("unreadable plan: %v", err)
	}
	return int64(plans[0].Plan.Rows), nil
}

// ReadPage reads at most limit rows from pos in cursor order, and at most
// source.page_bytes of them (at least one row): a page cut short by its
// bytes has More set (pagebytes.go).
func (r *Reader) ReadPage(ctx context.Context, pos Position, limit int) (page.Page, error) {
	q, params := r.PageQuery(pos, limit)
	sized := r.sized(limit) && !r.narrow
	if sized {
		q, params = r.sizedQuery(q, params)
	}
	budget := r.cfg.Source.PageBytes.Bytes
	p := page.Page{Binary: r.formats != nil}
	n := len(r.table.Columns)
	var mem arena
	var last []byte // the trailing text cursor of the latest row
	var ends []int
	formats := r.formats
	if sized && formats != nil {
		formats = append(slices.Clip(formats), 0) // the trailing column is text
	}
	var bytes, widest int64
	cut := false
	err := r.execFormats(ctx, q, params, formats, func(vals [][]byte) {
		more := false
		if sized {
			// The trailing column says whether a row that did not fit follows.
			more = string(vals[len(vals)-1]) == "true"
			vals = vals[:len(vals)-1]
		}
		if cut {
			return // past the byte limit: read and dropped
		}
		size := rowBytes(vals[:n])
		if budget > 0 && len(p.Rows) > 0 && bytes+size > budget {
			cut, p.More = true, true
			return
		}
		bytes, widest, p.More = bytes+size, max(widest, size), more
		p.Rows = append(p.Rows, mem.row(vals, n))
		if p.Binary {
			last, ends = last[:0], ends[:0]
			for _, v := range vals[n:] {
				last = append(last, v...)
				ends = append(ends, len(last))
			}
		}
	})
	if err == nil && budget > 0 {
		// The next page skips the server's byte count while a page of this
		// page's widest rows stays well within the limit.
		r.narrow = !p.More && widest*int64(limit) <= budget/2
	}
	if err != nil {
		return page.Page{}, fmt.Errorf("read page of %s: %w", r.table.Ident, err)
	}
	if k := len(p.Rows); k > 0 {
		p.Last = make([]string, len(r.table.CursorIdx))
		for i, idx := range r.table.CursorIdx {
			if p.Binary {
				// The text copies of the cursor trail the binary columns.
				start := 0
				if i > 0 {
					start = ends[i-1]
				}
				p.Last[i] = string(last[start:ends[i]])
			} else {
				p.Last[i] = string(p.Rows[k-1][idx])
			}
		}
	}
	return p, nil
}

// execFormats runs q with text parameters and the given result formats
// (nil: all text), calling row for each row; row's values are valid only
// during the call.
func (r *Reader) execFormats(ctx context.Context, q string, params []string, formats []int16, row func([][]byte)) error {
	vals := make([][]byte, len(params))
	for i, p := range params {
		vals[i] = []byte(p)
	}
	name, parse, err := r.prepared(ctx, q)
	if err != nil {
		return err
	}
	return r.execPrepared(ctx, q, name, parse, vals, formats, row)
}

// Less reports whether cursor a sorts before cursor b, compared by the
// server with the columns' own types and collations.
func (r *Reader) Less(ctx context.Context, a, b []string) (bool, error) {
	var left, right []string
	var params []any
	for i, col := range r.table.Cursor {
		params = append(params, a[i])
		left = append(left, fmt.Sprintf("$%d::%s", len(params), col.Type))
	}
	for i, col := range r.table.Cursor {
		params = append(params, b[i])
		right = append(right, fmt.Sprintf("$%d::%s", len(params), col.Type))
	}
	var less bool
	q := "SELECT ROW(" + strings.Join(left, ", ") + ") < ROW(" + strings.Join(right, ", ") + ")"
	if err := r.conn.QueryRow(ctx, q, params...).Scan(&less); err != nil {
		return false, fmt.Errorf("compare cursors of %s: %w", r.table.Ident, err)
	}
	return less, nil
}

// filter is source.where in parentheses, or "" when there is none.
func (r *Reader) filter() string {
	if w := strings.TrimSpace(r.cfg.Source.Where); w != "" {
		return "(" + w + ")"
	}
	return ""
}
