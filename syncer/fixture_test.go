package syncer_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgpool"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// fixture is one test database holding the source table public.src and its
// copy public.dst, a state file and a log buffer.
type fixture struct {
	db    *pgtest.DB
	store *watermark.Store
	dir   string
	logs  *testutil.Log
	name  string
	// aheadWait and holdWarn are the run's Options.AheadWait and
	// Options.HoldWarnAfter (zero: the defaults).
	aheadWait, holdWarn time.Duration
	// pool and schema, when set (pooled), are the runs' Options.Pool and
	// Options.Schema, as the daemon gives them.
	pool   *pgpool.Pool
	schema *syncer.SchemaCache
}

// pooled makes the fixture's runs take their sessions from a pool and keep
// what they read from the catalogs between runs, as the daemon's do.
func (f *fixture) pooled(t *testing.T) {
	f.pool, f.schema = pgpool.New(pgpool.Options{MaxIdle: 1}), &syncer.SchemaCache{}
	t.Cleanup(f.pool.Close)
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureOf(t, "timestamptz NOT NULL DEFAULT now()")
}

// newFixtureOf makes the source table with updated_at of the given type.
func newFixtureOf(t *testing.T, updatedAt string) *fixture {
	t.Helper()
	return newFixtureOn(t, pgtest.NewDB(t), updatedAt)
}

// newFixtureOn makes the fixture in db.
func newFixtureOn(t *testing.T, db *pgtest.DB, updatedAt string) *fixture {
	t.Helper()
	db.Exec(t, `CREATE TABLE src (id int PRIMARY KEY, updated_at `+updatedAt+`, v text NOT NULL)`)
	db.Exec(t, `CREATE INDEX ON src (updated_at, id)`)
	dir := t.TempDir()
	store, err := watermark.Open(filepath.Join(dir, "state.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return &fixture{db: db, store: store, dir: dir, logs: &testutil.Log{}, name: "src-" + db.Name}
}

// config writes a source file with the given source keys (one "key: value"
// each) and loads it.
func (f *fixture) config(t *testing.T, sourceDSN string, keys ...string) *config.Config {
	t.Helper()
	return f.load(t, "source.yaml", "public.src", "[updated_at, id]", sourceDSN, keys)
}

// load writes a source file of table with cursor, reading through
// sourceDSN and writing public.dst, with the given source keys, and loads
// it.
func (f *fixture) load(t *testing.T, file, table, cursor, sourceDSN string, keys []string) *config.Config {
	t.Helper()
	var extra strings.Builder
	for _, k := range keys {
		extra.WriteString("  " + k + "\n")
	}
	doc := fmt.Sprintf("name: %s\nsource:\n  dsn: %q\n  table: %s\n  cursor: %s\n%ssink:\n  dsn: %q\n  table: public.dst\n",
		f.name, sourceDSN, table, cursor, extra.String(), f.db.URL)
	file = filepath.Join(f.dir, file)
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.LoadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *fixture) run(t *testing.T, c *config.Config) syncer.Result {
	t.Helper()
	log := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	res, err := syncer.Run(context.Background(), f.options(c, log))
	if err != nil {
		t.Fatalf("run: %v\nlog:\n%s", err, f.logs)
	}
	return res
}

// options are the options of a run of c by the fixture.
func (f *fixture) options(c *config.Config, log *slog.Logger) syncer.Options {
	return syncer.Options{Config: c, Store: f.store, Logger: log, AheadWait: f.aheadWait, HoldWarnAfter: f.holdWarn, Pool: f.pool, Schema: f.schema}
}

func (f *fixture) watermark(t *testing.T) []string {
	t.Helper()
	st, _, err := f.store.Get(f.name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Cursor
}

// rows reads a table as id -> "updated_at|v", exact server text (NULL for
// a NULL updated_at).
func (f *fixture) rows(t *testing.T, table string) map[int]string {
	t.Helper()
	rows, err := f.db.Pool.Query(context.Background(), "SELECT id, coalesce(updated_at::text, 'NULL') || '|' || v FROM "+table)
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	out := map[int]string{}
	var id int
	var val string
	_, err = pgx.ForEachRow(rows, []any{&id, &val}, func() error {
		out[id] = val
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return out
}

// diff compares the copy with the source row by row and returns the ids
// whose row is missing or different in the copy (or only in the copy).
func (f *fixture) diff(t *testing.T) []int {
	t.Helper()
	src, dst := f.rows(t, "src"), f.rows(t, "dst")
	var ids []int
	for id, v := range src {
		if dst[id] != v {
			ids = append(ids, id)
		}
	}
	for id := range dst {
		if _, ok := src[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func (f *fixture) assertSame(t *testing.T) {
	t.Helper()
	if d := f.diff(t); len(d) > 0 {
		t.Fatalf("copy differs from the source at ids %v\nsource: %v\ncopy:   %v", d, f.rows(t, "src"), f.rows(t, "dst"))
	}
}

// session is a second connection playing another application's transaction.
type session struct {
	conn  *pgx.Conn
	pid   int32
	since time.Time
}

// begin opens a transaction on its own connection (as user, or the test's
// superuser when user is "") and returns its pid and start time.
func begin(t *testing.T, dbURL string) *session {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	s := &session{conn: conn}
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid(), now()").Scan(&s.pid, &s.since); err != nil {
		t.Fatal(err)
	}
	s.since = s.since.UTC()
	return s
}

// clockPast waits until the source's clock has passed at, so that the rows
// the next statement stamps with now() are stamped after it: the test
// waits for what the bound compares, not for a guessed time.
func (f *fixture) clockPast(t *testing.T, at time.Time) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "the source's clock to pass "+at.Format(time.RFC3339Nano), func() bool {
		var past bool
		if err := f.db.Pool.QueryRow(context.Background(), "SELECT clock_timestamp() > $1", at).Scan(&past); err != nil {
			t.Fatal(err)
		}
		return past
	})
}

func (s *session) exec(t *testing.T, sql string) {
	t.Helper()
	if _, err := s.conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}
