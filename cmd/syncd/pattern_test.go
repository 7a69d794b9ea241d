package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// shopSchema makes a source of several tables: two that sync (orders,
// customers), one without the cursor column (events), one excluded
// (audit_old), and a partitioned table whose partitions are not sources.
func shopSchema(t *testing.T) (src, dst *pgtest.DB) {
	src, dst = pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, v text)`)
	src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-01 09:00:00+00'::timestamptz + (g % 7) * interval '1 ms', 'o' || g FROM generate_series(1, 300) g`)
	src.Exec(t, `CREATE TABLE customers (customer_id int PRIMARY KEY, updated_at timestamptz NOT NULL, name text)`)
	src.Exec(t, `INSERT INTO customers SELECT g, '2026-10-01 09:00:00+00', 'c' || g FROM generate_series(1, 50) g`)
	src.Exec(t, `CREATE TABLE events (id bigint PRIMARY KEY, at timestamptz NOT NULL)`)
	src.Exec(t, `INSERT INTO events SELECT g, now() FROM generate_series(1, 10) g`)
	src.Exec(t, `CREATE TABLE nokey (id bigint NOT NULL UNIQUE, updated_at timestamptz NOT NULL)`)
	src.Exec(t, `CREATE TABLE audit_old (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL)`)
	src.Exec(t, `INSERT INTO audit_old SELECT g, now() FROM generate_series(1, 10) g`)
	src.Exec(t, `CREATE TABLE metrics (id bigint, updated_at timestamptz NOT NULL, PRIMARY KEY (id, updated_at)) PARTITION BY RANGE (updated_at)`)
	src.Exec(t, `CREATE TABLE metrics_2026 PARTITION OF metrics FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')`)
	src.Exec(t, `INSERT INTO metrics SELECT g, '2026-10-01 09:00:00+00'::timestamptz + g * interval '1 s' FROM generate_series(1, 20) g`)
	return src, dst
}

// shopConfig is a pattern source read with its DSNs from the environment.
const shopConfig = `name: shop
schedule: "@every 1s"
source:
  dsn: ${SYNCD_TEST_SRC}
  table: public.*
  exclude: ["*_old"]
  cursor: [updated_at, %s]
  lookback: 0s
  page_size: 40
sink:
  dsn: ${SYNCD_TEST_DST}
  table: public.*_copy
`

// sameTable fails unless table_copy in dst equals table in src row by row
// (by key), and the source is not empty.
func sameTable(t *testing.T, src, dst *pgtest.DB, table, key string) {
	t.Helper()
	if n := (testutil.Compare{Key: []string{key}}).RequireEqual(t, src.Pool, table, dst.Pool, table+"_copy"); n == 0 {
		t.Fatalf("%s is empty: nothing was compared", table)
	}
}

func tableExists(t *testing.T, db *pgtest.DB, name string) bool {
	return count(t, db, fmt.Sprintf("SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = '%s'", name)) == 1
}

