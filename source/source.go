package source

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/watermark"
)

// Source is what a run needs from the table it copies: the table's
// description, the commit-safe bound it reads below, pages in cursor
// order, the order of two cursors, the source's clock, and Close.
//
// Beyond these methods a source may declare optional capabilities, which
// the run, validate, reconcile and a campaign look for with a type
// assertion; *Reader, the PostgreSQL table, has every one:
//   - Settler: the bound waits for the writers that hold it and for rows
//     stamped a moment ahead of the clock.
//   - OutsideReader: the rows no cursor page reaches are counted and
//     copied in a pass of their own.
//   - SchemaReader: the run follows the source's columns and types, and
//     backfills a column added to the copy.
//   - BinaryReader: pages are read in PostgreSQL's binary format.
//   - Checker: the cursor index and the writers' time zone are checked.
//   - Counter: the rows ahead are estimated and counted.
//   - Snapshotter: an empty copy is first filled from one exported
//     snapshot in heap block ranges.
//   - Querier and Session: SQL of the caller's own runs on the source's
//     session (the copy's catalog identity, reconcile, a campaign's
//     freeze).
//
// A run given a source without a capability does without it (no wait for
// writers, no outside pass, no first load, ...); an operation that cannot
// work without one (reconcile without Session) says so and stops.
type Source interface {
	// Table is the source table as it was described when the source was
	// opened.
	Table() *Table
	// Bound is the commit-safe bound a run reads below.
	Bound(ctx context.Context) (Bound, error)
	// ReadPage reads at most limit rows from pos in cursor order; a page
	// cut short for another reason than its end has More set.
	ReadPage(ctx context.Context, pos Position, limit int) (page.Page, error)
	// Less reports whether cursor a sorts before cursor b in the source's
	// own order.
	Less(ctx context.Context, a, b []string) (bool, error)
	// Clock reads the source's clock: the point a run without a bound
	// value is caught up to.
	Clock(ctx context.Context) (time.Time, error)
	// Close releases the source's session.
	Close(ctx context.Context) error
}

var _ Source = (*Reader)(nil)

// Settler is implemented by a source whose bound can be settled before a
// run reads below it: AwaitWriters waits, at most within, for the open
// writers that hold the bound at the watermark, and AheadOfClock says how
// far past the bound the latest row stamped ahead of the clock lies.
type Settler interface {
	AwaitWriters(ctx context.Context, b Bound, within time.Duration) (Bound, error)
	AheadOfClock(ctx context.Context, b Bound, within time.Duration) (time.Duration, bool, error)
}

var _ Settler = (*Reader)(nil)

// OutsideReader is implemented by a source whose rows can lie outside
// the cursor's reach (a NULL cursor column, a stamp past the clock): a run
// that caught up counts them and copies them by sink.key without moving
// the watermark (see Outside).
type OutsideReader interface {
	CountOutside(ctx context.Context) (Outside, error)
	ReadOutside(ctx context.Context, o Outside, after []string, limit int) (page.Page, []string, error)
}

var _ OutsideReader = (*Reader)(nil)

// SchemaReader is implemented by a source whose columns and types a run
// follows: Schema is the table's columns now, RefreshTypes reads the
// labels of its user types again (after the bound, so that they include
// every label a row under it uses), and BackfillPage reads a page of
// columns added to the copy by sink.key.
type SchemaReader interface {
	Schema(ctx context.Context) (watermark.Schema, error)
	RefreshTypes(ctx context.Context) error
	BackfillPage(ctx context.Context, key, keyTypes, cols []string, after []string, limit int) ([][]*string, error)
}

var _ SchemaReader = (*Reader)(nil)

// BinaryReader is implemented by a source that can read its pages in
// PostgreSQL's binary format (page.Page.Binary) for a sink that takes
// them (sink.BinaryWriter).
type BinaryReader interface {
	UseBinary()
}

var _ BinaryReader = (*Reader)(nil)

// Checker is implemented by a source that checks how it is read: whether
// an index serves the page query (CheckCursorIndex, CreateIndex, and
// validate's IndexWarning, which also checks the page query's plan), and
// whether its writers stamp local time into a column without a time zone
// (LocalTimeWarning), and whether the table's row-level security applies
// to the source role (RowSecurityWarning). WarnLocalTime and
// WarnRowSecurity log those two once per process, source and table.
type Checker interface {
	CheckCursorIndex(ctx context.Context) (CursorIndex, error)
	CreateIndex() string
	IndexWarning(ctx context.Context) (string, error)
	LocalTimeWarning(ctx context.Context) (string, error)
	RowSecurityWarning(ctx context.Context) (string, error)
	WarnRowSecurity(ctx context.Context, log *slog.Logger)
	WarnLocalTime(ctx context.Context, log *slog.Logger)
}

var _ Checker = (*Reader)(nil)

// Counter is implemented by a source that counts the rows a read from a
// position reaches: EstimateRows as its planner estimates them (a run's
// progress line), CountBefore exactly, up to a time (the rows a resync to
// that time skips).
type Counter interface {
	EstimateRows(ctx context.Context, pos Position) (int64, error)
	CountBefore(ctx context.Context, pos Position, t time.Time) (int64, error)
}

var _ Counter = (*Reader)(nil)

// Snapshotter is implemented by a source whose table is a PostgreSQL heap
// that a first load may read from one exported snapshot in ranges of heap
// blocks, on sessions the load opens itself (syncer's first load):
// HeapBlocks says whether the table is a plain table and how many blocks
// its heap has now.
type Snapshotter interface {
	HeapBlocks(ctx context.Context) (plain bool, blocks int64, err error)
}

var _ Snapshotter = (*Reader)(nil)

// Querier runs SQL of the caller's own on the source's session, between
// reads (never while a page is read): the copy's catalog identity of the
// table, reconcile's coverage. Its methods are pgx's, so a *pgx.Conn is a
// Querier too.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var _ Querier = (*Reader)(nil)

// Session is the source's PostgreSQL session whole, for the operations
// that compare or freeze it with PostgreSQL's own means: reconcile's
// streamed row hashes (the wire protocol's text parameters) and a
// campaign's freeze (one read-only repeatable-read transaction). Prefer
// Querier. As with Querier, the session stays the source's: the caller
// neither closes it nor uses it while a page is read. A *pgx.Conn is a
// Session too.
type Session interface {
	Querier
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	TypeMap() *pgtype.Map
	PgConn() *pgconn.PgConn
}

var _ Session = (*Reader)(nil)
