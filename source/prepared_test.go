package source_test

import (
	"context"
	"strings"
	"testing"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/source"
)

// A page statement is prepared in the round trip of its first execution:
// the pages read are the table's, a statement the server refuses fails the
// read with the server's reason and leaves the session usable (the next
// page prepares it again), and the reader's session holds no prepared
// page statement that the reader does not know of.
func TestPageStatementPreparedWithFirstRead(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE ev (id int PRIMARY KEY, updated_at timestamptz NOT NULL, v text);
INSERT INTO ev SELECT g, '2026-01-01'::timestamptz + g * interval '1 second', 'v' || g FROM generate_series(1, 5) g`)
	c, err := config.Parse("ev.yaml", []byte(`name: ev
source:
  dsn: `+db.URL+`
  table: public.ev
  cursor: [updated_at, id]
  where: "v <> 'v3'"
sink:
  dsn: `+db.URL+`
  table: public.ev_copy
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := source.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	prepared := func() int {
		var n int
		if err := r.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'syncd_page_%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	p, err := r.ReadPage(ctx, source.Position{}, 2)
	if err != nil || p.Len() != 2 || strings.Join(p.Last, ",") != "2026-01-01 00:00:02+00,2" {
		t.Fatalf("first page: %d rows, last %v, %v; want 2 rows ending at id 2", p.Len(), p.Last, err)
	}
	p, err = r.ReadPage(ctx, source.Position{After: p.Last}, 2)
	if err != nil || p.Len() != 2 || p.Last[1] != "5" {
		t.Fatalf("second page: %d rows, last %v, %v; want ids 4 and 5 (3 filtered out)", p.Len(), p.Last, err)
	}
	if n := prepared(); n != 2 {
		t.Errorf("%d page statements prepared on the session, want 2 (from the start, after a cursor)", n)
	}
	// A column the reader selects is dropped: the Parse fails.
	db.Exec(t, `ALTER TABLE ev DROP COLUMN v`)
	if _, err := r.ReadPage(ctx, source.Position{Before: "2027-01-01 00:00:00+00"}, 2); err == nil || !strings.Contains(err.Error(), `column "v" does not exist`) {
		t.Fatalf("page after the column was dropped: %v, want the server's reason", err)
	}
	if n := prepared(); n != 2 {
		t.Errorf("%d page statements prepared after a refused one, want 2", n)
	}
	db.Exec(t, `ALTER TABLE ev ADD COLUMN v text DEFAULT 'w'`)
	p, err = r.ReadPage(ctx, source.Position{Before: "2027-01-01 00:00:00+00"}, 10)
	if err != nil || p.Len() != 5 {
		t.Fatalf("page after the column came back: %d rows, %v; want all 5", p.Len(), err)
	}
}
