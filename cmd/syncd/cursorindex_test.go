package main_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/testutil"
)

// indexWarning is the start of the log line of a run that finds no index
// in cursor order.
const indexWarning = "no index has the cursor columns first"

// indexWarnings counts the log lines of stderr that say the cursor index
// is missing for source name.
func indexWarnings(stderr, name string) int { return len(indexWarningLines(stderr, name)) }

func indexWarningLines(stderr, name string) []testutil.Entry {
	var out []testutil.Entry
	for _, e := range testutil.ParseLines(stderr) {
		if strings.HasPrefix(e.Msg(), indexWarning) && e.Text("source") == name {
			out = append(out, e)
		}
	}
	return out
}

// Without an index in cursor order, run --once says so once, with the
// CREATE INDEX; a never-ANALYZEd table that has the index, where the
// planner sorts for want of statistics, gets no advice from validate or
// run; a table with the index whose statistics are out of date (the plan
// sorts) is told to ANALYZE, not to create an index that exists.
func TestCursorIndexAdvice(t *testing.T) {
	src, dst := setupOrders(t)
	src.Exec(t, "ANALYZE orders")
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, ""))
	r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", filepath.Join(dir, "s.db"))
	if w := indexWarningLines(r.Stderr, "orders"); r.Code != 0 || len(w) != 1 || w[0].Level() != "WARN" ||
		w[0].Text("create") != `CREATE INDEX ON "public"."orders" ("updated_at", "id")` {
		t.Fatalf("run --once without the index: exit %d, want one warning with the CREATE INDEX:\n%s", r.Code, r.Stderr)
	}

	// Never ANALYZEd, empty, with the index: the planner sorts (the old
	// advice came from that), the catalog shows the index.
	src.Exec(t, `CREATE TABLE fresh (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text)`)
	src.Exec(t, `CREATE INDEX ON fresh (updated_at, id)`)
	var plan string
	if err := src.Pool.QueryRow(t.Context(), `EXPLAIN (FORMAT JSON) SELECT * FROM fresh WHERE (updated_at, id) > ('2000-01-01', 0) ORDER BY updated_at, id LIMIT 1000`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, `"Sort"`) {
		t.Fatalf("precondition: the planner should sort an unanalyzed table: %s", plan)
	}
	fresh := writeConfig(t, dir, "fresh.yaml", strings.NewReplacer("name: orders", "name: fresh", "public.orders", "public.fresh", "orders_copy", "fresh_copy",
		"page_size: 50", "page_size: 1000").Replace(orders(t, src, dst, "")))
	r = bin.Run(t, nil, "validate", "--config", fresh)
	if r.Code != 0 || strings.Contains(r.Stdout, "warning: the page query") || !strings.Contains(r.Stdout, "fresh: ok") {
		t.Fatalf("validate of a never-ANALYZEd table with the index: exit %d, want ok without index advice\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	r = bin.Run(t, nil, "run", "--once", "--config", fresh, "--state", filepath.Join(dir, "fresh.db"))
	if r.Code != 0 || indexWarnings(r.Stderr, "fresh") != 0 {
		t.Fatalf("run --once of a never-ANALYZEd table with the index: exit %d, want no index warning:\n%s", r.Code, r.Stderr)
	}

	// ANALYZEd at 20 rows, grown to 20,000 since: the plan sorts although
	// the index exists.
	src.Exec(t, `CREATE TABLE grown (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text) WITH (autovacuum_enabled = false)`)
	src.Exec(t, `CREATE INDEX ON grown (updated_at, id)`)
	src.Exec(t, `INSERT INTO grown SELECT g, '2026-10-01'::timestamptz + random() * interval '1 day', 'g' FROM generate_series(1, 20) g`)
	src.Exec(t, `ANALYZE grown`)
	src.Exec(t, `INSERT INTO grown SELECT g, '2026-10-01'::timestamptz + random() * interval '1 day', 'g' FROM generate_series(21, 20000) g`)
	grown := writeConfig(t, dir, "grown.yaml", strings.NewReplacer("name: orders", "name: grown", "public.orders", "public.grown", "orders_copy", "grown_copy",
		"page_size: 50", "page_size: 1000").Replace(orders(t, src, dst, "")))
	r = bin.Run(t, nil, "validate", "--config", grown)
	if r.Code != 0 || !strings.Contains(r.Stdout, "although index grown_updated_at_id_idx has the cursor columns first") ||
		!strings.Contains(r.Stdout, `run ANALYZE "public"."grown"`) || strings.Contains(r.Stdout, "create an index") {
		t.Fatalf("validate with the index and stale statistics: exit %d, want the ANALYZE advice only\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	r = bin.Run(t, nil, "run", "--once", "--config", grown, "--state", filepath.Join(dir, "grown.db"))
	if r.Code != 0 || indexWarnings(r.Stderr, "grown") != 0 {
		t.Fatalf("run --once with the index: exit %d, want no index warning:\n%s", r.Code, r.Stderr)
	}
}

// Which indexes validate accepts for the cursor (updated_at, id), read
// from the catalog: the columns first and in order, all ascending or all
// descending, btree, and partial only when the predicate is source.where.
func TestCursorIndexFromCatalog(t *testing.T) {
	src, dst := setupOrders(t)
	src.Exec(t, "ANALYZE orders")
	dir := t.TempDir()
	plain := writeConfig(t, dir, "plain.yaml", orders(t, src, dst, ""))
	filtered := writeConfig(t, dir, "filtered.yaml", orders(t, src, dst, "  where: name <> ''"))
	for _, tc := range []struct {
		index string // "" drops the last one
		cfg   string
		warns bool
	}{
		{"CREATE INDEX ix ON orders USING hash (updated_at)", plain, true},
		{"CREATE INDEX ix ON orders (id, updated_at)", plain, true},
		{"CREATE INDEX ix ON orders (updated_at DESC, id)", plain, true},
		{"CREATE INDEX ix ON orders (updated_at)", plain, true},
		{"CREATE INDEX ix ON orders (updated_at DESC, id DESC)", plain, false},
		{"CREATE INDEX ix ON orders (updated_at, id, name)", plain, false},
		{"CREATE INDEX ix ON orders (updated_at, id) WHERE name <> ''", plain, true},
		{"CREATE INDEX ix ON orders (updated_at, id) WHERE name <> ''", filtered, false},
		{"CREATE INDEX ix ON orders (updated_at, id) WHERE id > 5", filtered, true},
		{"CREATE INDEX ix ON orders (updated_at, id)", filtered, false},
	} {
		src.Exec(t, "DROP INDEX IF EXISTS ix")
		src.Exec(t, tc.index)
		r := bin.Run(t, nil, "validate", "--config", tc.cfg)
		warned := strings.Contains(r.Stdout, "orders: warning: the page query sorts the whole table on every page: no index of public.orders has the cursor columns (updated_at, id) first")
		if r.Code != 0 || warned != tc.warns {
			t.Errorf("%s (%s): exit %d, warned %v, want %v\n%s%s", tc.index, filepath.Base(tc.cfg), r.Code, warned, tc.warns, r.Stdout, r.Stderr)
		}
	}
}

// A table without planner statistics that nothing will ANALYZE (autovacuum
// off for it) is told to ANALYZE by validate, with the statement; once
// ANALYZEd it is not, nor is one of a few pages. One that autovacuum will
// ANALYZE is told nothing when the server runs autovacuum, and told why
// when it does not.
func TestNoStatisticsAdvice(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	validate := func(table, ddl string, rows int) string {
		t.Helper()
		src.Exec(t, ddl)
		src.Exec(t, `CREATE INDEX ON `+table+` (updated_at, id)`)
		src.Exec(t, `INSERT INTO `+table+` SELECT g, '2026-10-01'::timestamptz + g * interval '1 second', 'g' FROM generate_series(1, $1::int) g`, rows)
		cfg := writeConfig(t, dir, table+".yaml", strings.NewReplacer("name: orders", "name: "+table, "public.orders", "public."+table, "orders_copy", table+"_copy").Replace(orders(t, src, dst, "")))
		r := bin.Run(t, nil, "validate", "--config", cfg)
		if r.Code != 0 || !strings.Contains(r.Stdout, table+": ok") {
			t.Fatalf("validate of %s: exit %d, want 0 and ok\n%s%s", table, r.Code, r.Stdout, r.Stderr)
		}
		return r.Stdout
	}
	advice := func(table, why string) string {
		return table + `: warning: public.` + table + ` has no planner statistics and nothing will gather them (` + why + `): the page query's plan is a guess, which can sort the whole table on every page; run ANALYZE "public"."` + table + `", and again after large changes`
	}

	// The server's setting comes first in the advice's reason: the table's
	// own is named only when the server runs autovacuum.
	var autovacuum, trackCounts bool
	if err := src.Pool.QueryRow(t.Context(), `SELECT current_setting('autovacuum')::bool, current_setting('track_counts')::bool`).Scan(&autovacuum, &trackCounts); err != nil {
		t.Fatal(err)
	}
	on := autovacuum && trackCounts
	why := "the table is set autovacuum_enabled = false"
	switch {
	case !autovacuum:
		why = "autovacuum is off on the server"
	case !trackCounts:
		why = "track_counts is off on the server, so autovacuum never sees the table change"
	}
	out := validate("frozen", `CREATE TABLE frozen (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text) WITH (autovacuum_enabled = off)`, 5000)
	if !strings.Contains(out, advice("frozen", why)) {
		t.Fatalf("validate of a table with autovacuum off and no statistics: want the ANALYZE advice (%s)\n%s", why, out)
	}
	src.Exec(t, `ANALYZE frozen`)
	cfg := filepath.Join(dir, "frozen.yaml")
	if r := bin.Run(t, nil, "validate", "--config", cfg); r.Code != 0 || strings.Contains(r.Stdout, "no planner statistics") {
		t.Fatalf("validate after ANALYZE: exit %d, want no advice\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	// Smaller than 16 pages, sorted in no time: no advice.
	if out := validate("small", `CREATE TABLE small (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text) WITH (autovacuum_enabled = off)`, 100); strings.Contains(out, "no planner statistics") {
		t.Fatalf("validate of a table of a few pages: want no advice\n%s", out)
	}

	out = validate("fresh", `CREATE TABLE fresh (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text)`, 5000)
	if has := strings.Contains(out, "no planner statistics"); on && has {
		t.Fatalf("validate of a table autovacuum will ANALYZE: want no advice\n%s", out)
	} else if !on && !strings.Contains(out, advice("fresh", why)) {
		t.Fatalf("validate with autovacuum off on the server: want the ANALYZE advice saying so (%s)\n%s", why, out)
	}
}
