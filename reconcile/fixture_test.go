package reconcile_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/reconcile"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// builder builds the real binary once, lazily: only the CLI tests need it.
var builder testutil.Builder

func TestMain(m *testing.M) {
	pgtest.Main(m, builder.Cleanup)
}

// fixture is a source table in one database synced to a copy in another.
type fixture struct {
	src, dst  *pgtest.DB
	cfg       *config.Config
	store     *watermark.Store
	stateFile string
	cfgFile   string
}

// allTypes is a source table with a column of every supported type.
const allTypes = `
CREATE TABLE public.items (
  id bigint PRIMARY KEY,
  updated_at timestamptz NOT NULL,
  i int, b bigint, n numeric, t text, f boolean, tz timestamptz, ts timestamp, d date,
  j jsonb, a text[], by bytea, u uuid, fl float8,
  price numeric(10,1), doc json, nums numeric(9,2)[]
);
CREATE INDEX ON public.items (updated_at, id);
INSERT INTO public.items
SELECT g, '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second',
  g, g::int8 * 1000000000, g / 7.0, CASE WHEN g %% 10 = 0 THEN '' WHEN g %% 10 = 1 THEN NULL ELSE 'text ' || g END,
  g %% 2 = 0, '2026-02-01 00:00:00.123456+00'::timestamptz + g * interval '1 minute',
  '2026-03-01 10:00:00.654321'::timestamp + g * interval '1 hour', '2026-01-01'::date + g,
  jsonb_build_object('g', g, 'tags', jsonb_build_array('a', g)), ARRAY['x' || g, NULL, ''],
  decode(lpad(to_hex(g), 8, '0'), 'hex'), md5(g::text)::uuid, g / 3.0::float8,
  1.0 + (g %% 5), ('{"b": ' || g || ', "a": [1, 2.50]}')::json, ARRAY[1.50, g]::numeric[]
FROM generate_series(1, %d) g;
ANALYZE public.items;
`

// copyTable pre-creates the copy with other type modifiers than the source,
// each wide enough to hold every source value exactly (syncd refuses a
// narrower one): numeric(12,2) for numeric(10,1) price, jsonb for json doc,
// numeric(10,3)[] for numeric(9,2)[] nums.
const copyTable = `
CREATE TABLE public.items_copy (
  id bigint PRIMARY KEY,
  updated_at timestamptz NOT NULL,
  i int, b bigint, n numeric, t text, f boolean, tz timestamptz, ts timestamp, d date,
  j jsonb, a text[], by bytea, u uuid, fl float8,
  price numeric(12,2), doc jsonb, nums numeric(10,3)[]
)`

func newFixture(t *testing.T, rows int, extraYAML string) *fixture {
	t.Helper()
	f := &fixture{src: pgtest.NewDB(t), dst: pgtest.NewDB(t)}
	f.src.Exec(t, fmt.Sprintf(allTypes, rows))
	f.dst.Exec(t, copyTable)
	f.configure(t, fmt.Sprintf(`name: items
source:
  dsn: %s
  table: public.items
  cursor: [updated_at, id]
  page_size: 500
%s
sink:
  dsn: %s
  table: public.items_copy
`, f.src.URL, extraYAML, f.dst.URL))
	return f
}

// newSimple makes a fixture from the DDL of table t in the source; yaml is
// the config with %[1]s for the source DSN and %[2]s for the copy's.
func newSimple(t *testing.T, ddl, yaml string) *fixture {
	t.Helper()
	f := &fixture{src: pgtest.NewDB(t), dst: pgtest.NewDB(t)}
	f.src.Exec(t, ddl)
	f.src.Exec(t, "ANALYZE t")
	f.configure(t, fmt.Sprintf(yaml, f.src.URL, f.dst.URL))
	return f
}

// configure writes the config, opens the state and syncs once.
func (f *fixture) configure(t *testing.T, yaml string) {
	t.Helper()
	dir := t.TempDir()
	f.stateFile = filepath.Join(dir, "state.db")
	f.cfgFile = filepath.Join(dir, "source.yaml")
	if err := os.WriteFile(f.cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadFile(f.cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	f.cfg = cfg
	f.openStore(t)
	f.sync(t)
}

func (f *fixture) openStore(t *testing.T) {
	t.Helper()
	st, err := watermark.Open(f.stateFile, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.store = st
	t.Cleanup(func() { _ = st.Close() })
}

func (f *fixture) closeStore(t *testing.T) {
	t.Helper()
	if err := f.store.Close(); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) sync(t *testing.T) syncer.Result {
	t.Helper()
	res, err := syncer.Run(context.Background(), syncer.Options{Config: f.cfg, Store: f.store, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	return res
}

func (f *fixture) reconcile(t *testing.T, o reconcile.Options) *reconcile.Report {
	t.Helper()
	o.Logger = quietLogger()
	rep, err := reconcile.Run(context.Background(), f.cfg, f.store, o)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return rep
}

// normalized is the test's own view of a table for a row-by-row
// comparison: one line per row, the values that must be equal.
const normalized = `SELECT id::text || '|' || concat_ws('|', updated_at, i, b, n, quote_nullable(t), f, tz, ts, d, j, quote_nullable(a::text), by, u, fl::text,
  trim_scale(price), doc::jsonb, (SELECT string_agg(trim_scale(x)::text, ',') FROM unnest(nums) x)) FROM %s ORDER BY id`

func rowsOf(t *testing.T, db *pgtest.DB, table string) []string {
	t.Helper()
	return queryStrings(t, db, fmt.Sprintf(normalized, table))
}

// queryStrings runs q, which selects one text column, and returns its rows.
func queryStrings(t *testing.T, db *pgtest.DB, q string) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// assertSameRows compares the source and the copy row by row.
func (f *fixture) assertSameRows(t *testing.T) {
	t.Helper()
	a, b := rowsOf(t, f.src, "public.items"), rowsOf(t, f.dst, "public.items_copy")
	if slices.Equal(a, b) {
		return
	}
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			t.Fatalf("row %d differs:\n source %s\n copy   %s", i, a[i], b[i])
		}
	}
	t.Fatalf("source has %d rows, copy %d", len(a), len(b))
}

func assertKeys(t testing.TB, kind string, got []string, want ...string) {
	t.Helper()
	got = slices.Clone(got)
	sortKeys(got)
	sortKeys(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s keys: got %v, want %v", kind, got, want)
	}
}

func sortKeys(k []string) {
	sort.Slice(k, func(i, j int) bool {
		if len(k[i]) != len(k[j]) {
			return len(k[i]) < len(k[j])
		}
		return k[i] < k[j]
	})
}

func assertCounts(t *testing.T, rep *reconcile.Report, missing, extra, changed int64) {
	t.Helper()
	if rep.Missing != missing || rep.Extra != extra || rep.Changed != changed {
		t.Fatalf("got missing %d, extra %d, changed %d; want %d, %d, %d (keys %+v)", rep.Missing, rep.Extra, rep.Changed, missing, extra, changed, rep.Keys)
	}
}

func quietLogger() *slog.Logger {
	if testing.Verbose() && os.Getenv("SYNCD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// assertSameTables compares two tables of the same shape row by row through
// their text output.
func assertSameTables(t *testing.T, a, b *pgtest.DB, table string) {
	t.Helper()
	q := "SELECT t::text FROM " + table + " t ORDER BY 1"
	x, y := queryStrings(t, a, q), queryStrings(t, b, q)
	if !slices.Equal(x, y) {
		t.Fatalf("tables differ after repair: %d rows vs %d", len(x), len(y))
	}
}