// One file syncs a whole schema: each matched table is its own source
// named shop.TABLE, keyed by its primary key; a table without the cursor
// column is reported in one line and skipped while the others sync, and
// run --once then exits 1; excluded tables and partitions are not touched;
// --source picks one table or the whole pattern.
func TestPatternSourceRunOnce(t *testing.T) {
	src, dst := shopSchema(t)
	dir := t.TempDir()
	// The cursor [updated_at, id] fits orders and metrics; customers has
	// customer_id, events has no updated_at and nokey no primary key.
	cfg := writeConfig(t, dir, "shop.yaml", fmt.Sprintf(shopConfig, "id"))
	state := filepath.Join(dir, "state.db")
	env := []string{"SYNCD_TEST_SRC=" + src.URL, "SYNCD_TEST_DST=" + dst.URL, "SYNCD_STATE=" + state}

	r := bin.Run(t, env, "run", "--once", "--config", cfg)
	if r.Code != 1 {
		t.Fatalf("run --once with a skipped table: exit %d, want 1\n%s", r.Code, r.Stderr)
	}
	for _, want := range []string{
		`syncd run: source shop.customers (table public.customers) skipped: source.cursor: column "id" does not exist in public.customers`,
		`syncd run: source shop.events (table public.events) skipped: source.cursor: column "updated_at" does not exist in public.events`,
		`syncd run: source shop.nokey (table public.nokey) skipped: it has no primary key and sink.key is not given`,
		"syncd run: 2 sources synced, 3 tables skipped",
	} {
		if !strings.Contains(r.Stderr, want) {
			t.Fatalf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
	sameTable(t, src, dst, "orders", "id")
	sameTable(t, src, dst, "metrics", "id")
	for _, name := range []string{"audit_old_copy", "events_copy", "customers_copy", "nokey_copy", "metrics_2026_copy"} {
		if tableExists(t, dst, name) {
			t.Fatalf("%s was created: an excluded, skipped or partition table was synced", name)
		}
	}

	// status lists each table as its own source, without any DSN variable.
	r = bin.Run(t, []string{"SYNCD_STATE=" + state}, "status", "--config", cfg)
	if r.Code != 0 || !strings.Contains(r.Stdout, "shop.orders ") || !strings.Contains(r.Stdout, "shop.metrics ") {
		t.Fatalf("status: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}

	// --source shop.orders runs that table alone: exit 0, metrics untouched.
	src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-02 09:00:00+00', 'new' FROM generate_series(301, 320) g`)
	src.Exec(t, `INSERT INTO metrics SELECT g, '2026-10-02 09:00:00+00'::timestamptz + g * interval '1 s' FROM generate_series(21, 25) g`)
	r = bin.Run(t, env, "run", "--once", "--config", cfg, "--source", "shop.orders")
	if r.Code != 0 || strings.Contains(r.Stderr, "skipped") {
		t.Fatalf("run --source shop.orders: exit %d, want 0\n%s", r.Code, r.Stderr)
	}
	sameTable(t, src, dst, "orders", "id")
	if n := count(t, dst, "SELECT count(*) FROM metrics_copy"); n != 20 {
		t.Fatalf("--source shop.orders synced metrics too: %d rows, want 20", n)
	}
	// --source shop runs every table of the pattern.
	r = bin.Run(t, env, "run", "--once", "--config", cfg, "--source", "shop")
	if r.Code != 1 {
		t.Fatalf("run --source shop: exit %d, want 1 (three tables skipped)\n%s", r.Code, r.Stderr)
	}
	sameTable(t, src, dst, "metrics", "id")
	if r := bin.Run(t, env, "run", "--once", "--config", cfg, "--source", "shop.nope"); r.Code != 2 || !strings.Contains(r.Stderr, `--source "shop.nope"`) {
		t.Fatalf("run --source shop.nope: exit %d, want 2 naming it\n%s", r.Code, r.Stderr)
	}

	// validate shows the expansion and the skipped tables, and exits 1.
	r = bin.Run(t, env, "validate", "--config", cfg)
	if r.Code != 1 || !strings.Contains(r.Stdout, "shop: pattern public.* matches 2 tables to sync: shop.metrics, shop.orders") ||
		!strings.Contains(r.Stdout, "shop.events: skipped: source.cursor:") || !strings.Contains(r.Stdout, "shop.orders: ok") {
		t.Fatalf("validate: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}

	// A pattern that matches no table is a config mistake, like a table
	// that does not exist: exit 2, nothing written.
	none := writeConfig(t, dir, "none.yaml", strings.Replace(fmt.Sprintf(shopConfig, "id"), "table: public.*\n", "table: public.zzz_*\n", 1))
	r = bin.Run(t, env, "run", "--once", "--config", none, "--state", filepath.Join(dir, "none.db"))
	if r.Code != 2 || !strings.Contains(r.Stderr, "none.yaml:5: source.table: pattern public.zzz_* matches no table") {
		t.Fatalf("a pattern matching nothing: exit %d, want 2\n%s", r.Code, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "none.db")); !os.IsNotExist(err) {
		t.Fatal("a run whose pattern matches nothing created its state file")
	}

	// Excluding the tables that cannot be synced makes the run fully ok.
	cfg = writeConfig(t, dir, "shop.yaml", strings.Replace(fmt.Sprintf(shopConfig, "id"), `["*_old"]`, `["*_old", events, public.customers, nokey]`, 1))
	if r := bin.Run(t, env, "run", "--once", "--config", cfg); r.Code != 0 {
		t.Fatalf("run with the unsyncable tables excluded: exit %d, want 0\n%s", r.Code, r.Stderr)
	}
}

// A table created while the daemon runs is picked up at the pattern's next
// tick, without a restart or a reload, and copied row by row.
func TestPatternDaemonPicksUpNewTable(t *testing.T) {
	src, dst := shopSchema(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "shop.yaml", fmt.Sprintf(shopConfig, "id"))
	d := bin.Start(t, []string{"SYNCD_TEST_SRC=" + src.URL, "SYNCD_TEST_DST=" + dst.URL},
		"run", "--config", cfg, "--state", filepath.Join(dir, "state.db"), "--listen", "")
	waitFor(t, 30*time.Second, "the first copies", func() bool {
		return tableExists(t, dst, "orders_copy") && count(t, dst, "SELECT count(*) FROM orders_copy") == 300
	})
	src.Exec(t, `CREATE TABLE invoices (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, total numeric)`)
	src.Exec(t, `INSERT INTO invoices SELECT g, '2026-10-01 09:00:00+00'::timestamptz + g * interval '1 us', g * 1.5 FROM generate_series(1, 77) g`)
	waitFor(t, 30*time.Second, "the new table's copy", func() bool {
		return tableExists(t, dst, "invoices_copy") && count(t, dst, "SELECT count(*) FROM invoices_copy") == 77
	})
	sameTable(t, src, dst, "invoices", "id")
	sameTable(t, src, dst, "orders", "id")
	if r := d.Stop(t, 20*time.Second); r.Code != 0 {
		t.Fatalf("daemon exit after SIGTERM: %s", r)
	}
	if n := d.Stderr.Count("", "table_source", "shop.events"); n != 1 {
		t.Fatalf("the skipped table was logged %d times, want once (not at every tick):\n%s", n, d.Stderr)
	}
}

// A file of several YAML documents holds several sources, each run.
func TestMultiDocumentConfig(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	one := orders(t, src, dst, "")
	two := strings.NewReplacer("name: orders", "name: orders2", "orders_copy", "orders_copy2").Replace(one)
	cfg := writeConfig(t, dir, "two.yaml", one+"---\n"+two)
	r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", filepath.Join(dir, "s.db"))
	if r.Code != 0 {
		t.Fatalf("run --once: exit %d\n%s", r.Code, r.Stderr)
	}
	want := rowsText(t, src, "orders")
	if got := rowsText(t, dst, "orders_copy"); got != want {
		t.Fatal("the first document's copy differs from the source")
	}
	if got := rowsText(t, dst, "orders_copy2"); got != want {
		t.Fatal("the second document's copy differs from the source: the second source was not run")
	}
	// An error in the second document names its own line in the file.
	bad := writeConfig(t, dir, "bad.yaml", one+"---\n"+strings.Replace(two, "page_size: 50", "page_size: lots", 1))
	r = bin.Run(t, nil, "validate", "--config", bad)
	if r.Code != 2 || !strings.Contains(r.Stderr, "bad.yaml:20: source.page_size") {
		t.Fatalf("bad second document: exit %d, want 2 naming bad.yaml:20\n%s", r.Code, r.Stderr)
	}
}

// waitFor polls ok until it holds (testutil.Eventually).
func waitFor(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	testutil.Eventually(t, within, what, ok)
}
