package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// faultTable creates public.src with n rows in pool's database.
func faultTable(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, val text, n numeric)`,
		`CREATE UNIQUE INDEX ON src (updated_at, id)`,
		fmt.Sprintf(`INSERT INTO src SELECT g, timestamptz '2026-01-01' + (g / 100) * interval '1 minute', repeat('v', g %% 50) || g, g * 1.5 FROM generate_series(1, %d) g`, n),
		`ANALYZE src`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// namedTable creates table (id, updated_at, val) with n rows in ties of 100.
func namedTable(t *testing.T, pool *pgxpool.Pool, table string, n int) {
	t.Helper()
	for _, q := range []string{
		`CREATE TABLE ` + table + ` (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, val text)`,
		`CREATE UNIQUE INDEX ON ` + table + ` (updated_at, id)`,
		fmt.Sprintf(`INSERT INTO %s SELECT g, timestamptz '2026-01-01' + (g / 100) * interval '1 minute', 'v' || g FROM generate_series(1, %d) g`, table, n),
	} {
		if _, err := pool.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// srcToCopy writes a config syncing public.src to public.copy in db (extra
// lines appended at the top level) and returns it with a state path.
func srcToCopy(t *testing.T, db *pgtest.DB, name string, pageSize int, extra string) (cfg, state string) {
	t.Helper()
	dir := t.TempDir()
	cfg = writeFile(t, dir, name+".yaml", tableConfig{Name: name, SourceDSN: db.URL, Table: "public.src",
		Cursor: "[updated_at, id]", SinkDSN: db.URL, SinkTable: "public.copy", PageSize: pageSize}.YAML()+extra)
	return cfg, filepath.Join(dir, "state.db")
}

// sameRows fails unless two tables hold the same rows value by value, and
// returns how many.
func sameRows(t *testing.T, src *pgxpool.Pool, srcTable string, dst *pgxpool.Pool, dstTable string) int {
	t.Helper()
	return testutil.RequireEqual(t, src, srcTable, dst, dstTable)
}

// faultOutcome checks a run hit by a fault: it either completed (a build
// that retries) or exited 1 ending with one clear "syncd run:" line that
// names what failed. It returns "retried" or "exit 1".
func faultOutcome(t *testing.T, r result, want ...string) string {
	t.Helper()
	if r.Code == 0 {
		return "completed"
	}
	if r.Code != 1 {
		t.Fatalf("want exit 1 or 0 after a fault: %s", r)
	}
	ls := lines(r.Stderr)
	last := ls[len(ls)-1]
	if !strings.HasPrefix(last, "syncd run: ") {
		t.Fatalf("the last stderr line is not syncd's error: %s", r)
	}
	ok := false
	for _, w := range want {
		ok = ok || strings.Contains(last, w)
	}
	if !ok {
		t.Fatalf("error line %q names none of %q", last, want)
	}
	t.Logf("fault: %s", last)
	return "exit 1"
}

// TestTerminatedConnections: syncd's sessions are ended with
// pg_terminate_backend in the middle of a run, several times; each hit run
// fails clearly (or retries), and the next run completes with nothing lost.
func TestTerminatedConnections(t *testing.T) {
	db := pgtest.NewDB(t)
	faultTable(t, db.Pool, 20_000)
	cfg, state := srcToCopy(t, db, "term", 50, "")
	ctx := context.Background()
	hits := 0
	for i := range 5 {
		db.Exec(t, `UPDATE src SET updated_at = now(), val = val || '!' WHERE id % 5 = $1`, i)
		p := bin.Start(t, nil, "run", "--once", "--log-level", "debug", "--config", cfg, "--state", state)
		// Let syncd page for a while (a few pages more each round), then
		// end its sessions.
		p.Output.AwaitCount(time.Minute, 2+3*i, "page applied")
		deadline := time.Now().Add(10 * time.Second)
		var n int
		for n == 0 && !p.Exited() && time.Now().Before(deadline) {
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'syncd' AND pid <> pg_backend_pid()) x`, db.Name).Scan(&n); err != nil {
				t.Fatal(err)
			}
		}
		r := p.Wait(t, 2*time.Minute)
		if n > 0 && faultOutcome(t, r, "terminat", "connection", "closed", "EOF", "unexpected") == "exit 1" {
			hits++
		}
		if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
			t.Fatalf("run after the fault: %s", r)
		}
		sameRows(t, db.Pool, "src", db.Pool, "copy")
	}
	if hits == 0 {
		t.Fatal("no run was hit by pg_terminate_backend; the fault was not exercised")
	}
	t.Logf("REPORT terminate-backend: faults=5 runs_hit=%d lost=0 duplicates=0", hits)
}

