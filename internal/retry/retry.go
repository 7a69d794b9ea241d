// Package retry owns syncd's one decision about a failed run: is the fault
// transient (a server restarting, a connection lost, a serialization failure,
// a lock or statement timeout), so that the same run is worth trying again
// after a pause, or permanent (a missing table, a missing privilege, a bad
// config), so that only a change by a person fixes it. Every PostgreSQL
// error is classified here and nowhere else, and the pause between tries is
// an exponential backoff with jitter that a stop request interrupts.
package retry

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/config"
)

// Fault is the classification of one error.
type Fault struct {
	// Kind is a short stable label, used in logs and as a metric label.
	Kind string
	// Transient is true when trying the run again may succeed by itself.
	Transient bool
}

// Kinds of faults.
const (
	KindConnection       = "connection"
	KindAdminShutdown    = "admin_shutdown"
	KindSerialization    = "serialization"
	KindDeadlock         = "deadlock"
	KindLockTimeout      = "lock_timeout"
	KindStatementTimeout = "statement_timeout"
	KindTooManyConns     = "too_many_connections"
	KindUndefinedObject  = "undefined_object"
	KindPermission       = "permission"
	KindAuthentication   = "authentication"
	KindConfig           = "config"
	KindCanceled         = "canceled"
	KindOther            = "other"
)

// transientCodes are the SQLSTATEs after which a new attempt can succeed.
var transientCodes = map[string]string{
	"57P01": KindAdminShutdown,    // admin_shutdown: server stopping, or pg_terminate_backend
	"57P02": KindAdminShutdown,    // crash_shutdown
	"57P03": KindAdminShutdown,    // cannot_connect_now: server starting or in recovery
	"40001": KindSerialization,    // serialization_failure
	"40P01": KindDeadlock,         // deadlock_detected
	"55P03": KindLockTimeout,      // lock_not_available (lock_timeout)
	"57014": KindStatementTimeout, // query_canceled (statement_timeout)
	"53300": KindTooManyConns,     // too_many_connections
	"53400": KindTooManyConns,     // configuration_limit_exceeded
}

// permanentCodes name the usual permanent errors; any other SQLSTATE not in
// transientCodes is permanent too, with kind "other".
var permanentCodes = map[string]string{
	"42P01": KindUndefinedObject, // undefined_table
	"42703": KindUndefinedObject, // undefined_column
	"42883": KindUndefinedObject, // undefined_function
	"3F000": KindUndefinedObject, // invalid_schema_name
	"3D000": KindUndefinedObject, // invalid_catalog_name (no such database)
	"42501": KindPermission,      // insufficient_privilege
	"28000": KindAuthentication,  // invalid_authorization_specification
	"28P01": KindAuthentication,  // invalid_password
}

// Classify says what kind of fault err is and whether it is transient.
func Classify(err error) Fault {
	if err == nil {
		return Fault{}
	}
	// An error that knows its kind of transient fault (a page that
	// outlasted sink.page_timeout) says so itself.
	var fk interface{ FaultKind() string }
	if errors.As(err, &fk) {
		return Fault{Kind: fk.FaultKind(), Transient: true}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if kind, ok := transientCodes[pgErr.Code]; ok {
			return Fault{Kind: kind, Transient: true}
		}
		if pgErr.Code[:2] == "08" { // connection_exception class
			return Fault{Kind: KindConnection, Transient: true}
		}
		if kind, ok := permanentCodes[pgErr.Code]; ok {
			return Fault{Kind: kind}
		}
		return Fault{Kind: KindOther}
	}
	if errors.Is(err, config.ErrInvalid) {
		return Fault{Kind: KindConfig}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Fault{Kind: KindCanceled}
	}
	if isConnectionLoss(err) {
		return Fault{Kind: KindConnection, Transient: true}
	}
	return Fault{Kind: KindOther}
}

// isConnectionLoss recognises a connection that could not be made or was
// lost mid-query: refused, reset, closed, a dial timeout, an EOF.
func isConnectionLoss(err error) bool {
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	switch {
	case errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH),
		errors.As(err, &netErr), errors.As(err, &connectErr),
		pgconn.SafeToRetry(err):
		return true
	}
	return false
}

// Backoff is an exponential backoff with equal jitter: each pause is
// random in the upper half of its exponential step (see Delay).
type Backoff struct {
	// Initial is the first pause's upper bound (default 1s).
	Initial time.Duration
	// Max caps every pause (default 1m).
	Max time.Duration
	// Attempts is how many tries a run gets in all, the first included
	// (default 10).
	Attempts int
}

// Defaults fills the zero fields.
func (b Backoff) Defaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = time.Second
	}
	if b.Max <= 0 {
		b.Max = time.Minute
	}
	if b.Attempts <= 0 {
		b.Attempts = 10
	}
	return b
}

// Delay is the pause after failed attempt n (1 for the first failure):
// a random duration in [d/2, d] where d = Initial*2^(n-1), capped at Max.
func (b Backoff) Delay(n int) time.Duration {
	b = b.Defaults()
	d := b.Initial
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	half := d / 2
	return half + rand.N(d-half+1)
}

// Sleep waits for d, or until stop is closed or ctx is done; it reports
// whether the whole pause elapsed.
func Sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-ctx.Done():
		return false
	}
}
