package sink_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/sink/sinktest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func testConfig(t *testing.T, db *pgtest.DB) *config.Config {
	t.Helper()
	yaml := fmt.Sprintf(`
name: conformance
source:
  dsn: %s
  table: public.src
  cursor: [updated_at, id]
sink:
  dsn: %s
  table: public.copy
  key: [id]
`, db.URL, db.URL)
	c, err := config.Parse("conformance.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pgKind is the table copy's kind, whose declarations the suite checks.
var pgKind = kind.Postgres()

func TestPostgresConformance(t *testing.T) {
	sinktest.Exercise(t, func(t *testing.T) sinktest.Harness {
		db := pgtest.NewDB(t)
		cfg := testConfig(t, db)
		return sinktest.Harness{
			Columns: []page.Column{
				{Name: "id", Type: "bigint", TypeOID: 20, NotNull: true},
				{Name: "updated_at", Type: "timestamp with time zone", TypeOID: 1184, NotNull: true},
				{Name: "val", Type: "text", TypeOID: 25},
			},
			Has:    sinktest.Capabilities{Deferred: true, Binary: true, LockHolder: true, Recorder: true, SchemaFollower: true},
			Kind:   &pgKind,
			Config: func(*testing.T) *config.Config { return cfg },
			Moved: func(*testing.T) *config.Config {
				moved := *cfg
				moved.Sink.DSN = strings.Replace(cfg.Sink.DSN, "/"+db.Name, "/"+db.Name+"_moved", 1)
				return &moved
			},
			Register: func(t *testing.T) string {
				conn, err := pgx.Connect(context.Background(), db.URL)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(context.Background())
				if err := catalog.Ensure(context.Background(), conn); err != nil {
					t.Fatal(err)
				}
				if _, _, err := catalog.Claim(context.Background(), conn, catalog.Record{Copy: "public.copy", SourceName: "conformance"}); err != nil {
					t.Fatal(err)
				}
				return "public.copy"
			},
			Recorded: func(t *testing.T) []string {
				var cur []string
				if err := db.Pool.QueryRow(context.Background(), "SELECT cursor FROM syncd.copies WHERE copy_table = 'public.copy'").Scan(&cur); err != nil {
					t.Fatal(err)
				}
				return cur
			},
			BinaryPage: func(keys []int64, version int) page.Page {
				p := page.Page{Binary: true}
				// The same values as Page: microseconds since 2000-01-01 UTC.
				micros := (time.Date(2026, 1, 1, 0, 0, version, 1000, time.UTC).Sub(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))).Microseconds()
				for _, k := range keys {
					p.Rows = append(p.Rows, [][]byte{binary.BigEndian.AppendUint64(nil, uint64(k)), binary.BigEndian.AppendUint64(nil, uint64(micros)), []byte(fmt.Sprintf("k%d\tv%d", k, version))})
				}
				if len(keys) > 0 {
					p.Last = []string{fmt.Sprintf("2026-01-01 00:00:%02d.000001+00", version), fmt.Sprint(keys[len(keys)-1])}
				}
				return p
			},
			Open: func(t *testing.T) sink.Sink {
				s, err := sink.OpenPostgres(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			Page: func(keys []int64, version int) page.Page {
				var p page.Page
				ts := fmt.Sprintf("2026-01-01 00:00:%02d.000001+00", version)
				for _, k := range keys {
					p.Rows = append(p.Rows, [][]byte{[]byte(fmt.Sprint(k)), []byte(ts), []byte(fmt.Sprintf("k%d\tv%d", k, version))})
				}
				if len(keys) > 0 {
					p.Last = []string{ts, fmt.Sprint(keys[len(keys)-1])}
				}
				return p
			},
			Contents: func(t *testing.T) []string {
				rows, err := db.Pool.Query(context.Background(), "SELECT id, val FROM public.copy")
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				var id int64
				var val string
				if _, err := pgx.ForEachRow(rows, []any{&id, &val}, func() error {
					out = append(out, fmt.Sprintf("%d=%s", id, val))
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				sort.Strings(out)
				return out
			},
			Expect: func(state map[int64]int) []string {
				var out []string
				for k, v := range state {
					out = append(out, fmt.Sprintf("%d=k%d\tv%d", k, k, v))
				}
				sort.Strings(out)
				return out
			},
		}
	})
}
