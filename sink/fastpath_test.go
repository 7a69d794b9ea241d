package sink_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
)

// fastEnv is a source table of every type the benchmark uses (so the
// binary path is exercised), a reader over it and the config of its copy.
type fastEnv struct {
	db  *pgtest.DB
	cfg *config.Config
	src *source.Reader
}

const fastCols = "id, updated_at, name, price, tags, attrs"

func newFastEnv(t testing.TB, rows, pageSize int) *fastEnv {
	t.Helper()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text,
  price numeric(12,2), tags text[], attrs jsonb)`)
	db.Exec(t, `CREATE INDEX ON src (updated_at, id)`)
	// 40% of the rows share one updated_at; values with tabs, quotes,
	// backslashes and NULLs.
	db.Exec(t, `INSERT INTO src SELECT i,
  CASE WHEN i % 5 < 2 THEN timestamptz '2026-01-01 00:00:00+00' ELSE timestamptz '2025-12-31 00:00:00+00' + i * interval '97 microseconds' END,
  CASE WHEN i % 7 = 0 THEN NULL ELSE 'n' || i || E'\t"q\\' END,
  i * 1.25,
  ARRAY['a' || i, NULL, 'x,"y"'],
  jsonb_build_object('i', i, 's', 'v' || (i % 3))
FROM generate_series(1, $1::int) i`, rows)
	c, err := config.Parse("fast.yaml", []byte(fmt.Sprintf(`
name: fast
source:
  dsn: %s
  table: public.src
  cursor: [updated_at, id]
  page_size: %d
sink:
  dsn: %s
  table: public.copy
  key: [id]
