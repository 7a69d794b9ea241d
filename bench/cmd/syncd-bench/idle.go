package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/syncd/syncd/internal/pgutil"
)

// idle measures what a run costs when nothing changed: a 1M-row table
// whose newest 40% share one timestamp (a bulk load a minute ago, all of
// it inside the lookback window behind the watermark) is synced once,
// then `run --once` is timed with nothing new, and the rows it made the
// source read are taken from the table's tuple counters (sequential and
// index reads, after syncd's sessions have ended and so flushed them).
func (b *bench) idle(ctx context.Context, t *table) error {
	n := b.o.rows(1_000_000)
	bulk := n * 2 / 5
	fmt.Fprintf(os.Stderr, "syncd-bench: generating %d rows for the idle run (%d sharing the newest timestamp) ...\n", n, bulk)
	if err := execAll(ctx, b.src, itemsDDL("idleitems")); err != nil {
		return err
	}
	if _, err := b.src.Exec(ctx, `INSERT INTO idleitems (`+itemCols+`)
SELECT i,
  CASE WHEN i > $1 THEN now() - interval '1 minute'
       ELSE now() - interval '1 day' + i * interval '10 milliseconds' END,
  'customer ' || md5(i::text), i % 10000, ARRAY['tag' || (i % 17)], jsonb_build_object('score', i % 1000)
FROM generate_series(1, $2::bigint) i`, n-bulk, n); err != nil {
		return err
	}
	if err := execAll(ctx, b.src, "CREATE INDEX ON idleitems (updated_at, id)", "VACUUM ANALYZE idleitems"); err != nil {
		return err
	}
	if _, err := b.dst.Exec(ctx, itemsDDL("idleitems")); err != nil {
		return err
	}
	cfg, err := b.itemsConfig("idle", "idleitems", "idleitems", 1000, "  lookback: 5s\n")
	if err != nil {
		return err
	}
	state := b.statePath("idle")
	if _, err := b.syncd(ctx, "run", "--once", "--config", cfg, "--state", state); err != nil {
		return err
	}
	var reads []int64
	var walls []time.Duration
	for range b.o.runs {
		before, err := b.tuplesRead(ctx, "idleitems")
		if err != nil {
			return err
		}
		r, err := b.syncd(ctx, "run", "--once", "--config", cfg, "--state", state)
		if err != nil {
			return err
		}
		after, err := b.tuplesRead(ctx, "idleitems")
		if err != nil {
			return err
		}
		reads, walls = append(reads, after-before), append(walls, r.wall)
		fmt.Fprintf(os.Stderr, "  idle run: %d rows read, %s\n", after-before, fmtDur(r.wall))
	}
	same, err := sameContent(ctx, b.src, "idleitems", b.dst, "idleitems")
	if err != nil {
		return err
	}
	if !same {
		return fmt.Errorf("idleitems differs from the source after the idle runs")
	}
	read := median(reads)
	t.add(row{
		name:   fmt.Sprintf("idle run, %s rows, %s sharing the newest timestamp", fmtRows(n), fmtRows(bulk)),
		syncd:  fmt.Sprintf("%d rows read (%s)", read, fmtDur(median(walls))),
		limit:  "0 rows",
		ratio:  fmt.Sprintf("%.3f%%", 100*float64(read)/float64(n)),
		target: "< 1% of the table",
		note:   fmt.Sprintf("source tuple counters (seq_tup_read + idx_tup_fetch) per run --once with nothing new, lookback 5s; runs %v rows, %s", reads, durs(walls)),
	})
	return nil
}

// tuplesRead is how many rows of table the source server has read so far,
// once every syncd session of the source database has ended (a backend
// flushes its counters before it leaves pg_stat_activity).
func (b *bench) tuplesRead(ctx context.Context, table string) (int64, error) {
	// The driver's own reads are flushed at its next idle moment.
	if _, err := b.src.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var open int
		if err := b.src.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, pgutil.AppName).Scan(&open); err != nil {
			return 0, err
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d syncd sessions still open on the source 30s after the run", open)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var n int64
	err := b.src.QueryRow(ctx, `SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables WHERE relid = $1::regclass`, "public."+table).Scan(&n)
	return n, err
}
