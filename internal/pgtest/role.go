package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// NewRole creates a login role without a password, named prefix and a
// random suffix (roles are cluster-wide, and other tests share the
// server), and when the test ends drops what it owns or was granted in db
// and then the role.
func NewRole(t testing.TB, db *DB, prefix string) string {
	t.Helper()
	name := prefix + "_" + randomHex(6)
	db.Exec(t, "CREATE ROLE "+name+" LOGIN")
	t.Cleanup(func() {
		ctx := context.Background()
		if _, err := db.Pool.Exec(ctx, "DROP OWNED BY "+name); err != nil {
			t.Errorf("drop owned by %s: %v", name, err)
		}
		conn, err := pgx.Connect(ctx, AdminURL(t))
		if err != nil {
			t.Errorf("connect to drop role %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS "+name); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	return name
}
