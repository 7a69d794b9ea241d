// Package pgtest gives tests a real PostgreSQL: a fresh database per test on
// the server named by SYNCD_TEST_DATABASE_URL (default: the local server on
// 127.0.0.1:5432, user postgres), or on a throwaway cluster started with
// initdb/pg_ctl when no server answers. Everything it makes it drops.
package pgtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/internal/pgutil"
	"go.uber.org/goleak"
)

// EnvURL names the variable that points tests at a server's admin database.
const EnvURL = "SYNCD_TEST_DATABASE_URL"

const defaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var (
	adminOnce sync.Once
	adminURL  string
	adminErr  error
	cluster   *Cluster
)

// Main runs a package's tests, runs cleanups (for example removing a binary
// built for the tests), stops a throwaway cluster if one was started, and
// fails on leaked goroutines. Call it from TestMain.
func Main(m *testing.M, cleanups ...func()) {
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	if cluster != nil {
		cluster.Destroy(context.Background())
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// AdminURL returns the URL of a server's maintenance database, starting a
// throwaway cluster when the configured server does not answer.
func AdminURL(t testing.TB) string {
	t.Helper()
	adminOnce.Do(func() {
		u := cmp.Or(os.Getenv(EnvURL), defaultURL)
		if answers(u) {
			adminURL = u
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := StartCluster(ctx)
		if err != nil {
			adminErr = fmt.Errorf("no PostgreSQL answers at %s and a throwaway cluster could not start: %w", pgutil.Describe(u), err)
			return
		}
		cluster = c
		adminURL = c.URL()
	})
	if adminErr != nil {
		t.Fatal(adminErr)
	}
	return adminURL
}

// DB is one test database.
type DB struct {
	Name string
	URL  string
	Pool *pgxpool.Pool
}

// NewDB creates a database with a unique name, returns its URL and a pool,
// and drops it when the test ends.
func NewDB(t testing.TB) *DB {
	t.Helper()
	return NewDBOn(t, AdminURL(t))
}

// NewDBOn is NewDB on the server whose maintenance database is admin (a
// Cluster's URL, for example).
func NewDBOn(t testing.TB, admin string) *DB {
	t.Helper()
	ctx := context.Background()
	name := "syncd_test_" + randomHex(6)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to test server: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database %s: %v", name, err)
	}
	dbURL := pgutil.WithDatabase(admin, name)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatalf("pool for %s: %v", name, err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("connect to drop %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	return &DB{Name: name, URL: dbURL, Pool: pool}
}

// Exec runs SQL statements on the database and fails the test on error.
func (d *DB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := d.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
