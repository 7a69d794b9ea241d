// Package runlock makes sure that at most one process syncs a source at a
// time, whatever state file each one uses: a run holds a PostgreSQL
// session advisory lock on the sink database, keyed by the source name and
// what it writes (the sink table, or a campaign's grants table and id), from
// before its first write until its end, and a second lock keyed also by the
// source's identity (the fingerprint of its settings). A second process of
// the same source (another replica, a manual `run --once`) fails to take it
// and skips the run, naming the session that holds it; a process of another
// source with the same name and sink table but other settings gets
// ErrCollision instead, never a silent skip. Two sources that share only a
// name write different tables and do not lock each other out. A session
// lock dies with its connection, so when
// the lock's connection is lost the run must stop writing: when the lock
// shares the sink's connection that happens by itself, and a lock on its
// own connection is checked before every page.
package runlock

import (
	"context"
	"errors"
	"fmt"
	"github.com/syncd/syncd/internal/sourceerr"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgutil"
)

// ErrHeld is wrapped by the error of Acquire when another session holds
// the source's lock.
var ErrHeld = errors.New("another syncd process is syncing this source")

// ErrCollision is wrapped by the error of Acquire when the lock is held by
// a source with the same name and sink table but other settings: two
// different sources, not two processes of one.
var ErrCollision = errors.New("another source with the same name writes the same table")

// ErrLost is wrapped by the error of Check when the lock's connection is gone.
var ErrLost = errors.New("lost the source's advisory lock")

// Target is what a run lock stands for.
type Target struct {
	Source string // the source's name
	// Writes names what the run writes in the sink database: the sink
	// table, schema-qualified (and a campaign's id).
	Writes string
	// Identity is the fingerprint of the source's settings; two processes
	// of one source have the same.
	Identity string
}

// Key is the text hashed into the advisory lock key of t.
func Key(t Target) string { return "syncd:" + t.Source + ":" + t.Writes }

// IdentityKey is the text hashed into the key of the second lock, which
// tells another process of the same source from a different source.
func IdentityKey(t Target) string { return Key(t) + "@" + t.Identity }

// Holder describes the session that holds a lock.
type Holder struct {
	PID             int32
	ApplicationName string
	ClientAddr      string // "local" for a Unix socket
	ClientPort      int32
	BackendStart    time.Time
}

func (h Holder) String() string {
	if h.PID == 0 {
		return "a session that could not be identified"
	}
	return fmt.Sprintf("backend pid %d, application_name %q, client %s:%d, connected since %s",
		h.PID, h.ApplicationName, h.ClientAddr, h.ClientPort, h.BackendStart.UTC().Format(time.RFC3339))
}

// HeldError is returned when another session holds the lock.
type HeldError struct {
	Source string
	Holder Holder
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("source %s is being synced by another syncd process (%s); this run is skipped", e.Source, e.Holder)
}

// Unwrap makes a HeldError an ErrHeld.
func (e *HeldError) Unwrap() error { return ErrHeld }

// CollisionError is returned when the lock is held by a source with the
// same name and sink table but other settings.
type CollisionError struct {
	Target Target
	Holder Holder
}

func (e *CollisionError) Error() string {
	return fmt.Sprintf("source %s: %s is being written by another syncd process (%s) running a source of the same name with other settings (another config file, or an older config); two different sources must not share a name and a sink table: give each its own name and sink.table, or make their configs the same; this run wrote nothing",
		e.Target.Source, e.Target.Writes, e.Holder)
}

// SourceName is the source the error is about (it names it first).
func (e *CollisionError) SourceName() string { return e.Target.Source }

// Unwrap makes a CollisionError an ErrCollision.
func (e *CollisionError) Unwrap() error { return ErrCollision }

// Lock is a held source lock.
type Lock struct {
	conn   *pgx.Conn
	own    bool // conn was opened for the lock and is closed by Release
	target Target
	source string
	// bySession is set by ReleasedBySession: the session releases it.
	bySession bool
}

// Acquire takes the lock of t without waiting. With conn set the lock
// lives on that connection (the sink's own, so that losing one loses both);
// with conn nil it opens a connection to dsn for it.
func Acquire(ctx context.Context, conn *pgx.Conn, dsn string, t Target) (*Lock, error) {
	return acquire(ctx, conn, func(ctx context.Context) (*pgx.Conn, error) { return pgutil.Connect(ctx, dsn, "sink") }, t)
}

// AcquireOwn takes the lock of t without waiting, on a connection of its
// own that dial opens (the sink's, with the sink's session limits).
func AcquireOwn(ctx context.Context, dial func(context.Context) (*pgx.Conn, error), t Target) (*Lock, error) {
	return acquire(ctx, nil, dial, t)
}

