package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgpool"
	"github.com/syncd/syncd/internal/pgutil"
)

// Connect opens a connection to the sink database of c, bounded by
// sink.lock_timeout and sink.statement_timeout (each the stricter of the
// config's and the session's own). Every connection syncd opens to a sink
// database is made here: the copy's, the coupon grants', a run lock's own.
func Connect(ctx context.Context, c *config.Config) (*pgx.Conn, error) {
	conn, err := pgutil.ConnectSink(ctx, c.Sink.DSN, limitsOf(c))
	return conn, pgutil.Locate(c, err)
}

func limitsOf(c *config.Config) pgutil.Limits {
	return pgutil.Limits{Lock: c.Sink.LockTimeout.Duration, Statement: c.Sink.StatementTimeout.Duration}
}

// OpenSession opens a session on the sink database of c as Connect does,
// or takes one of the context's pool (see package pgpool): sessions of the
// same DSN and limits are shared by every source, and one given back runs
// pgpool.Reset and sets its limits again (the reset clears them).
func OpenSession(ctx context.Context, c *config.Config) (*pgpool.Session, error) {
	limits := pgutil.LimitsSQL(limitsOf(c))
	return pgpool.Open(ctx, sessionKey(c, limits), pgpool.Reset+"; "+limits, func(ctx context.Context) (*pgx.Conn, error) {
		return Connect(ctx, c)
	})
}

// PrimeSession starts dialing the session OpenSession takes next for c in
// ctx's pool (see pgpool.Prime) and returns at once.
func PrimeSession(ctx context.Context, c *config.Config) {
	pgpool.Prime(ctx, sessionKey(c, pgutil.LimitsSQL(limitsOf(c))), func(ctx context.Context) (*pgx.Conn, error) {
		return Connect(ctx, c)
	})
}

// sessionKey is the pool key of c's sink sessions with limits.
func sessionKey(c *config.Config, limits string) string {
	return "sink\x00" + c.Sink.DSN + "\x00" + limits
}

// errPageDeadline is the cause of a page context that reached
// sink.page_timeout.
var errPageDeadline = errors.New("sink.page_timeout reached")

// PageContext is the context one page is applied under: ctx with the
// deadline sink.page_timeout of c (none when it is 0). Call cancel when
// the page is done.
func PageContext(ctx context.Context, c *config.Config) (context.Context, context.CancelFunc) {
	if d := c.Sink.PageTimeout.Duration; d > 0 {
		return context.WithTimeoutCause(ctx, d, errPageDeadline)
	}
	return context.WithCancel(ctx)
}

// LockedError says that a statement on the sink gave up waiting for a lock
// another session holds on one of the sink's tables (sink.lock_timeout).
// It wraps the server's error, so the run is classified transient and the
// daemon tries again.
type LockedError struct {
	Tables  []string // the sink tables another session holds a lock on; all of them when none was found
	Holders string   // who holds them, when that could be read
	PIDs    []int32  // their backend pids
	Timeout time.Duration
	Err     error
}

func (e *LockedError) Error() string {
	holders := ""
	if e.Holders != "" {
		holders = " (" + e.Holders + ")"
	}
	terminate := "pid"
	if len(e.PIDs) > 0 {
		terminate = fmt.Sprint(e.PIDs[0])
	}
	return fmt.Sprintf("sink table %s is locked by another session%s and syncd gave up waiting for it after its lock_timeout (sink.lock_timeout: %s): %v; nothing was written and the watermark is where it was; end or commit that session's transaction (SELECT pg_terminate_backend(%s) if it is stuck), or raise sink.lock_timeout; syncd tries again from the watermark at the next run",
		strings.Join(e.Tables, " or "), holders, e.Timeout, e.Err, terminate)
}

// Unwrap gives the server's error.
func (e *LockedError) Unwrap() error { return e.Err }

// PageTimeoutError says that one page did not commit within
// sink.page_timeout. Its fault kind is transient: the daemon tries again.
type PageTimeoutError struct {
	Table   string
	Timeout time.Duration
	Err     error
}

func (e *PageTimeoutError) Error() string {
	return fmt.Sprintf("applying a page to %s did not finish within sink.page_timeout (%s) and was cancelled: %v; that page was rolled back and the watermark is where it was; look for what slows the sink (locks, triggers, an overloaded server), or raise sink.page_timeout; syncd tries again from the watermark at the next run",
		e.Table, e.Timeout, e.Err)
}

