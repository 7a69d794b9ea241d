package retry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/retry"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/sink"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Errors produced by a real server are classified by their SQLSTATE or by
// the connection failure behind them.
func TestClassifyRealErrors(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	conn := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.WithoutCancel(ctx)) })
		return c
	}
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	db.Exec(t, `INSERT INTO t VALUES (1)`)

	check := func(name string, err error, kind string, transient bool) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		f := retry.Classify(err)
		if f.Kind != kind || f.Transient != transient {
			t.Errorf("%s: %v classified %+v, want kind %s transient %v", name, err, f, kind, transient)
		}
	}

	c := conn()
	_, err := c.Exec(ctx, `SET statement_timeout = '10ms'; SELECT pg_sleep(1)`)
	check("statement timeout", err, retry.KindStatementTimeout, true)

	_, err = c.Exec(ctx, `SELECT * FROM no_such_table`)
	check("undefined table", err, retry.KindUndefinedObject, false)

	// A lock timeout: another session holds the row.
	holder := conn()
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT * FROM t WHERE id = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	_, err = c.Exec(ctx, `SET statement_timeout = 0; SET lock_timeout = '20ms'; UPDATE t SET id = 1 WHERE id = 1`)
	check("lock timeout", err, retry.KindLockTimeout, true)

	// A serialization failure between two repeatable-read transactions.
	a, b := conn(), conn()
	ta, _ := a.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	defer ta.Rollback(ctx)
	tb, _ := b.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	defer tb.Rollback(ctx)
	db.Exec(t, `CREATE TABLE s (id int PRIMARY KEY, v int)`)
	db.Exec(t, `INSERT INTO s VALUES (1, 0)`)
	if _, err := ta.Exec(ctx, `SELECT * FROM s`); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `UPDATE s SET v = 1 WHERE id = 1`)
	_, err = ta.Exec(ctx, `UPDATE s SET v = 2 WHERE id = 1`)
	check("serialization failure", err, retry.KindSerialization, true)

	// The server ends the session mid-query.
	victim := conn()
	pid := victim.PgConn().PID()
	sleeping := make(chan error, 1)
	go func() {
		_, err := victim.Exec(ctx, `SELECT pg_sleep(60)`)
		sleeping <- err
	}()
	testutil.Eventually(t, 30*time.Second, "the victim's query to run", func() bool {
		var running bool
		if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE '%pg_sleep%')`, pid).Scan(&running); err != nil {
			t.Fatal(err)
		}
		return running
	})
	db.Exec(t, `SELECT pg_terminate_backend($1)`, pid)
	check("terminated mid-query", <-sleeping, retry.KindAdminShutdown, true)
	_, err = victim.Exec(ctx, `SELECT 1`)
	check("query on the lost connection", err, retry.KindConnection, true)

	_, err = pgx.Connect(ctx, "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=2")
	check("connection refused", err, retry.KindConnection, true)

	_, err = pgx.Connect(ctx, "postgres://postgres@127.0.0.1:5432/no_such_database_x?sslmode=disable")
	check("missing database", err, retry.KindUndefinedObject, false)

	check("config", &config.FieldError{File: "a.yaml", Key: "source.table", Msg: "missing"}, retry.KindConfig, false)
	check("plain", errors.New("something else"), retry.KindOther, false)
}

func TestBackoffGrowsWithJitterAndCap(t *testing.T) {
	b := retry.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Attempts: 5}
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 9: time.Second} {
		for range 50 {
			d := b.Delay(n)
			if d < want/2 || d > want {
				t.Fatalf("delay after failure %d = %s, want within [%s, %s]", n, d, want/2, want)
			}
		}
	}
	stop := make(chan struct{})
	close(stop)
	start := time.Now()
	if retry.Sleep(context.Background(), stop, time.Minute) || time.Since(start) > time.Second {
		t.Error("a stop request does not cut the pause short")
	}
}

// A page that outlasted sink.page_timeout is a transient fault of its own
// kind, also though its cause is a cancelled statement or context; a locked
// sink table keeps the kind of the server's error, lock_timeout.
func TestClassifySinkTimeouts(t *testing.T) {
	cancelled := &pgconn.PgError{Code: "57014", Message: "canceling statement due to user request"}
	f := retry.Classify(fmt.Errorf("sync orders: %w", &sink.PageTimeoutError{Table: "public.copy", Timeout: time.Minute, Err: cancelled}))
	if f.Kind != "page_timeout" || !f.Transient {
		t.Errorf("page timeout classified %+v, want transient page_timeout", f)
	}
	f = retry.Classify(&sink.PageTimeoutError{Table: "public.copy", Timeout: time.Minute, Err: context.DeadlineExceeded})
	if f.Kind != "page_timeout" || !f.Transient {
		t.Errorf("page timeout by a deadline classified %+v, want transient page_timeout", f)
	}
	f = retry.Classify(&sink.LockedError{Tables: []string{"public.copy"}, Timeout: time.Second, Err: &pgconn.PgError{Code: "55P03"}})
	if f.Kind != retry.KindLockTimeout || !f.Transient {
		t.Errorf("locked copy classified %+v, want transient lock_timeout", f)
	}
}
