package pgutil

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DurableSQL, run inside a transaction right before its COMMIT (what the
// transaction ran before cannot undo it then), makes that COMMIT
// return only once its commit record is flushed to disk, whatever
// synchronous_commit the server, the database, the role or the DSN's
// options set: 'off' is raised to 'on' for this transaction only (SET
// LOCAL, so it is safe behind a transaction pooler and never leaks into
// the session). 'local', 'remote_write', 'on' and 'remote_apply' already
// wait for the local flush and are left as the operator set them. A
// transaction that wrote no WAL (an upsert that changed nothing, SELECT
// txid_current() alone) flushes nothing at COMMIT, whatever the setting:
// callers that need earlier commits flushed must write something.
const DurableSQL = "SELECT set_config('synchronous_commit', 'on', true) WHERE current_setting('synchronous_commit') = 'off'"

// Durable runs DurableSQL in tx.
func Durable(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, DurableSQL); err != nil {
		return fmt.Errorf("make the commit durable: %w", err)
	}
	return nil
}

// ExecDurable runs one statement in its own transaction whose commit is
// durable (see DurableSQL).
func ExecDurable(ctx context.Context, conn *pgx.Conn, sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var err error
		if tag, err = tx.Exec(ctx, sql, args...); err != nil {
			return err
		}
		return Durable(ctx, tx)
	})
	return tag, err
}
