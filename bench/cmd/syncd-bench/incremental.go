package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// incremental measures one `run --once` after 10,000 random updates, on
// the 1M table and again after growing it to 5M, against keyset pages
// copied by hand into a staging table and upserted in SQL.
func (b *bench) incremental(ctx context.Context, t *table) error {
	if err := b.ensureItems(ctx); err != nil {
		return err
	}
	for _, tb := range []string{"items_inc", "items_lim"} {
		if _, err := b.dst.Exec(ctx, itemsDDL(tb)); err != nil {
			return err
		}
	}
	updates := max(1000, int(10_000*min(1, b.o.scale*10)))
	small, smallLim, err := b.incrementalAt(ctx, t, updates, 0)
	if err != nil {
		return err
	}
	from := b.rows
	big := b.o.rows(5_000_000)
	fmt.Fprintf(os.Stderr, "syncd-bench: growing items to %d rows ...\n", big)
	if err := fill(ctx, b.src, "items", from+1, big); err != nil {
		return err
	}
	if _, err := b.src.Exec(ctx, "VACUUM ANALYZE items"); err != nil {
		return err
	}
	b.rows = big
	large, largeLim, err := b.incrementalAt(ctx, t, updates, from)
	if err != nil {
		return err
	}
	growth, limGrowth := large.Seconds()/small.Seconds(), largeLim.Seconds()/smallLim.Seconds()
	t.add(row{
		name:   fmt.Sprintf("incremental, %s vs %s rows", fmtRows(big), fmtRows(from)),
		syncd:  fmt.Sprintf("%s vs %s (x%.2f)", fmtDur(large), fmtDur(small), growth),
		limit:  fmt.Sprintf("%s vs %s (x%.2f)", fmtDur(largeLim), fmtDur(smallLim), limGrowth),
		ratio:  fmt.Sprintf("%.2f", growth/limGrowth),
		target: "<= 1.20",
		note:   "syncd's growth from the small table to the big one over the limit's",
	})
	return nil
}

// incrementalAt brings items_inc and items_lim level with the source
// (copying ids above copied), then times rounds of updates + one run each.
func (b *bench) incrementalAt(ctx context.Context, t *table, updates, copied int) (time.Duration, time.Duration, error) {
	for _, tb := range []string{"items_inc", "items_lim"} {
		q := "SELECT " + itemCols + " FROM items WHERE id > " + fmt.Sprint(copied)
		if _, err := b.pipeCopy(ctx, b.srcDB, q, b.dstDB, tb+" ("+itemCols+")"); err != nil {
			return 0, 0, err
		}
		if _, err := b.dst.Exec(ctx, "VACUUM ANALYZE "+tb); err != nil {
			return 0, 0, err
		}
	}
	cfg, err := b.itemsConfig("incremental", "items", "items_inc", 1000, "  lookback: 0s\n")
	if err != nil {
		return 0, 0, err
	}
	state := b.statePath("incremental")
	var syn, lim []time.Duration
	for i := range b.o.runs {
		last, err := lastCursor(ctx, b.src)
		if err != nil {
			return 0, 0, err
		}
		if i == 0 {
			// Point the watermark at the end of what both copies hold.
			os.Remove(state)
			if _, err := b.syncd(ctx, "resync", "--config", cfg, "--state", state, "--source", "incremental", "--from", last[2]); err != nil {
				return 0, 0, err
			}
		}
		if _, err := b.src.Exec(ctx, `UPDATE items SET updated_at = clock_timestamp(), price = price + 1
WHERE id IN (SELECT DISTINCT (1 + floor(random() * $1))::bigint FROM generate_series(1, $2 + $2 / 5) LIMIT $2)`, b.rows, updates); err != nil {
			return 0, 0, err
		}
		var ds, dl time.Duration
		measureSyncd := func() error {
			if _, err := b.admin.Exec(ctx, "CHECKPOINT"); err != nil {
				return err
			}
			r, err := b.syncd(ctx, "run", "--once", "--config", cfg, "--state", state)
			ds = r.wall
			return err
		}
		measureLimit := func() error {
			if _, err := b.admin.Exec(ctx, "CHECKPOINT"); err != nil {
				return err
			}
			var err error
			dl, err = b.limitUpsert(ctx, last[:2], 1000)
			return err
		}
		first, second := measureSyncd, measureLimit
		if i%2 == 1 {
			first, second = measureLimit, measureSyncd
		}
		if err := first(); err != nil {
			return 0, 0, err
		}
		if err := second(); err != nil {
			return 0, 0, err
		}
		syn, lim = append(syn, ds), append(lim, dl)
		fmt.Fprintf(os.Stderr, "  %d rows, round %d: syncd %s, limit %s\n", b.rows, i+1, fmtDur(ds), fmtDur(dl))
	}
	for _, tb := range []string{"items_inc", "items_lim"} {
		same, err := sameContent(ctx, b.src, "items", b.dst, tb)
		if err != nil {
			return 0, 0, err
		}
		if !same {
			return 0, 0, fmt.Errorf("%s differs from the source after the incremental runs", tb)
		}
	}
	s, l := median(syn), median(lim)
	t.add(row{
		name:   fmt.Sprintf("incremental, %s updates on %s rows", fmtRows(updates), fmtRows(b.rows)),
		syncd:  fmtDur(s),
		limit:  fmtDur(l),
		ratio:  fmt.Sprintf("%.2f", s.Seconds()/l.Seconds()),
		target: "<= 1.50 (time)",
		note:   fmt.Sprintf("one run --once incl. process start; runs syncd %s, limit %s", durs(syn), durs(lim)),
	})
	return s, l, nil
}

