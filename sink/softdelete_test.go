package sink_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/sink"
)

// TestSoftDeletes applies pages whose rows carry a deleted flag: a flagged
// row leaves the copy in the page's transaction, unless the copy holds a
// newer version, or keep_deleted keeps it with its flag.
func TestSoftDeletes(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprint("keep_deleted=", keep), func(t *testing.T) {
			db := pgtest.NewDB(t)
			ctx := context.Background()
			c, err := config.Parse("soft.yaml", []byte(fmt.Sprintf(`
name: soft
source:
  dsn: %s
  table: public.src
  cursor: [updated_at, id]
  deleted_column: deleted
sink:
  dsn: %s
  table: public.copy
  keep_deleted: %v
`, db.URL, db.URL, keep)))
			if err != nil {
				t.Fatal(err)
			}
			s, err := sink.OpenPostgres(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			if err := s.Prepare(ctx, []page.Column{
				{Name: "id", Type: "bigint", NotNull: true},
				{Name: "updated_at", Type: "timestamp with time zone", NotNull: true},
				{Name: "deleted", Type: "boolean"},
			}); err != nil {
				t.Fatal(err)
			}
			row := func(id, sec int, deleted string) [][]byte {
				var d []byte
				if deleted != "" {
					d = []byte(deleted)
				}
				return [][]byte{[]byte(fmt.Sprint(id)), []byte(fmt.Sprintf("2026-01-01 00:00:%02d+00", sec)), d}
			}
			apply := func(rows ...[][]byte) sink.Result {
				t.Helper()
				r, err := s.Apply(ctx, page.Page{Rows: rows})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			contents := func() []string {
				t.Helper()
				rows, err := db.Pool.Query(ctx, "SELECT id::text || '=' || coalesce(deleted::text, 'null') FROM public.copy ORDER BY id")
				if err != nil {
					t.Fatal(err)
				}
				out, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			apply(row(1, 1, ""), row(2, 1, "false"), row(3, 1, ""), row(4, 5, ""))
			r := apply(row(1, 2, "true"), row(3, 2, "false"), row(4, 3, "true")) // row 4: an older delete
			want := []string{"2=false", "3=false", "4=null"}
			wantDeleted := int64(1)
			if keep {
				want = []string{"1=true", "2=false", "3=false", "4=null"}
				wantDeleted = 0
			}
			if got := contents(); !slices.Equal(got, want) {
				t.Fatalf("copy holds %v, want %v", got, want)
			}
			if r.Deleted != wantDeleted {
				t.Errorf("Result.Deleted = %d, want %d", r.Deleted, wantDeleted)
			}
			// A row deleted before the copy ever saw it is not inserted.
			apply(row(9, 9, "true"))
			if got := contents(); slices.Contains(got, "9=true") != keep {
				t.Fatalf("copy holds %v after a page with deleted row 9", got)
			}
		})
	}
}
