package pgutil

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// Limits bound the statements of a sink session; 0 is no limit of syncd's
// own.
type Limits struct {
	Lock      time.Duration // lock_timeout
	Statement time.Duration // statement_timeout
}

// cancelGrace is how long a statement whose context ended may take to stop
// on the server after the cancel request before the connection is closed.
const cancelGrace = 5 * time.Second

// ConnectSink opens a sink connection (see Connect) bounded by l. Each
// limit is the stricter of l and what the session already has from the
// server, database, role or DSN: a database administrator's tighter limit
// is kept, 0 counting as none. A context that ends during a statement
// sends the server a cancel request, so the statement stops there at once
// (releasing the locks it waits for or holds) and the connection stays
// usable; only when the server does not answer is it closed.
func ConnectSink(ctx context.Context, dsn string, l Limits) (*pgx.Conn, error) {
	conn, err := connect(ctx, dsn, "sink", func(cfg *pgx.ConnConfig) {
		cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: cancelGrace}
		}
	})
	if err != nil {
		return nil, err
	}
	if err := applyLimits(ctx, conn, l); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("set lock_timeout and statement_timeout on the sink database %s: %w", Describe(dsn), scrubbed{err, dsn})
	}
	return conn, nil
}

// applyLimits sets each limit of l on the session unless the session's
// own is stricter. pg_settings gives both in milliseconds.
//
// It also sets the server's TCP keepalives of the session, where nobody
// configured them (the server, database, role or DSN): a sink session may
// hold a run lock while idle, and the server releases it only when it
// notices the connection is gone. A process killed on a live host closes
// its sockets; a host that vanishes (a lost node) does not, and with the
// operating system's default keepalive (two hours) its sources would wait
// that long for another replica. With these, about a minute.
//
// And it turns idle_session_timeout off (PostgreSQL 14 and later): the
// session that holds a run lock idles while a first load's chunks commit
// on other sessions, and a pooled session idles between runs; the server
// ending it would release the lock under a running load (which then
// stops: no first load longer than the timeout could finish) or fail the
// next run that borrows it.
func applyLimits(ctx context.Context, conn *pgx.Conn, l Limits) error {
	_, err := conn.Exec(ctx, LimitsSQL(l), pgx.QueryExecModeSimpleProtocol)
	return err
}

// LimitsSQL is the statement that sets l and the keepalives on a session
// (see applyLimits); a pooled sink session runs it again after its reset.
func LimitsSQL(l Limits) string {
	// One scan of pg_settings for all six (each scan builds every setting's
	// row: three scans took 3.5-4.5 ms on a new session, one takes 2-2.5).
	return fmt.Sprintf(`
SELECT set_config(name, CASE
    WHEN name IN ('lock_timeout', 'statement_timeout') THEN
      (CASE WHEN want = 0 OR (setting::bigint > 0 AND setting::bigint <= want) THEN setting::bigint ELSE want END)::text || 'ms'
    ELSE want::text END, false)
FROM pg_settings
JOIN (VALUES ('lock_timeout', %d::bigint), ('statement_timeout', %d::bigint),
             ('tcp_keepalives_idle', 30), ('tcp_keepalives_interval', 10), ('tcp_keepalives_count', 3),
             ('idle_session_timeout', 0)) k(n, want) ON name = n
WHERE CASE WHEN name LIKE 'tcp\_keepalives\_%%' THEN source = 'default'
           WHEN name = 'idle_session_timeout' THEN setting <> '0'
           ELSE true END`,
		l.Lock.Milliseconds(), l.Statement.Milliseconds())
}
