package source

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
)

// Bound is the commit-safe upper limit of one run: rows whose first cursor
// column is at or past it may still be joined by rows of transactions that
// have not committed, so the run leaves them for a later run.
//
// A row stamped with now() carries its transaction's start time. Every
// transaction that started before the bound was computed and had not ended
// is seen in pg_stat_activity, so its rows sort at or after the bound; every
// transaction that ended is visible to the pages read afterwards; every
// transaction that starts later stamps its rows later than the bound.
type Bound struct {
	// Value is the exclusive limit as text of the first cursor column's
	// type, for Position.Before; "" when no limit applies.
	Value string
	// At is the limit as an instant (UTC); zero when Value is "", when the
	// first cursor column is not a date or timestamp, or when Value is only
	// the ceiling at the clock plus ClockAllowance (bound: off).
	At time.Time
	// Now is the source's clock when the bound was computed.
	Now time.Time
	// Hold is true when the run must read nothing past the watermark: a
	// transaction that can still commit rows below any limit syncd can
	// compute is open (a prepared transaction holding a write lock on the
	// table, or, for a sequence cursor, a writer that did not end within
	// the wait).
	Hold bool
	// Holder is the transaction that set the limit or the hold (PID 0: the
	// clock minus source.settle did; PreparedPID: a prepared transaction).
	// Holders lists every transaction that held the bound back, Holder
	// first.
	Holder  Holder
	Holders []Holder
	session Holder // the oldest open transaction, when it set the limit
	// Blind is true when the source role cannot see the transactions of
	// other roles (it is neither superuser nor a member of
	// pg_read_all_stats): their late commits are caught only by lookback.
	Blind bool
	// Standby is true when the source is a hot standby: transactions of the
	// primary are invisible there and only lookback covers them.
	Standby bool
	// Seen says which rows every page of this run sees (zero for a view
	// or a foreign table, whose rows carry no transaction id): see Seen.
	Seen Seen
	// Role is the source role, for messages.
	Role    string
	roleSQL string // Role quoted as quote_ident does
	// pending are the writers to wait for before the hold can be lifted;
	// next is then the limit of a sequence cursor (AwaitWriters).
	pending []writer
	next    string
	// off says why bound: off leaves late commits to reconcile ("" when it
	// does not matter).
	off string
	// SeqLast is, for a sequence cursor, the last value its sequence
	// handed out as read with the bound ("" when unknown: the role may not
	// read it, the sequence gave no value since it was created or reset
	// with setval(..., false), or source.bound is off). See
	// SequenceBehind.
	SeqLast string
}

// ClockAllowance is how far past the source's clock a temporal cursor value
// may lie and still count as written now. The watermark never moves past
// the source's clock plus this allowance, whatever source.bound says; rows
// stamped beyond it (a typo'd year, 'infinity') are counted and reported,
// never allowed to carry the watermark away from the rows written after
// them.
const ClockAllowance = time.Minute

// Holder is an open transaction on the source: a session (PID, its
// application_name and the start of its transaction) or a prepared
// transaction (PID is PreparedPID, App its gid, Since when it was prepared).
type Holder struct {
	PID   int32
	App   string
	Since time.Time
}

// Prepared is true for a prepared transaction.
func (h Holder) Prepared() bool { return h.PID == PreparedPID }

// HeldBack is how far the bound is behind the source's clock.
func (b Bound) HeldBack() time.Duration {
	if b.At.IsZero() {
		return 0
	}
	return b.Now.Sub(b.At)
}

// Seen is what a run that reads every page from its start to its end
// tells the next run about the rows it read: Xmin is the oldest
// transaction (a 64-bit id) still running when its bound was read, so every
// transaction below it had ended, and every page of the run, read later,
// saw its rows; Server is when the source server started, so that a
// restart, a failover or a restore, after which transaction ids can be
// handed out again, voids it (syncer/idle.go).
type Seen struct {
	Xmin   uint64
	Server time.Time
}

