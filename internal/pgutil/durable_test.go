package pgutil_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/pgutil"
)

// TestDurableRaisesOnlyOff: inside a transaction, DurableSQL turns a
// session's synchronous_commit = off (as a server, database, role or DSN
// setting leaves it) into on, leaves every setting that already waits for
// the local flush as it is, and changes nothing after the transaction.
func TestDurableRaisesOnlyOff(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	conn, err := pgutil.Connect(ctx, db.URL, "sink")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	show := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		var v string
		if err := q.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for session, inTx := range map[string]string{
		"off": "on", "local": "local", "remote_write": "remote_write", "on": "on", "remote_apply": "remote_apply",
	} {
		if _, err := conn.Exec(ctx, "SET synchronous_commit = "+session); err != nil {
			t.Fatal(err)
		}
		var got string
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if err := pgutil.Durable(ctx, tx); err != nil {
				return err
			}
			got = show(tx)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got != inTx {
			t.Errorf("session %s: synchronous_commit in the transaction is %s, want %s", session, got, inTx)
		}
		if after := show(conn); after != session {
			t.Errorf("session %s: after the transaction the session has %s", session, after)
		}
	}
	// ExecDurable commits its statement.
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	if _, err := pgutil.ExecDurable(ctx, conn, "CREATE TABLE durable_probe AS SELECT $1::int AS n", 7); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, "SELECT n FROM durable_probe").Scan(&n); err != nil || n != 7 {
		t.Fatalf("ExecDurable did not commit: n=%d err=%v", n, err)
	}
}
