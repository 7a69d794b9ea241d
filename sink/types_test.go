package sink

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
)

func TestAssignable(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	s := &Postgres{conn: conn, table: config.Table{Schema: "public", Name: "copy"}}
	for _, c := range []struct {
		src, dst string
		want     bool
	}{
		{"bigint", "bigint", true},
		{"numeric(12,2)", "numeric", true},
		{"character varying(40)", "text", true},
		{"timestamp(3) with time zone", "timestamp with time zone", true},
		{"integer", "bigint", true},
		{"json", "jsonb", true},
		{"integer[]", "integer[]", true},
		{"some_enum_only_in_the_source", "text", true},
		{"text", "integer", false},
		{"jsonb", "integer", false},
		{"uuid", "bigint", false},
		{"boolean", "date", false},
	} {
		got, err := s.assignable(ctx, c.src, c.dst)
		if err != nil {
			t.Fatalf("assignable(%q, %q): %v", c.src, c.dst, err)
		}
		if got != c.want {
			t.Errorf("assignable(%q, %q) = %v, want %v", c.src, c.dst, got, c.want)
		}
	}
}