`, db.URL, pageSize, db.URL)))
	if err != nil {
		t.Fatal(err)
	}
	src, err := source.Open(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close(context.Background()) })
	return &fastEnv{db: db, cfg: c, src: src}
}

func (e *fastEnv) openSink(t testing.TB, binary bool) *sink.Postgres {
	t.Helper()
	ctx := context.Background()
	s, err := sink.OpenPostgres(ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	if err := s.Prepare(ctx, e.src.Table().Columns); err != nil {
		t.Fatal(err)
	}
	if !s.WantsBinary() {
		t.Fatal("the sink does not want binary values for built-in types of the same type on both sides")
	}
	if binary {
		e.src.UseBinary()
	}
	return s
}

// pages reads the whole source in cursor order.
func (e *fastEnv) pages(t testing.TB) []page.Page {
	t.Helper()
	var out []page.Page
	var pos source.Position
	for {
		p, err := e.src.ReadPage(context.Background(), pos, e.cfg.Source.PageSize)
		if err != nil {
			t.Fatal(err)
		}
		if p.Len() == 0 {
			return out
		}
		out = append(out, p)
		pos = source.Position{After: p.Last}
	}
}

func apply(t testing.TB, s *sink.Postgres, p page.Page) sink.Result {
	t.Helper()
	r, err := s.Apply(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rowsOf prints every row of table, ordered by id, as text.
func rowsOf(t *testing.T, db *pgtest.DB, table string) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), "SELECT t::text FROM (SELECT "+fastCols+" FROM "+table+" ORDER BY id) t")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameRows fails unless the copy equals the source row by row.
func sameRows(t *testing.T, db *pgtest.DB) {
	t.Helper()
	want, got := rowsOf(t, db, "src"), rowsOf(t, db, "copy")
	if len(got) != len(want) {
		t.Fatalf("the copy has %d rows, the source %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("row %d differs:\n copy   %s\n source %s", i, got[i], want[i])
		}
	}
}

func wantStats(t *testing.T, s *sink.Postgres, fast, upserted, conflicts int64) {
	t.Helper()
	f, u, c := s.FastStats()
	if f != fast || u != upserted || c != conflicts {
		t.Fatalf("pages fast/upserted/conflicts = %d/%d/%d, want %d/%d/%d", f, u, c, fast, upserted, conflicts)
	}
}

func TestFastPathOnEmptyCopy(t *testing.T) {
	for _, binary := range []bool{true, false} {
		t.Run(fmt.Sprintf("binary=%v", binary), func(t *testing.T) {
			e := newFastEnv(t, 2000, 300)
			s := e.openSink(t, binary)
			ps := e.pages(t)
			var written int64
			for _, p := range ps {
				if p.Binary != binary {
					t.Fatalf("page binary = %v, want %v", p.Binary, binary)
				}
				written += apply(t, s, p).Written
			}
			if written != 2000 {
				t.Fatalf("written %d rows, want 2000", written)
			}
			wantStats(t, s, int64(len(ps)), 0, 0)
			sameRows(t, e.db)
		})
	}
}

func TestFastPathReappliedPage(t *testing.T) {
	e := newFastEnv(t, 1000, 200)
	s := e.openSink(t, true)
	ps := e.pages(t)
	for _, p := range ps[:3] {
		apply(t, s, p)
	}
	// A crash between a commit and its watermark re-applies the page: the
	// COPY meets the stored keys, rolls back, and the upsert writes nothing.
	if r := apply(t, s, ps[2]); r.Written != 0 {
		t.Fatalf("re-applied page wrote %d rows, want 0", r.Written)
	}
	wantStats(t, s, 3, 1, 1)
	// Now cautious: the next pages are probed first, found new, and copied.
	for _, p := range ps[3:] {
		apply(t, s, p)
	}
	wantStats(t, s, int64(len(ps)), 1, 1)
	sameRows(t, e.db)

	// A new run over a filled copy probes before copying: no failed COPY.
	s2, err := sink.OpenPostgres(context.Background(), e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	if err := s2.Prepare(context.Background(), e.src.Table().Columns); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if r := apply(t, s2, p); r.Written != 0 {
			t.Fatalf("re-applied run wrote %d rows, want 0", r.Written)
		}
	}
	wantStats(t, s2, 0, int64(len(ps)), 0)
	sameRows(t, e.db)
}

func TestFastPathOverlapsStoredRows(t *testing.T) {
	e := newFastEnv(t, 1000, 200)
	ps := e.pages(t)
	// The copy already holds stale versions of some keys of page 2, and a
	// newer version of one of them that the upsert must keep.
	keys := []int64{}
	for _, r := range ps[2].Rows[50:60] {
		var k int64
		fmt.Sscan(string(r[0]), &k)
		keys = append(keys, k)
	}
	s := e.openSink(t, true)
	ps = e.pages(t) // binary now
	e.db.Exec(t, `INSERT INTO copy SELECT id, updated_at - interval '1 day', 'stale', price, tags, attrs FROM src WHERE id = ANY($1)`, keys)
	e.db.Exec(t, `UPDATE copy SET updated_at = updated_at + interval '2 days', name = 'newer' WHERE id = $1`, keys[0])
	s.Close(context.Background())
	s = e.openSink(t, true)
	var written int64
	for _, p := range ps {
		written += apply(t, s, p).Written
	}
	if written != 1000-1 {
		t.Fatalf("written %d rows, want 999 (all but the newer stored row)", written)
	}
	// Page 2 holds stored keys and goes by the upsert; no COPY failed.
	wantStats(t, s, int64(len(ps))-1, 1, 0)
	var name string
	if err := e.db.Pool.QueryRow(context.Background(), "SELECT name FROM copy WHERE id = $1", keys[0]).Scan(&name); err != nil || name != "newer" {
		t.Fatalf("the newer stored row was overwritten by an older one: name %q, %v", name, err)
	}
	e.db.Exec(t, "DELETE FROM copy WHERE id = $1", keys[0])
	e.db.Exec(t, "DELETE FROM src WHERE id = $1", keys[0])
	sameRows(t, e.db)
}

func TestFastPathConcurrentWriters(t *testing.T) {
	e := newFastEnv(t, 1000, 100)
	s := e.openSink(t, true)
	ctx := context.Background()
	var pos source.Position
	for n := 0; ; n++ {
		p, err := e.src.ReadPage(ctx, pos, e.cfg.Source.PageSize)
		if err != nil {
			t.Fatal(err)
		}
		if p.Len() == 0 {
			break
		}
		apply(t, s, p)
		pos = source.Position{After: p.Last}
		switch n {
		case 2:
			// A source writer moves rows already copied to the end of the
			// cursor order: a later page repeats their keys.
			e.db.Exec(t, `UPDATE src SET updated_at = timestamptz '2027-01-01' + id * interval '1 microsecond', name = 'moved' WHERE id IN (SELECT id FROM copy ORDER BY id LIMIT 5)`)
		case 4:
			// A writer on the copy inserts a key a later page holds.
			e.db.Exec(t, `INSERT INTO copy SELECT id, updated_at - interval '1 hour', 'foreign', price, tags, attrs FROM src WHERE id = (SELECT max(id) FROM src)`)
		}
	}
	_, upserted, conflicts := s.FastStats()
	if conflicts == 0 || upserted == 0 {
		t.Fatalf("no page fell back to the upsert (upserted %d, conflicts %d)", upserted, conflicts)
	}
	sameRows(t, e.db)
	if got := rowsOf(t, e.db, "copy"); !slices.ContainsFunc(got, func(r string) bool { return strings.Contains(r, "moved") }) {
		t.Fatal("the moved rows' new values are not in the copy")
	}
}

// TestSoftDeleteSourcesKeepTheirOwnPath checks that a source with a
// soft-delete column skips the fast path (its pages mean more than rows to
// insert: a flagged row is removed) and still commits through the sink's
// own apply, with every commit made durable by Flush.
func TestSoftDeleteSourcesKeepTheirOwnPath(t *testing.T) {
	e := newFastEnv(t, 600, 200)
	e.db.Exec(t, "ALTER TABLE src ADD COLUMN deleted boolean NOT NULL DEFAULT false")
	e.db.Exec(t, "UPDATE src SET deleted = true WHERE id % 10 = 0")
	e.cfg.Source.DeletedColumn = "deleted"
	ctx := context.Background()
	src, err := source.Open(ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(ctx)
	e.src = src
	s, err := sink.OpenPostgres(ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if err := s.Prepare(ctx, e.src.Table().Columns); err != nil {
		t.Fatal(err)
	}
	if s.WantsBinary() {
		t.Fatal("a soft-delete source asked for binary pages")
	}
	ps := e.pages(t)
	for _, p := range ps {
		apply(t, s, p)
	}
	wantStats(t, s, 0, 0, 0)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Durable(); got != int64(len(ps)) {
		t.Fatalf("durable pages %d after Flush, want %d", got, len(ps))
	}
	want, got := rowsOf(t, e.db, "src WHERE NOT deleted"), rowsOf(t, e.db, "copy")
	if !slices.Equal(got, want) {
		t.Fatalf("the copy has %d rows, want the %d rows not flagged deleted, equal", len(got), len(want))
	}
}
