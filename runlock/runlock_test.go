package runlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/runlock"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var orders = runlock.Target{Source: "orders", Writes: "public.orders_copy", Identity: "f1"}

// Two different sources that share a name: writing different tables they
// do not lock each other out; writing the same table with other settings,
// the second gets ErrCollision (not a silent skip) naming the holder.
func TestSameNameOtherTableOrSettings(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	first, err := runlock.Acquire(ctx, nil, db.URL, orders)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(ctx)
	other := orders
	other.Writes, other.Identity = "public.orders_v2", "f2"
	l, err := runlock.Acquire(ctx, nil, db.URL, other)
	if err != nil {
		t.Fatalf("same name, other sink table: %v, want the lock", err)
	}
	l.Release(ctx)

	changed := orders
	changed.Identity = "f3"
	_, err = runlock.Acquire(ctx, nil, db.URL, changed)
	var coll *runlock.CollisionError
	if !errors.Is(err, runlock.ErrCollision) || errors.Is(err, runlock.ErrHeld) || !errors.As(err, &coll) || coll.Holder.PID == 0 {
		t.Fatalf("same name and table, other settings: %v, want ErrCollision naming the holder", err)
	}
	if !strings.Contains(err.Error(), "source orders: public.orders_copy is being written by another syncd process (backend pid") {
		t.Fatalf("message: %v", err)
	}
	// The refused process holds nothing: once the first releases, it runs.
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := runlock.Acquire(ctx, nil, db.URL, changed)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again.Release(ctx)
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d advisory locks left (%v), want 0", n, err)
	}
}

// A second Acquire of the same source fails with ErrHeld naming the
// holding backend; another source is independent; after Release the lock
// can be taken again.
func TestAcquireHeldAndRelease(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	first, err := runlock.Acquire(ctx, nil, db.URL, orders)
	if err != nil {
		t.Fatal(err)
	}
	var holderPID int32
	if err := db.Pool.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&holderPID); err != nil {
		t.Fatal(err)
	}
	_, err = runlock.Acquire(ctx, nil, db.URL, orders)
	var held *runlock.HeldError
	if !errors.Is(err, runlock.ErrHeld) || !errors.As(err, &held) || held.Holder.PID != holderPID || held.Holder.ApplicationName != "syncd" || held.Holder.ClientAddr != "127.0.0.1" {
		t.Fatalf("second acquire: %v (holder %+v), want ErrHeld naming pid %d", err, held, holderPID)
	}
	other, err := runlock.Acquire(ctx, nil, db.URL, runlock.Target{Source: "customers", Writes: "public.copy", Identity: "c1"})
	if err != nil {
		t.Fatalf("another source's lock: %v", err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := runlock.Acquire(ctx, nil, db.URL, orders)
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A lock on its own connection reports its loss when the server ends that
// session, and the lock is then free for another process.
func TestCheckReportsALostLock(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	l, err := runlock.Acquire(ctx, nil, db.URL, orders)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if err := l.Check(ctx); err != nil {
		t.Fatalf("check of a held lock: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`); err != nil {
		t.Fatal(err)
	}
	if err := l.Check(ctx); !errors.Is(err, runlock.ErrLost) {
		t.Fatalf("check after the session ended: %v, want ErrLost", err)
	}
	l2, err := runlock.Acquire(ctx, nil, db.URL, orders)
	if err != nil {
		t.Fatalf("the lost lock is not free: %v", err)
	}
	l2.Release(ctx)
}

// A lock on the sink's own connection lives and dies with it: no separate
// session, and Check has nothing to do.
func TestLockOnSharedConnection(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	l, err := runlock.Acquire(ctx, conn, "", orders)
	if err != nil {
		t.Fatal(err)
	}
	var pid int32
	if err := db.Pool.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&pid); err != nil || pid != int32(conn.PgConn().PID()) {
		t.Fatalf("lock held by pid %d (%v), want the shared connection's %d", pid, err, conn.PgConn().PID())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if conn.IsClosed() {
		t.Fatal("Release closed a connection it does not own")
	}
}

// A run refused on a session it shares (the sink's) leaves that session
// holding no lock, whichever lock another session held: the identity lock
// (another process of the source) or the main lock with another identity
// (a collision: the identity lock this session took is given back).
func TestRefusedOnASharedSessionHoldsNothing(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	first, err := runlock.Acquire(ctx, nil, db.URL, orders)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(ctx)
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	changed := orders
	changed.Identity = "f3"
	for _, tc := range []struct {
		target runlock.Target
		want   error
	}{{orders, runlock.ErrHeld}, {changed, runlock.ErrCollision}} {
		if _, err := runlock.Acquire(ctx, conn, "", tc.target); !errors.Is(err, tc.want) {
			t.Fatalf("identity %s: %v, want %v", tc.target.Identity, err, tc.want)
		}
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1`, conn.PgConn().PID()).Scan(&n); err != nil || n != 0 {
			t.Fatalf("identity %s: the refused session holds %d advisory locks (%v), want 0", tc.target.Identity, n, err)
		}
	}
	// And it takes both once the holder let go.
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := runlock.Acquire(ctx, conn, "", changed)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = $1`, conn.PgConn().PID()).Scan(&n); err != nil || n != 2 {
		t.Fatalf("the session holds %d advisory locks (%v), want 2", n, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
