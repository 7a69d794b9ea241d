// Package runlock makes sure that at most one process syncs a source at a
// time, whatever state file each one uses: a run holds a PostgreSQL
// session advisory lock on the sink database, keyed by the source name, from
// before its first write until its end. A second process (another replica,
// a manual `run --once`) fails to take it and skips the run, naming the
// session that holds it. A session lock dies with its connection, so when
// the lock's connection is lost the run must stop writing: when the lock
// shares the sink's connection that happens by itself, and a lock on its
// own connection is checked before every page.
package runlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgutil"
)

// ErrHeld is wrapped by the error of Acquire when another session holds
// the source's lock.
var ErrHeld = errors.New("another syncd process is syncing this source")

// ErrLost is wrapped by the error of Check when the lock's connection is gone.
var ErrLost = errors.New("lost the source's advisory lock")

// Key is the text hashed into the advisory lock key of source name.
func Key(name string) string { return "syncd:" + name }

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

// Lock is a held source lock.
type Lock struct {
	conn   *pgx.Conn
	own    bool // conn was opened for the lock and is closed by Release
	source string
}

// Acquire takes the lock of source name without waiting. With conn set the
// lock lives on that connection (the sink's own, so that losing one loses
// both); with conn nil it opens a connection to dsn for it.
func Acquire(ctx context.Context, conn *pgx.Conn, dsn, name string) (*Lock, error) {
	l := &Lock{conn: conn, source: name}
	if conn == nil {
		c, err := pgutil.Connect(ctx, dsn, "sink")
		if err != nil {
			return nil, fmt.Errorf("take the run lock of %s: %w", name, err)
		}
		l.conn, l.own = c, true
	}
	var ok bool
	err := l.conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", Key(name)).Scan(&ok)
	if err == nil && !ok {
		h, herr := holder(ctx, l.conn, name)
		if herr != nil {
			err = fmt.Errorf("source %s: %w (it could not be identified: %v); this run is skipped", name, ErrHeld, herr)
		} else {
			err = &HeldError{Source: name, Holder: h}
		}
	} else if err != nil {
		err = fmt.Errorf("take the run lock of %s on the sink: %w", name, err)
	}
	if err != nil {
		if l.own {
			l.conn.Close(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	return l, nil
}

// holder finds the session holding the lock of name in pg_locks. An
// advisory lock on a bigint key k shows as classid = k>>32, objid = k&0xffffffff
// and objsubid = 1.
func holder(ctx context.Context, conn *pgx.Conn, name string) (Holder, error) {
	var h Holder
	var start *time.Time
	err := conn.QueryRow(ctx, `
WITH k AS (SELECT hashtextextended($1, 0) AS k)
SELECT a.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local'),
       coalesce(a.client_port, 0), a.backend_start
FROM k, pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid::bigint = (k.k >> 32) & 4294967295
  AND l.objid::bigint = k.k & 4294967295
LIMIT 1`, Key(name)).Scan(&h.PID, &h.ApplicationName, &h.ClientAddr, &h.ClientPort, &start)
	if errors.Is(err, pgx.ErrNoRows) {
		return Holder{}, nil // released meanwhile
	}
	if err != nil {
		return Holder{}, fmt.Errorf("look up the holder of the run lock of %s: %w", name, err)
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

// Release gives the lock back (and closes its own connection).
func (l *Lock) Release(ctx context.Context) error {
	var err error
	if !l.conn.IsClosed() {
		_, err = l.conn.Exec(ctx, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", Key(l.source))
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