// boundQuery finds the oldest open transaction in this database other than
// this session, syncd's own sessions of this process while they have not
// written ($1 and $3: their pids and backend start times; a session that
// has an xid is never left out, and nothing a writer can set, such as its
// application_name, is trusted), autovacuum (which writes no user rows but
// can run for hours), and transactions that failed and can only roll back
// (a failed transaction holds no lock at all; one whose failure is inside a
// savepoint still holds its virtualxid lock and can ROLLBACK TO the
// savepoint and commit rows stamped at its start, so it holds the bound).
// On a hot standby no
// local session can write, so none holds the bound. $2 is source.bound:
// "writers" keeps only transactions that have an xid, that is have written.
// now() is the start of this statement, taken before pg_stat_activity is
// read, so a transaction missing from the view started after it. The
// statement's snapshot's xmin and the server's start make Bound.Seen ($4
// and $5 name the table: only a table's or a partitioned table's rows
// have an xmin, and a role granted only some columns may not read it).
const boundQuery = `
SELECT now(), current_user::text, quote_ident(current_user),
       pg_has_role('pg_read_all_stats', 'USAGE'), pg_is_in_recovery(),
       h.pid, h.application_name, h.xact_start,
       pg_snapshot_xmin(pg_current_snapshot())::text::int8, pg_postmaster_start_time(),
       coalesce((SELECT c.relkind IN ('r', 'p') AND has_table_privilege(c.oid, 'SELECT') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = $4 AND c.relname = $5), false)
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
  SELECT a.pid, a.application_name, a.xact_start
  FROM pg_stat_activity a
  WHERE a.datname = current_database()
    AND a.pid <> pg_backend_pid()
    AND NOT (a.backend_xid IS NULL AND (a.pid, a.backend_start) IN (SELECT * FROM unnest($1::int4[], $3::timestamptz[])))
    AND a.backend_type IS DISTINCT FROM 'autovacuum worker'
    AND a.xact_start IS NOT NULL
    AND (a.state IS DISTINCT FROM 'idle in transaction (aborted)'
         OR EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid))
    AND $2::text <> 'off' AND NOT pg_is_in_recovery()
    AND ($2::text = 'transactions' OR a.backend_xid IS NOT NULL)
  ORDER BY a.xact_start
  LIMIT 1
) AS h ON true`

// Bound computes the limit of this run. A date or timestamp first cursor
// column is bounded by source.bound and source.settle, and never past the
// source's clock plus ClockAllowance whatever they say; a prepared
// transaction holding a write lock on the table holds the run at the
// watermark (its rows carry stamps from before it was prepared, and its
// start cannot be known). A sequence cursor is bounded by sequenceBound. A
// timestamp without time zone is taken to hold UTC (the clock of a session
// whose TimeZone is UTC).
//
// Its statements (boundQuery, then the writers) are sent in one round trip
// (queueBound), unless the run's first round trip read them already
// (Opening.Start): the first Bound after it uses those.
func (r *Reader) Bound(ctx context.Context) (Bound, error) {
	if !r.table.Temporal {
		return r.sequenceBound(ctx)
	}
	rd, within := r.pre, r.aheadWithin
	r.pre, r.aheadWithin = nil, 0
	if rd == nil {
		var batch pgx.Batch
		rd = r.queueBound(&batch, within)
		if err := r.conn.SendBatch(ctx, &batch).Close(); err != nil {
			return Bound{}, fmt.Errorf("read open transactions of the source for the read bound of %s: %w", r.table.Ident, err)
		}
	}
	return r.boundOf(rd), nil
}

// ReadAheadWith makes the next Bound look for rows stamped ahead of the
// clock in the same round trip, for an AheadOfClock(within) right after
// it with the bound it returned.
func (r *Reader) ReadAheadWith(within time.Duration) { r.aheadWithin = within }

// boundRead is what the bound's statements returned (queueBound), before
// boundOf makes a Bound of it with the table's cursor type.
type boundRead struct {
	now              time.Time
	role, roleSQL    string
	seesAll, standby bool
	pid              pgtype.Int4
	app              pgtype.Text
	started          pgtype.Timestamptz
	writers          []writer
	ahead            *aheadRead // nil: not read with the bound
	xmin             int64
	server           time.Time
	versioned        bool
}

// queueBound queues the bound's statements on b: boundQuery, the writers
// of the table unless source.bound is off, and, after ReadAheadWith, the
// look for rows stamped ahead of the bound (aheadAtNow) for an
// AheadOfClock(within) (0: none). Sent together
// they run in one implicit transaction, so now() is the same in each: the
// bound's value is now() when no transaction holds it, and the look ahead
// takes it as its limit. Each statement still reads with a snapshot of
// its own, in this order, as when they were sent one by one: the writers
// are listed after pg_stat_activity was read.
func (r *Reader) queueBound(b *pgx.Batch, within time.Duration) *boundRead {
	s := r.cfg.Source
	rd := &boundRead{}
	pids, starts := pgutil.OwnSessions()
	b.Queue(boundQuery, pids, s.Bound, starts, r.table.Ident.Schema, r.table.Ident.Name).QueryRow(func(row pgx.Row) error {
		return row.Scan(&rd.now, &rd.role, &rd.roleSQL, &rd.seesAll, &rd.standby, &rd.pid, &rd.app, &rd.started,
			&rd.xmin, &rd.server, &rd.versioned)
	})
	if s.Bound != config.BoundOff {
		r.queueWriters(b, func(ws []writer) { rd.writers = ws })
	}
	if q, ok := r.aheadAtNow(); ok && within > 0 {
		a := &aheadRead{within: within}
		b.Queue(q, interval(within)).QueryRow(func(row pgx.Row) error { return row.Scan(&a.secs) })
		rd.ahead = a
	}
	return rd
}

