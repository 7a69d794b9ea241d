package sink_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
)

// equalButNotSame are SET clauses giving a value that PostgreSQL's = calls
// equal to the one the test inserts first, but whose text differs; one row
// each, by key.
var equalButNotSame = []string{
	1:  "n = 1.000000",
	2:  "na = '{1.0,2.0}'",
	3:  `jb = '{"a": 1.00}'`,
	4:  `j = '{"b": 2, "a": 1}'`,
	5:  "f8 = '-0'",
	6:  "f4 = '-0'",
	7:  "iv = '24 hours'",
	8:  "nr = '[1.00,2.0)'",
	9:  "bp = 'a '",
	10: `ba = '{"a "}'`,
}

// TestUpsertWritesValuesEqualButNotSame applies a page of rows to an empty
// copy (by the fast path), changes the source's values to equal but not
// the same ones without moving the cursor, and applies the pages read
// again (as a run does for rows with a NULL cursor, or a resync): the
// upsert must rewrite exactly the changed rows, so that the copy holds the
// source's text. With binary and with text pages.
func TestUpsertWritesValuesEqualButNotSame(t *testing.T) {
	for _, binary := range []bool{true, false} {
		t.Run(fmt.Sprintf("binary=%v", binary), func(t *testing.T) {
			ctx := context.Background()
			db := pgtest.NewDB(t)
			db.Exec(t, `CREATE TABLE src (id int PRIMARY KEY, updated_at timestamptz NOT NULL,
  n numeric, na numeric[], jb jsonb, j json, f8 float8, f4 float4, iv interval, nr numrange, bp bpchar, ba bpchar[], tt timetz)`)
			db.Exec(t, `INSERT INTO src SELECT g, '2026-01-01 00:00:00+00', 1.0, '{1,2}', '{"a": 1.0}', '{"a": 1, "b": 2}',
  0, 0, '1 day', '[1.0,2.0)', 'a', '{a}', '12:00+01' FROM generate_series(1, 12) g`)
			cfg, err := config.Parse("exact.yaml", []byte(fmt.Sprintf(`
name: exact
source:
  dsn: %s
  table: public.src
  cursor: [updated_at, id]
sink:
  dsn: %s
  table: public.copy
  key: [id]
`, db.URL, db.URL)))
			if err != nil {
				t.Fatal(err)
			}
			src, err := source.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close(ctx)
			s, err := sink.OpenPostgres(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			if err := s.Prepare(ctx, src.Table().Columns); err != nil {
				t.Fatal(err)
			}
			if binary {
				if !s.WantsBinary() {
					t.Fatal("the sink does not want binary values")
				}
				src.UseBinary()
			}
			// readApply reads the whole source as one page, applies it and
			// returns the rows written.
			readApply := func() int64 {
				p, err := src.ReadPage(ctx, source.Position{}, 100)
				if err != nil {
					t.Fatal(err)
				}
				if p.Len() != 12 || p.Binary != binary {
					t.Fatalf("read %d rows, binary %v; want 12, %v", p.Len(), p.Binary, binary)
				}
				r, err := s.Apply(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				return r.Written
			}
			if w := readApply(); w != 12 {
				t.Fatalf("the first page wrote %d rows, want 12", w)
			}
			if fast, up, _ := s.FastStats(); fast != 1 || up != 0 {
				t.Fatalf("the first page went fast %d, upserted %d; want 1, 0", fast, up)
			}
			sameText(t, db)
			for id, set := range equalButNotSame {
				if set != "" {
					db.Exec(t, fmt.Sprintf("UPDATE src SET %s WHERE id = %d", set, id))
				}
			}
			// Rows 11 and 12 are unchanged: the upsert still leaves them alone.
			if w := readApply(); w != int64(len(equalButNotSame)-1) {
				t.Errorf("the page read again wrote %d rows, want %d", w, len(equalButNotSame)-1)
			}
			sameText(t, db)
		})
	}
}

// sameText fails unless the copy holds the source's rows with the same
// text output.
func sameText(t *testing.T, db *pgtest.DB) {
	t.Helper()
	read := func(table string) []string {
		rows, err := db.Pool.Query(context.Background(), "SELECT t::text FROM "+table+" t ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	want, got := read("src"), read("copy")
	if slices.Equal(got, want) {
		return
	}
	if len(got) != len(want) {
		t.Fatalf("the copy has %d rows, the source %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d differs:\n source %s\n copy   %s", i+1, want[i], got[i])
		}
	}
}