// Unwrap gives the error the cancelled page ended with.
func (e *PageTimeoutError) Unwrap() error { return e.Err }

// FaultKind makes a page timeout a transient fault (see package retry).
func (e *PageTimeoutError) FaultKind() string { return "page_timeout" }

// Explain turns a lock timeout or a page deadline met by a statement on
// conn into a one-line error that names the sink table; tables are the
// sink tables the statement may have waited for, the first the main one.
// ctx is the page's context (see PageContext), or the caller's outside a
// page. Any other error comes back as it is.
func Explain(ctx context.Context, conn *pgx.Conn, c *config.Config, tables []string, err error) error {
	if err == nil {
		return nil
	}
	var le *LockedError
	var pe *PageTimeoutError
	if errors.As(err, &le) || errors.As(err, &pe) {
		return err
	}
	switch cause := context.Cause(ctx); {
	case cause == errPageDeadline:
		return &PageTimeoutError{Table: tables[0], Timeout: c.Sink.PageTimeout.Duration, Err: err}
	case cause != nil:
		// The run was stopped: the server's "canceling statement due to
		// user request" is the stop's doing, not a fault.
		return fmt.Errorf("%v: %w", err, cause)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "57014" && strings.Contains(pgErr.Message, "statement timeout") {
		return statementTimeout(ctx, conn, c, tables[0], err)
	}
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		return err
	}
	lockTimeout := c.Sink.LockTimeout.Duration
	e := &LockedError{Tables: tables, Timeout: lockTimeout, Err: err}
	if conn == nil || conn.IsClosed() {
		return e
	}
	// Best effort: the statement has been rolled back and the session is
	// idle again, so it can ask who holds the tables.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var locked []string
	var holders string
	var pids []int32
	qerr := conn.QueryRow(qctx, `
SELECT coalesce(array_agg(DISTINCT t.name ORDER BY t.name), '{}'), coalesce(array_agg(DISTINCT a.pid ORDER BY a.pid), '{}'),
       coalesce(string_agg(DISTINCT format('pid %s, application_name %L, %s since %s, %s', a.pid, a.application_name, a.state,
         to_char(coalesce(a.xact_start, a.backend_start) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), l.mode), '; '), '')
FROM unnest($1::text[]) t(name)
JOIN pg_locks l ON l.relation = to_regclass(t.name) AND l.granted AND l.pid <> pg_backend_pid()
JOIN pg_stat_activity a ON a.pid = l.pid`, quoted(tables)).Scan(&locked, &pids, &holders)
	if qerr == nil && len(locked) > 0 {
		e.Tables, e.Holders, e.PIDs = unquoted(locked, tables), holders, pids
	}
	return e
}

// quoted turns "schema.name" tables into the quoted form to_regclass takes.
func quoted(tables []string) []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = t
		if tb, err := config.ParseTable(t); err == nil {
			out[i] = pgutil.Qualified(tb.Schema, tb.Name)
		}
	}
	return out
}

// unquoted maps the quoted names back to the tables as given.
func unquoted(locked, tables []string) []string {
	q := quoted(tables)
	var out []string
	for _, l := range locked {
		for i := range q {
			if q[i] == l {
				out = append(out, tables[i])
			}
		}
	}
	if len(out) == 0 {
		return tables
	}
	return out
}

// statementTimeout explains a statement on the sink that ran past the
// session's statement_timeout: the stricter of sink.statement_timeout and
// the one the sink's role, database or DSN sets, read back from the
// session (best effort: "" when it cannot be).
func statementTimeout(ctx context.Context, conn *pgx.Conn, c *config.Config, table string, err error) error {
	limit := "its limit"
	if conn != nil && !conn.IsClosed() {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		var s string
		if conn.QueryRow(qctx, "SELECT current_setting('statement_timeout')").Scan(&s) == nil {
			limit = s
		}
		cancel()
	}
	own := "no limit of syncd's own"
	if d := c.Sink.StatementTimeout.Duration; d > 0 {
		own = d.String()
	}
	return fmt.Errorf("a statement on the copy %s ran past the sink session's statement_timeout (%s; sink.statement_timeout: %s, and the sink's role, database or DSN may set a stricter one): %w; "+
		"raise the one that applies (sink.statement_timeout, or ALTER ROLE/ALTER DATABASE ... SET statement_timeout on the sink), or make the statements smaller (source.page_size, source.first_load.chunk_size)",
		table, limit, own, err)
}