func acquire(ctx context.Context, conn *pgx.Conn, dial func(context.Context) (*pgx.Conn, error), t Target) (*Lock, error) {
	name := t.Source
	l := &Lock{conn: conn, target: t, source: name}
	if conn == nil {
		c, err := dial(ctx)
		if err != nil {
			return nil, fmt.Errorf("take the run lock of %s: %w", name, err)
		}
		l.conn, l.own = c, true
	}
	// The identity lock is taken first and released last, so a session
	// holding the main lock always holds its own identity lock: one that
	// holds our identity lock is another process of this source (skip),
	// and one that holds the main lock while we hold our identity lock is
	// a different source (a collision). Taken the other way round, a
	// replica that met another between its two takes saw a collision.
	// Both are taken in one statement (takeSQL).
	var held string
	err := l.conn.QueryRow(ctx, takeSQL, IdentityKey(t), Key(t)).Scan(&held)
	switch {
	case err != nil:
		err = fmt.Errorf("take the run lock of %s on the sink: %w", name, err)
	case held == "identity":
		err = l.heldBy(ctx, IdentityKey(t), true)
	case held == "main":
		err = l.heldBy(ctx, Key(t), false)
	}
	if err != nil {
		if l.own {
			l.conn.Close(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	return l, nil
}

// takeSQL takes the identity lock ($1), then, only when it got it, the
// main lock ($2), and gives the identity lock back when it got that but
// not the main lock, in one round trip: "" when the run holds both,
// "identity" when another session holds the identity lock (this session
// holds neither), "main" when another holds the main lock (this session
// holds neither again). A CASE evaluates its conditions in order and
// stops at the first true one, and a volatile function is never folded
// away, so each lock function runs exactly when the two statements it
// replaces ran it.
const takeSQL = `SELECT CASE
  WHEN NOT pg_try_advisory_lock(hashtextextended($1, 0)) THEN 'identity'
  WHEN pg_try_advisory_lock(hashtextextended($2, 0)) THEN ''
  WHEN pg_advisory_unlock(hashtextextended($1, 0)) IS NOT NULL THEN 'main'
END`

// heldBy says who holds the lock of key: ErrHeld when it is our identity
// lock (same is true: another process of the same source), or the main
// lock released meanwhile; ErrCollision when another session holds the
// main lock while this one held our identity lock (another source).
func (l *Lock) heldBy(ctx context.Context, key string, same bool) error {
	t := l.target
	h, err := holder(ctx, l.conn, key)
	switch {
	case err != nil:
		return &sourceerr.SourceError{Source: t.Source, Err: fmt.Errorf("%w (it could not be identified: %v); this run is skipped", ErrHeld, err)}
	case !same && h.PID != 0:
		return &CollisionError{Target: t, Holder: h}
	}
	return &HeldError{Source: t.Source, Holder: h}
}

// An advisory lock on a bigint key k shows in pg_locks as classid = k>>32,
// objid = k&0xffffffff and objsubid = 1.
const (
	lockKey   = `(SELECT hashtextextended($1, 0) AS k) k`
	lockMatch = `l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid::bigint = (k.k >> 32) & 4294967295
  AND l.objid::bigint = k.k & 4294967295`
)

// holder finds the session holding the advisory lock of key in pg_locks
// (a zero Holder when none does: released meanwhile).
func holder(ctx context.Context, conn *pgx.Conn, key string) (h Holder, err error) {
	var start *time.Time
	err = conn.QueryRow(ctx, `
SELECT a.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local'),
       coalesce(a.client_port, 0), a.backend_start
FROM `+lockKey+`, pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE `+lockMatch+`
LIMIT 1`, key).Scan(&h.PID, &h.ApplicationName, &h.ClientAddr, &h.ClientPort, &start)
	if errors.Is(err, pgx.ErrNoRows) {
		return Holder{}, nil // released meanwhile
	}
	if err != nil {
		return Holder{}, fmt.Errorf("look up the holder of the run lock of %s: %w", key, err)
	}
	if start != nil {
		h.BackendStart = *start
	}
	return h, nil
}

// Check fails with ErrLost when the lock lives on its own connection and
// that connection no longer answers (the server then released the lock).
// A lock on the sink's connection needs no check: a page cannot commit on a
// lost connection.
func (l *Lock) Check(ctx context.Context) error {
	if !l.own {
		return nil
	}
	if err := l.conn.Ping(ctx); err != nil {
		return fmt.Errorf("%w of %s: %w; another process may hold it now, so this run stops", ErrLost, l.source, err)
	}
	return nil
}

// Verify fails with ErrLost when the lock's connection no longer answers,
// whether or not the lock shares the sink's connection: writes that
// commit on other connections (a first load's chunks) are not stopped by
// a lost lock connection, and must ask before they commit.
func (l *Lock) Verify(ctx context.Context) error {
	if err := l.conn.Ping(ctx); err != nil {
		return fmt.Errorf("%w of %s: %w; another process may hold it now, so this run stops", ErrLost, l.source, err)
	}
	return nil
}

// ReleasedBySession tells a lock on a shared connection that whoever ends
// the connection's use releases it, in the same round trip as its other
// cleanup (a pooled session's reset, see pgpool.Session.ReleasesLocks):
// Release then sends nothing. The lock stays held until then, a moment
// longer than Release would have held it.
func (l *Lock) ReleasedBySession() {
	if !l.own {
		l.bySession = true
	}
}

// Release gives the lock back (and closes its own connection); a lock
// ReleasedBySession is left to its session.
func (l *Lock) Release(ctx context.Context) error {
	var err error
	if !l.conn.IsClosed() && !l.bySession {
		_, err = l.conn.Exec(ctx, "SELECT pg_advisory_unlock(hashtextextended($1, 0)), pg_advisory_unlock(hashtextextended($2, 0))", Key(l.target), IdentityKey(l.target))
	}
	if l.own {
		if cerr := l.conn.Close(ctx); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("release the run lock of %s: %w", l.source, err)
	}
	return nil
}