// boundOf makes the Bound of what queueBound read.
func (r *Reader) boundOf(rd *boundRead) Bound {
	s := r.cfg.Source
	b := Bound{Now: rd.now.UTC(), Role: rd.role, roleSQL: rd.roleSQL}
	if rd.versioned && rd.xmin > 0 {
		b.Seen = Seen{Xmin: uint64(rd.xmin), Server: rd.server.UTC()}
	}
	b.Blind = s.Bound != config.BoundOff && !rd.seesAll
	b.Standby = rd.standby && s.Bound != config.BoundOff
	limit := b.Now.Add(ClockAllowance)
	if s.Bound != config.BoundOff || s.Settle.Duration > 0 {
		limit = b.Now.Add(-s.Settle.Duration)
	}
	if rd.pid.Valid && rd.started.Valid && rd.started.Time.Before(limit) {
		limit = rd.started.Time.UTC()
		b.session = Holder{PID: rd.pid.Int32, App: rd.app.String, Since: limit}
	}
	b.At, b.Value = limitText(r.table.Cursor[0].Type, limit)
	if s.Bound == config.BoundOff && s.Settle.Duration <= 0 {
		// Only the ceiling limits the read: there is no read bound to
		// report, and the run is caught up to the clock, not past it.
		b.At = time.Time{}
	}
	b.holdFor(nil)
	if s.Bound != config.BoundOff && !b.Standby {
		for _, w := range rd.writers {
			if w.Prepared() {
				b.pending = append(b.pending, w)
			}
		}
		b.holdFor(b.pending)
	}
	r.ahead = nil
	if a := rd.ahead; a != nil && !b.Hold {
		// Kept for AheadOfClock with this bound only; a bound that holds
		// reads the rows ahead, if ever, after its writers ended.
		a.now = b.Now
		r.ahead = a
	}
	return b
}

// holdFor holds the run at the watermark while ws are open; without them
// the session that set the limit, if any, is the holder.
func (b *Bound) holdFor(ws []writer) {
	b.Hold = len(ws) > 0
	b.Holder, b.Holders = b.session, nil
	for _, w := range ws {
		b.Holders = append(b.Holders, w.Holder)
	}
	if b.session.PID != 0 {
		b.Holders = append(b.Holders, b.session)
	}
	if b.Hold {
		b.Holder = b.Holders[0]
	}
}

// AwaitWriters waits, up to within, for the transactions that make b hold
// at the watermark to end; when they all did, the hold is lifted (and a
// sequence cursor gets its limit). Without such transactions b comes back
// as it is.
func (r *Reader) AwaitWriters(ctx context.Context, b Bound, within time.Duration) (Bound, error) {
	if !b.Hold || len(b.pending) == 0 {
		return b, nil
	}
	left, err := r.awaitWriters(ctx, r.table.Seq, b.pending, within)
	if err != nil {
		return b, err
	}
	b.pending = left
	b.holdFor(left)
	if !b.Hold && !r.table.Temporal {
		b.Value = b.next
	}
	return b, nil
}

// limitText rounds an exclusive limit down to what the column can hold and
// prints it in the column's type. A timestamp(p) rounds a stamp to p
// digits, which can move it below the transaction's start: the limit is
// truncated to p digits so such a row still sorts at or after it. A date
// limit is the day the limit falls in: rows of that day wait.
func limitText(typ string, t time.Time) (time.Time, string) {
	t = t.UTC()
	switch baseType(typ) {
	case "date":
		d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		return d, d.Format("2006-01-02")
	case "timestamp with time zone":
		t = t.Truncate(precision(typ))
		return t, t.Format("2006-01-02 15:04:05.999999") + "+00"
	default: // timestamp without time zone, taken as UTC
		t = t.Truncate(precision(typ))
		return t, t.Format("2006-01-02 15:04:05.999999")
	}
}

// precision is the unit a timestamp(p) column stores: 10^-p seconds, a
// microsecond when no p is given.
func precision(typ string) time.Duration {
	i := strings.IndexByte(typ, '(')
	j := strings.IndexByte(typ, ')')
	if i < 0 || j < i {
		return time.Microsecond
	}
	p, err := strconv.Atoi(typ[i+1 : j])
	if err != nil || p >= 6 {
		return time.Microsecond
	}
	d := time.Second
	for ; p > 0; p-- {
		d /= 10
	}
	return d
}

// Warning says why the bound cannot see every writer, or "" when it can.
// The same text goes to the log at startup and to `syncd validate`.
func (b Bound) Warning(lookback time.Duration) string {
	switch {
	case b.off != "":
		return b.off
	case b.Standby:
		return fmt.Sprintf("the source is a hot standby: transactions of the primary are invisible here, so the commit-safe bound cannot wait for them and late commits are caught only by lookback (%s) and syncd reconcile; point source.dsn at the primary, or keep lookback above the longest transaction plus the replication lag", lookback)
	case b.Blind:
		return fmt.Sprintf("source role %q cannot see other roles' transactions in pg_stat_activity, so the commit-safe bound waits only for its own role's sessions and late commits by other roles are caught only by lookback (%s); run GRANT pg_read_all_stats TO %s", b.Role, lookback, b.roleSQL)
	}
	return ""
}