// TestStatementTimeout: the copy is locked by another session and the sink
// database has a statement_timeout; the run fails clearly, and once the lock
// is gone the next run completes with nothing lost.
func TestStatementTimeout(t *testing.T) {
	db := pgtest.NewDB(t)
	faultTable(t, db.Pool, 2_000)
	cfg, state := srcToCopy(t, db, "timeout", 100, "")
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("first run: %s", r)
	}
	before := cursorOf(t, cfg, state, "timeout")
	db.Exec(t, `ALTER DATABASE `+db.Name+` SET statement_timeout = '300ms'`)
	db.Exec(t, `UPDATE src SET updated_at = now(), val = 'changed' WHERE id % 3 = 0`)

	ctx := context.Background()
	locker, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locker.Exec(ctx, `LOCK TABLE copy IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state)
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	outcome := faultOutcome(t, r, "statement timeout")
	if after := cursorOf(t, cfg, state, "timeout"); outcome == "exit 1" && compareCursor(t, before, after) != 0 {
		t.Fatalf("the failed run moved the watermark from %v to %v", before, after)
	}
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("run after the lock was released: %s", r)
	}
	sameRows(t, db.Pool, "src", db.Pool, "copy")
	t.Logf("REPORT statement-timeout: faults=1 outcome=%q lost=0 duplicates=0", outcome)
}

// TestServerRestart: the source's server, then the sink's, is stopped and
// started again in the middle of a run; the hit run fails clearly (or
// retries) and the next one completes with nothing lost.
func TestServerRestart(t *testing.T) {
	ctx := context.Background()
	cl, local, remote := restartable(t)
	for _, side := range []string{"source", "sink"} {
		t.Run(side, func(t *testing.T) {
			srcURL, dstURL, srcPool, dstPool := remote.URL, local.URL, remote.Pool, local.Pool
			if side == "sink" {
				srcURL, dstURL, srcPool, dstPool = local.URL, remote.URL, local.Pool, remote.Pool
			}
			table, copyT := "src_"+side, "copy_"+side
			namedTable(t, srcPool, table, 40_000)
			dir := t.TempDir()
			cfg := writeFile(t, dir, side+".yaml", tableConfig{Name: side, SourceDSN: srcURL, Table: "public." + table,
				Cursor: "[updated_at, id]", SinkDSN: dstURL, SinkTable: "public." + copyT, PageSize: 50}.YAML())
			state := filepath.Join(dir, "state.db")
			p := bin.Start(t, nil, "run", "--once", "--log-level", "debug", "--config", cfg, "--state", state)
			// Stop the server in the middle of the run: after a few pages.
			p.WaitLogCount(t, time.Minute, 5, "page applied")
			if err := cl.Stop(ctx, "immediate"); err != nil {
				t.Fatal(err)
			}
			r := p.Wait(t, 2*time.Minute)
			if err := cl.Start(ctx); err != nil {
				t.Fatal(err)
			}
			// The test's own pool still holds connections to the stopped
			// server; a fast run can finish before the pool pings them.
			remote.Pool.Reset()
			outcome := faultOutcome(t, r, side, "connect", "terminat", "EOF", "closed", "unexpected", "shut")
			if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
				t.Fatalf("run after the restart: %s", r)
			}
			n := sameRows(t, srcPool, table, dstPool, copyT)
			t.Logf("REPORT restart-%s: rows=%d outcome=%q lost=0 duplicates=0", side, n, outcome)
		})
	}
}

var (
	clusterOnce sync.Once
	cluster     *pgtest.Cluster
	clusterErr  error
)

// restartable returns the package's throwaway cluster (started once, with
// its own pg_ctl so a test can stop and start it), a database on it, and a
// database on the shared test server.
func restartable(t *testing.T) (cl *pgtest.Cluster, local, remote *pgtest.DB) {
	t.Helper()
	clusterOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cluster, clusterErr = pgtest.StartCluster(ctx)
	})
	if clusterErr != nil {
		t.Fatalf("throwaway cluster: %v", clusterErr)
	}
	return cluster, pgtest.NewDB(t), clusterDB(t, cluster)
}

// clusterDB creates a database with a unique name on a throwaway cluster,
// with a small pool.
func clusterDB(t *testing.T, cl *pgtest.Cluster) *pgtest.DB {
	t.Helper()
	ctx := context.Background()
	name := strings.ToLower(strings.NewReplacer("/", "_", " ", "_").Replace("faults_" + t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	// Unique: the cluster can outlive one test (go test -count=3 runs the
	// same test again on it).
	name = fmt.Sprintf("%s_%08x", name, rand.Uint32())
	clusterExec(t, cl, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	u, _ := url.Parse(cl.URL())
	u.Path = "/" + name
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &pgtest.DB{Name: name, URL: u.String(), Pool: pool}
}
