package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testbin"
	"github.com/syncd/syncd/internal/testutil"
)

// binary is the syncd built once for the package; bin runs it with the
// test process's environment.
var (
	binary string
	bin    testutil.Binary
)

func TestMain(m *testing.M) {
	var cleanup func()
	binary, cleanup = testbin.Build()
	bin = testutil.Binary{Path: binary}
	pgtest.Main(m, cleanup)
}

func writeConfig(t *testing.T, dir, name, body string) string {
	t.Helper()
	return testutil.WriteFile(t, dir, name, body)
}

func orders(t *testing.T, src, dst *pgtest.DB, extra string) string {
	return fmt.Sprintf(`name: orders
source:
  dsn: %s
  table: public.orders
  cursor: [updated_at, id]
  lookback: 0s
  page_size: 50
%s
sink:
  dsn: %s
  table: public.orders_copy
  key: [id]
`, src.URL, extra, dst.URL)
}

func count(t *testing.T, db *pgtest.DB, q string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func rowsText(t *testing.T, db *pgtest.DB, table string) string {
	t.Helper()
	var s string
	q := fmt.Sprintf("SELECT coalesce(string_agg(t::text, E'\\n' ORDER BY id), '') FROM %s t", table)
	if err := db.Pool.QueryRow(context.Background(), q).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func setupOrders(t *testing.T) (src, dst *pgtest.DB) {
	src, dst = pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text)`)
	src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-01 09:00:00+00'::timestamptz + (g % 4) * interval '97 microseconds', 'o' || g FROM generate_series(1, 1000) g`)
	return src, dst
}

