package pgutil_test

import (
	"context"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/pgutil"
)

// Every connection syncd opens is remembered as its pid with the backend
// start time pg_stat_activity shows for it: the read bound leaves exactly
// these sessions out.
func TestOwnSessionsNameEachConnection(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	conn, err := pgutil.Connect(ctx, db.URL, "source")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var start time.Time
	if err := conn.QueryRow(ctx, "SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&start); err != nil {
		t.Fatal(err)
	}
	pid := int32(conn.PgConn().PID())
	pids, starts := pgutil.OwnSessions()
	for i := range pids {
		if pids[i] == pid {
			if !starts[i].Equal(start) {
				t.Fatalf("own session pid %d recorded with backend start %s; pg_stat_activity says %s", pid, starts[i], start)
			}
			return
		}
	}
	t.Fatalf("own sessions %v do not hold the connection's pid %d", pids, pid)
}
