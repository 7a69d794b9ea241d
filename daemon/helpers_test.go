package daemon_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testbin"
	"github.com/syncd/syncd/internal/testutil"
)

// syncd is the binary built once for the package's tests; no output of it
// may show the DSN password (secret), and a started process's output goes
// to the test log when the test fails.
var syncd testutil.Binary

func TestMain(m *testing.M) {
	binary, cleanup := testbin.Build()
	syncd = testutil.Binary{Path: binary, Forbid: []string{secret}, ShowOutput: true}
	pgtest.Main(m, cleanup)
}

// fixture is a source table and its copy in one test database.
type fixture struct {
	db  *pgtest.DB
	dir string // config folder
}

// slowSQL creates slow(ms): see newFixture.
const slowSQL = `CREATE FUNCTION slow(ms float8) RETURNS boolean LANGUAGE plpgsql VOLATILE COST 1000000 AS 'BEGIN PERFORM pg_sleep(ms / 1000.0); RETURN true; END'`

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{db: pgtest.NewDB(t), dir: t.TempDir()}
	// slow(ms) lets a test stretch each page: a source's where clause calls
	// it for every row it reads. It is costed as what it is, expensive, and
	// in PL/pgSQL so that the planner cannot inline it and forget that:
	// inlined as pg_sleep(), it cost less than a comparison with now(), and
	// on this machine's tables, which autovacuum never ANALYZEs, the first
	// page of a run read every row up to the read bound by a bitmap scan
	// and a sort, each row paying its sleep. A killed process's page read
	// then ran on for 8 to 20 seconds, holding the next process's read
	// bound back; with statistics, the look for rows stamped ahead of the
	// clock called slow() before its range on every row of the table.
	f.db.Exec(t, slowSQL)
	return f
}

// table creates source table name with rows 1..n.
func (f *fixture) table(t *testing.T, name string, n int) {
	t.Helper()
	f.db.Exec(t, fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), v text)`, name))
	f.db.Exec(t, fmt.Sprintf(`CREATE INDEX ON %s (updated_at, id)`, name))
	f.insert(t, name, 1, n)
}

// insert adds rows from..to to table name.
func (f *fixture) insert(t *testing.T, name string, from, to int) {
	t.Helper()
	f.db.Exec(t, fmt.Sprintf(`INSERT INTO %s (id, v) SELECT g, 'v' || g FROM generate_series($1::bigint, $2::bigint) g`, name), from, to)
}

// source writes the config file of a source reading table src into copy dst.
func (f *fixture) source(t *testing.T, file, name, src, dst, extra string) string {
	t.Helper()
	yaml := fmt.Sprintf(`name: %s
source:
  dsn: %s
  table: public.%s
  cursor: [updated_at, id]
%s
sink:
  dsn: %s
  table: public.%s
  key: [id]
`, name, f.dsn(), src, indent(extra), f.dsn(), dst)
	path := filepath.Join(f.dir, file)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// indent puts source-level keys (one per line, "key: value") under source:,
// and top-level ones (prefixed "^") at the top level.
func indent(extra string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(extra), "\n") {
		if l == "" {
			continue
		}
		if top, ok := strings.CutPrefix(l, "^"); ok {
			b.WriteString(top + "\n")
			continue
		}
		b.WriteString("  " + l + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// secret is the password every test DSN carries (the test server trusts
// local connections, so it is never checked): no output may show it.
const secret = "pw-NEVER-PRINTED-42"

// dsn is the test database's URL with the password in it.
func (f *fixture) dsn() string {
	return strings.Replace(f.db.URL, "postgres@", "postgres:"+secret+"@", 1)
}

func (f *fixture) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := f.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		if strings.Contains(err.Error(), "does not exist") {
			return 0
		}
		t.Fatal(err)
	}
	return n
}

// sessions describes the other sessions open on the test database (pid,
// application_name, state, how long their transaction has been open, what
// they wait for, their statement), for a failure message: a session of a
// killed process still running its statement holds the next process's
// read bound back, and the message should say which.
func (f *fixture) sessions(t *testing.T) string {
	t.Helper()
	rows, err := f.db.Pool.Query(context.Background(), `SELECT format('pid %s %s %s xact %s wait %s: %s', pid, quote_literal(application_name), state,
       coalesce((clock_timestamp() - xact_start)::text, 'none'), coalesce(wait_event_type || '/' || wait_event, 'none'), left(query, 160))
FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() ORDER BY xact_start NULLS LAST`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "; ")
}

// copyCompare is how the tests compare a table with its copy: by id, on the
// columns every test table has.
var copyCompare = testutil.Compare{Key: []string{"id"}, Columns: []string{"id", "updated_at", "v"}}

// diff counts the rows that differ between src and its copy, compared value
// by value (missing, extra or changed rows); -1 when a table is missing.
func (f *fixture) diff(t *testing.T, src, dst string) int {
	t.Helper()
	d := copyCompare.Tables(t, f.db.Pool, src, f.db.Pool, dst)
	if d.NoSource || d.NoCopy {
		return -1
	}
	return d.Missing + d.Extra + d.Changed + d.Duplicates
}

// requireEqual fails unless the copy equals the source row by row.
func (f *fixture) requireEqual(t *testing.T, src, dst string) {
	t.Helper()
	copyCompare.RequireEqual(t, f.db.Pool, src, f.db.Pool, dst)
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func execURL(url, sql string) error {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql)
	return err
}

func queryURL(url, sql string, dst ...any) error {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.QueryRow(ctx, sql).Scan(dst...)
}

// writer updates a random row and inserts a new one (ids from next) every
// few milliseconds until the returned stop is called.
func (f *fixture) writer(t *testing.T, table string, next int) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ; ctx.Err() == nil; next++ {
			_, _ = f.db.Pool.Exec(ctx, `UPDATE `+table+` SET v = v || '+', updated_at = clock_timestamp() WHERE id = $1`, rand.IntN(next-1)+1)
			_, _ = f.db.Pool.Exec(ctx, `INSERT INTO `+table+` (id, v) VALUES ($1, 'new')`, next)
			time.Sleep(5 * time.Millisecond) // the writer's pace
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// catchUp makes slow() instant, runs `syncd run --once` to the end and
// requires the copy to equal the source.
func (f *fixture) catchUp(t *testing.T, path, state string) {
	t.Helper()
	f.db.Exec(t, `CREATE OR REPLACE FUNCTION slow(ms float8) RETURNS boolean LANGUAGE sql VOLATILE AS 'SELECT true'`)
	// A killed process leaves its server sessions running until their
	// statement ends; an open transaction of one correctly holds the read
	// bound back (it could still commit rows), so the catch-up run waits
	// for them to go.
	testutil.Eventually(t, 30*time.Second, "the sessions of killed syncd processes to end", func() bool {
		var n int
		if err := f.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'syncd'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	if r := syncd.Run(t, nil, "run", "--once", "--config", path, "--state", state); r.Code != 0 {
		t.Fatalf("run --once to catch up: exit %d: %s", r.Code, r.Stderr)
	}
	f.requireEqual(t, "src", "copy")
}
