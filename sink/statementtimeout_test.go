package sink_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/sink"
)

// A statement cut off by the sink session's statement_timeout (one the
// sink's database set, stricter than sink.statement_timeout: a first
// load's chunk is one COPY) is explained: the limit the session had, and
// what to raise or shrink, not a bare "canceling statement".
func TestExplainStatementTimeout(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET statement_timeout = '50ms'"); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "SELECT pg_sleep(5)")
	if err == nil {
		t.Fatal("pg_sleep(5) outlived a statement_timeout of 50ms")
	}
	got := sink.Explain(ctx, conn, &config.Config{}, []string{"public.copy"}, err).Error()
	for _, want := range []string{"the copy public.copy", "statement_timeout (50ms;", "sink.statement_timeout: no limit of syncd's own", "SQLSTATE 57014", "source.first_load.chunk_size"} {
		if !strings.Contains(got, want) {
			t.Errorf("the explained error lacks %q: %s", want, got)
		}
	}
}
