package source

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/syncd/syncd/internal/pgutil"
)

// PreparedPID is Holder.PID for a prepared transaction, which has no
// backend; Holder.App then holds its gid and Holder.Since the time it was
// prepared.
const PreparedPID = -1

// writersQuery lists the transactions, other than this session's, that hold
// a lock allowing them to write ($1: the table, with every partition and
// inheritance child) or to take values from the cursor's sequence ($2, 0
// for none), including prepared transactions (pid NULL: found through the
// xid lock of the same virtual transaction). SHARE UPDATE EXCLUSIVE and
// SHARE (vacuum, analyze, create index) write no rows and are left out.
// Locks are released after a commit is visible, so a transaction missing
// from this list has ended and its rows are seen by every later statement.
const writersQuery = `
WITH RECURSIVE rels(oid) AS (
  SELECT $1::regclass::oid
  UNION SELECT i.inhrelid FROM pg_inherits i JOIN rels r ON i.inhparent = r.oid
)
SELECT DISTINCT ON (l.virtualtransaction) l.virtualtransaction, l.pid, a.application_name,
       coalesce(a.xact_start, p.prepared), p.gid
FROM pg_locks l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
LEFT JOIN pg_locks x ON l.pid IS NULL AND x.pid IS NULL AND x.locktype = 'transactionid'
  AND x.virtualtransaction = l.virtualtransaction
LEFT JOIN pg_prepared_xacts p ON p.transaction = x.transactionid
WHERE l.locktype = 'relation'
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND (l.relation IN (SELECT oid FROM rels) OR l.relation = $2::oid)
  AND l.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
  AND l.pid IS DISTINCT FROM pg_backend_pid()
ORDER BY l.virtualtransaction, 4`

// writer is an open transaction that can still write the source table.
type writer struct {
	vxid string
	Holder
}

// writers lists the open transactions that can still write the source
// table or take values from seq (0: no sequence). pg_locks and
// pg_prepared_xacts are readable by every role.
func (r *Reader) writers(ctx context.Context, seq uint32) ([]writer, error) {
	rows, err := r.conn.Query(ctx, writersQuery, pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name), seq)
	if err != nil {
		return nil, fmt.Errorf("list transactions that hold write locks on %s: %w", r.table.Ident, err)
	}
	return r.scanWriters(rows)
}

// queueWriters queues writers' query on b (seq 0): done receives the
// writers when the batch's results are read.
func (r *Reader) queueWriters(b *pgx.Batch, done func([]writer)) {
	b.Queue(writersQuery, pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name), uint32(0)).Query(func(rows pgx.Rows) error {
		ws, err := r.scanWriters(rows)
		if err == nil {
			done(ws)
		}
		return err
	})
}

// scanWriters reads the rows of writersQuery, oldest first.
func (r *Reader) scanWriters(rows pgx.Rows) ([]writer, error) {
	defer rows.Close()
	var out []writer
	for rows.Next() {
		var (
			w     writer
			pid   pgtype.Int4
			app   pgtype.Text
			since pgtype.Timestamptz
			gid   pgtype.Text
		)
		if err := rows.Scan(&w.vxid, &pid, &app, &since, &gid); err != nil {
			return nil, fmt.Errorf("list transactions that hold write locks on %s: %w", r.table.Ident, err)
		}
		w.PID, w.App, w.Since = pid.Int32, app.String, since.Time.UTC()
		if !pid.Valid {
			w.PID, w.App = PreparedPID, gid.String
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list transactions that hold write locks on %s: %w", r.table.Ident, err)
	}
	slices.SortFunc(out, func(a, b writer) int { return a.Since.Compare(b.Since) })
	return out, nil
}

// awaitWriters waits, up to within and polling every few milliseconds,
// until none of ws holds its lock any more. It returns those still open
// when the time is up (nil when all ended).
func (r *Reader) awaitWriters(ctx context.Context, seq uint32, ws []writer, within time.Duration) ([]writer, error) {
	deadline := time.Now().Add(within)
	for len(ws) > 0 {
		now, err := r.writers(ctx, seq)
		if err != nil {
			return nil, err
		}
		ws = slices.DeleteFunc(ws, func(w writer) bool {
			return !slices.ContainsFunc(now, func(n writer) bool { return n.vxid == w.vxid })
		})
		if len(ws) == 0 || !time.Now().Before(deadline) {
			break
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return ws, nil
}