// lastCursor is the greatest (updated_at, id) of the source, as text, and
// updated_at as RFC 3339 plus one microsecond (for resync --from).
func lastCursor(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	var ts, id, next string
	err := conn.QueryRow(ctx, `SELECT updated_at::text, id::text,
  to_char((updated_at + interval '1 microsecond') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
FROM items ORDER BY updated_at DESC, id DESC LIMIT 1`).Scan(&ts, &id, &next)
	return []string{ts, id, next}, err
}

// limitUpsert is the incremental limit: keyset pages after the cursor,
// each copied out in binary (as psql's COPY ... TO STDOUT does), copied
// into a staging table and upserted with one INSERT ... ON CONFLICT, one
// transaction per page.
func (b *bench) limitUpsert(ctx context.Context, after []string, pageSize int) (time.Duration, error) {
	start := time.Now()
	// Fresh connections, as two psql sessions would open.
	src, err := pgx.Connect(ctx, b.url(b.srcDB))
	if err != nil {
		return 0, err
	}
	defer src.Close(context.WithoutCancel(ctx))
	dst, err := pgx.Connect(ctx, b.url(b.dstDB))
	if err != nil {
		return 0, err
	}
	defer dst.Close(context.WithoutCancel(ctx))
	var buf bytes.Buffer
	sets := "updated_at = EXCLUDED.updated_at, name = EXCLUDED.name, price = EXCLUDED.price, tags = EXCLUDED.tags, attrs = EXCLUDED.attrs"
	ts, id := after[0], after[1]
	for {
		buf.Reset()
		q := fmt.Sprintf("COPY (SELECT %s FROM items WHERE (updated_at, id) > ('%s'::timestamptz, %s) ORDER BY updated_at, id LIMIT %d) TO STDOUT (FORMAT binary)", itemCols, ts, id, pageSize)
		if _, err := src.PgConn().CopyTo(ctx, &buf, q); err != nil {
			return 0, fmt.Errorf("limit: read page: %w", err)
		}
		var n int64
		err := pgx.BeginFunc(ctx, dst, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "CREATE TEMP TABLE IF NOT EXISTS lim_stage (LIKE items_lim) ON COMMIT DELETE ROWS"); err != nil {
				return err
			}
			tag, err := tx.Conn().PgConn().CopyFrom(ctx, &buf, "COPY lim_stage ("+itemCols+") FROM STDIN (FORMAT binary)")
			if err != nil {
				return err
			}
			n = tag.RowsAffected()
			if _, err := tx.Exec(ctx, "INSERT INTO items_lim ("+itemCols+") SELECT "+itemCols+" FROM lim_stage ON CONFLICT (id) DO UPDATE SET "+sets); err != nil {
				return err
			}
			if n > 0 {
				return tx.QueryRow(ctx, "SELECT updated_at::text, id::text FROM lim_stage ORDER BY updated_at DESC, id DESC LIMIT 1").Scan(&ts, &id)
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("limit: apply page: %w", err)
		}
		if n < int64(pageSize) {
			return time.Since(start), nil
		}
	}
}