func TestRunOnceStatusResync(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, ""))
	state := filepath.Join(dir, "state.db")
	env := []string{"SYNCD_STATE=" + state}

	r := bin.Run(t, env, "run", "--config", cfg, "--once")
	if r.Code != 0 {
		t.Fatalf("run --once exited %d: %s", r.Code, r.Stderr)
	}
	if got, want := rowsText(t, dst, "orders_copy"), rowsText(t, src, "orders"); got != want {
		t.Fatalf("copy differs from source after run --once")
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("state file from $SYNCD_STATE: %v", err)
	}

	r = bin.Run(t, env, "status", "--config", cfg)
	if r.Code != 0 || !strings.Contains(r.Stdout, "2026-10-01T09:00:00.000291Z") || !strings.Contains(r.Stdout, "1000") {
		t.Fatalf("status exited %d, want the watermark at microseconds and 1000 rows:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	r = bin.Run(t, env, "status", "--config", cfg, "--json")
	var st struct {
		Sources []struct {
			Name      string `json:"name"`
			Watermark string `json:"watermark"`
			Rows      int64  `json:"rows_applied_last_run"`
		} `json:"sources"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil || len(st.Sources) != 1 {
		t.Fatalf("status --json: %v\n%s", err, r.Stdout)
	}
	if s := st.Sources[0]; s.Name != "orders" || s.Watermark != "2026-10-01T09:00:00.000291Z" || s.Rows != 1000 {
		t.Fatalf("status --json: %+v", s)
	}

	// Nothing new: the next run reads nothing.
	if r = bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("second run exited %d: %s", r.Code, r.Stderr)
	}
	if r = bin.Run(t, env, "status", "--config", cfg, "--json"); !strings.Contains(r.Stdout, `"rows_applied_last_run": 0`) {
		t.Fatalf("second run applied rows:\n%s", r.Stdout)
	}

	// resync --from moves the watermark back: rows at or after it are re-read.
	r = bin.Run(t, env, "resync", "--config", cfg, "--source", "orders", "--from", "2026-10-01T09:00:00.000194Z")
	if r.Code != 0 {
		t.Fatalf("resync exited %d: %s", r.Code, r.Stderr)
	}
	if r = bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("run after resync exited %d: %s", r.Code, r.Stderr)
	}
	if r = bin.Run(t, env, "status", "--config", cfg, "--json"); !strings.Contains(r.Stdout, `"rows_applied_last_run": 500`) {
		t.Fatalf("after resync --from the run should re-read the 500 rows at or after it:\n%s", r.Stdout)
	}
	r = bin.Run(t, env, "resync", "--config", cfg, "--source", "orders", "--from-start")
	if r.Code != 0 {
		t.Fatalf("resync --from-start exited %d: %s", r.Code, r.Stderr)
	}
	if r = bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("run after resync exited %d: %s", r.Code, r.Stderr)
	}
	if r = bin.Run(t, env, "status", "--config", cfg, "--json"); !strings.Contains(r.Stdout, `"rows_applied_last_run": 1000`) {
		t.Fatalf("after resync --from-start the run should re-read all 1000 rows:\n%s", r.Stdout)
	}
}

// A config mistake exits 2 with one line naming the file, line and key, and
// writes nothing: no sink table, no state file.
func TestConfigErrorsExit2AndWriteNothing(t *testing.T) {
	src, dst := setupOrders(t)
	src.Exec(t, `CREATE TABLE no_pk (id bigint, updated_at timestamptz NOT NULL)`)
	src.Exec(t, `CREATE TABLE json_cursor (id bigint PRIMARY KEY, doc jsonb NOT NULL)`)
	base := orders(t, src, dst, "")
	cases := []struct {
		name, body, want string
	}{
		{"unknown key", strings.Replace(base, "  page_size: 50", "  page_size: 50\n  pagesize: 50", 1), "orders.yaml:8: source.pagesize: unknown key"},
		{"wrong type", strings.Replace(base, "page_size: 50", "page_size: fifty", 1), `orders.yaml:7: source.page_size: want a whole number, got "fifty"`},
		{"unset variable", strings.Replace(base, "table: public.orders_copy", "table: ${SYNCD_UNSET_FOR_TEST}", 1), "source.yaml:11: sink.table: environment variable SYNCD_UNSET_FOR_TEST is not set"},
		{"missing table", strings.Replace(base, "table: public.orders\n", "table: public.nope\n", 1), "orders.yaml:4: source.table: table public.nope does not exist"},
		{"missing column", strings.Replace(base, "cursor: [updated_at, id]", "cursor: [changed_at, id]", 1), `orders.yaml:5: source.cursor: column "changed_at" does not exist in public.orders`},
		{"no tie-breaker", strings.Replace(base, "table: public.orders\n", "table: public.no_pk\n", 1), `orders.yaml:5: source.cursor: last column "id" is not unique in public.no_pk`},
		{"unsupported cursor type", strings.Replace(strings.Replace(base, "table: public.orders\n", "table: public.json_cursor\n", 1), "[updated_at, id]", "[doc, id]", 1), `orders.yaml:5: source.cursor: column "doc" of public.json_cursor has type jsonb`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := "orders.yaml"
			if strings.HasPrefix(tc.want, "source.yaml") {
				file = "source.yaml"
			}
			cfg := writeConfig(t, dir, file, tc.body)
			state := filepath.Join(dir, "state.db")
			r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state)
			if r.Code != 2 {
				t.Fatalf("exit %d, want 2; stderr: %s", r.Code, r.Stderr)
			}
			lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], filepath.Join(dir, tc.want)) {
				t.Fatalf("stderr %q\nwant one line containing %q", r.Stderr, filepath.Join(dir, tc.want))
			}
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Fatalf("the state file was created by a run with a bad config")
			}
			if n := count(t, dst, "SELECT count(*) FROM pg_tables WHERE tablename = 'orders_copy'"); n != 0 {
				t.Fatalf("the sink table was created by a run with a bad config")
			}
		})
	}
}

func TestUsageAndRuntimeExitCodes(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	if r := bin.Run(t, nil, "run", "--once"); r.Code != 2 || !strings.Contains(r.Stderr, "--config is required") {
		t.Fatalf("missing --config: exit %d %q", r.Code, r.Stderr)
	}
	if r := bin.Run(t, nil, "frobnicate"); r.Code != 2 {
		t.Fatalf("unknown command: exit %d", r.Code)
	}
	if r := bin.Run(t, nil, "resync", "--config", writeConfig(t, dir, "o.yaml", orders(t, src, dst, "")), "--source", "orders"); r.Code != 2 || !strings.Contains(r.Stderr, "--from") {
		t.Fatalf("resync without --from: exit %d %q", r.Code, r.Stderr)
	}
	// An unreachable source is a run-time failure: exit 1, one line, no password.
	bad := strings.Replace(orders(t, src, dst, ""), src.URL, "postgres://postgres:hunter2secret@127.0.0.1:1/none?connect_timeout=2", 1)
	cfg := writeConfig(t, dir, "bad.yaml", bad)
	r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", filepath.Join(dir, "s.db"))
	if r.Code != 1 {
		t.Fatalf("unreachable source: exit %d, want 1: %s", r.Code, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "cannot connect to the source at 127.0.0.1:1 (database none, user postgres): connection refused") || strings.Contains(r.Stderr, "hunter2secret") {
		t.Fatalf("stderr should name the source without its password:\n%s", r.Stderr)
	}
	if lines := strings.Split(strings.TrimSpace(r.Stderr), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "syncd run: ") {
		t.Fatalf("a failed run should print one line on stderr, got %d:\n%s", len(lines), r.Stderr)
	}
}

// validate warns when the page query would sort the table on every page,
// and stops warning once the index in cursor order exists.
func TestValidateWarnsWithoutCursorIndex(t *testing.T) {
	src, dst := setupOrders(t)
	src.Exec(t, "ANALYZE orders")
	cfg := writeConfig(t, t.TempDir(), "orders.yaml", orders(t, src, dst, ""))
	r := bin.Run(t, nil, "validate", "--config", cfg)
	if r.Code != 0 || !strings.Contains(r.Stdout, "orders: warning: the page query sorts the whole table on every page") ||
		!strings.Contains(r.Stdout, "create an index on (updated_at, id)") {
		t.Fatalf("validate without index: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	src.Exec(t, "CREATE INDEX ON orders (updated_at, id)")
	src.Exec(t, "ANALYZE orders")
	r = bin.Run(t, nil, "validate", "--config", cfg)
	if r.Code != 0 || strings.Contains(r.Stdout, "sorts the whole table") || !strings.Contains(r.Stdout, "orders: ok") {
		t.Fatalf("validate with index: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if n := count(t, dst, "SELECT count(*) FROM pg_tables WHERE tablename = 'orders_copy'"); n != 0 {
		t.Fatal("validate created the sink table")
	}
}
