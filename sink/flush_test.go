package sink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/sink"
)

// TestFlushReachesTheDisk: pages streamed with asynchronous commits, then
// Flush, which the run loop trusts before writing their watermark: after
// it the sink server's WAL flush position must have passed every page's
// commit. The sink is a quiet throwaway cluster whose WAL writer waits
// 10 s between rounds, so nothing but Flush itself can flush the WAL. (A
// flush transaction that writes no WAL, such as SELECT txid_current()
// alone, flushes nothing even with synchronous_commit on.)
func TestFlushReachesTheDisk(t *testing.T) {
	ctx := context.Background()
	e := newFastEnv(t, 3_000, 50)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cl, err := pgtest.StartCluster(cctx, "wal_writer_delay = '10s'", "autovacuum = off")
	if err != nil {
		t.Fatalf("throwaway cluster: %v", err)
	}
	t.Cleanup(func() { cl.Destroy(context.Background()) })
	admin, err := pgx.Connect(ctx, cl.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	c, err := config.Parse("flush.yaml", []byte(fmt.Sprintf(`
name: flush
source:
  dsn: %s
  table: public.src
  cursor: [updated_at, id]
  page_size: 50
sink:
  dsn: %s
  table: public.copy
  key: [id]
`, e.db.URL, cl.URL())))
	if err != nil {
		t.Fatal(err)
	}
	s, err := sink.OpenPostgres(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if err := s.Prepare(ctx, e.src.Table().Columns); err != nil {
		t.Fatal(err)
	}
	pages := e.pages(t)
	for _, p := range pages {
		apply(t, s, p)
	}
	var last string
	if err := admin.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&last); err != nil {
		t.Fatal(err)
	}
	if s.Durable() == int64(len(pages)) {
		t.Fatalf("all %d pages durable before Flush: the stream did not commit asynchronously, nothing is tested", len(pages))
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Durable() != int64(len(pages)) {
		t.Fatalf("after Flush %d of %d pages are durable", s.Durable(), len(pages))
	}
	var flushed bool
	var flush string
	if err := admin.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn, pg_current_wal_flush_lsn()::text", last).Scan(&flushed, &flush); err != nil {
		t.Fatal(err)
	}
	if !flushed {
		t.Fatalf("Flush said every page is durable, but the server's WAL flush position %s is behind the last page's commit (%s)", flush, last)
	}
}
