package sink

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/config"
)

// ReadOnlyError says that the sink database refused a write because the
// session is read-only: the DSN reaches a hot standby, or
// default_transaction_read_only is on for the sink role or database. No
// run can succeed until that changes, so it is not retried as a fault.
type ReadOnlyError struct {
	Key  string // the config key of the sink's DSN (sink.dsn or sink.dsn_file)
	File string
	Line int
	Err  error
}

func (e *ReadOnlyError) Error() string {
	where := e.Key
	if e.File != "" {
		where = fmt.Sprintf("%s (%s:%d)", e.Key, e.File, e.Line)
	}
	return fmt.Sprintf("the sink database is read-only for syncd (%v): %s reaches a hot standby, or default_transaction_read_only is on for its role or database; point %s at the primary, or run ALTER ROLE ... SET default_transaction_read_only = off for the sink user",
		e.Err, where, e.Key)
}

func (e *ReadOnlyError) Unwrap() error { return e.Err }

// ExplainReadOnly turns a write refused with SQLSTATE 25006
// (read_only_sql_transaction) anywhere in c's run into a ReadOnlyError that
// names the sink's DSN key; any other error comes back as it is. The
// source is only read, so only the sink can refuse so.
func ExplainReadOnly(c *config.Config, err error) error {
	var pgErr *pgconn.PgError
	var ro *ReadOnlyError
	if err == nil || errors.As(err, &ro) || !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		return err
	}
	key := c.DSNKey("sink")
	return &ReadOnlyError{Key: key, File: c.File, Line: c.Lines[key], Err: err}
}
