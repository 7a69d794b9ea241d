package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// canonItems is the canonical text of a row of items as reconcile builds it
// (reconcile/canon.go: timestamptz in UTC by to_char, numeric by its text
// since the copy's type is the source's, every value quoted with
// quote_nullable), and rowHash the hash reconcile picks when both servers
// agree on it (hashtextextended under collation "C"). The limit computes exactly what reconcile's first
// checksum pass must compute for every row.
const canonItems = `quote_nullable((y.id)::text) || ',' || quote_nullable(CASE WHEN isfinite(y.updated_at) THEN to_char((y.updated_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || CASE WHEN y.updated_at < '0001-01-01 00:00:00+00' THEN ' BC' ELSE '' END ELSE (y.updated_at)::text END) || ',' || quote_nullable((y.name)::text) || ',' || quote_nullable((y.price)::text) || ',' || quote_nullable((y.tags)::text) || ',' || quote_nullable((y.attrs)::text)`

const rowHash = `hashtextextended((` + canonItems + `) COLLATE "C", 0)`

// reconRep is what the driver reads of `syncd reconcile --json`.
type reconRep struct {
	Changed      int64 `json:"changed"`
	Missing      int64 `json:"missing"`
	Extra        int64 `json:"extra"`
	RowsFetched  int64 `json:"rows_fetched"`
	HashesRead   int64 `json:"hashes_read"`
	RowsCompared int64 `json:"rows_compared"`
}

// reconcile measures `syncd reconcile` on a synced 1M-row copy: identical,
// with 10 scattered differences, and with 2% of the rows differing all
// over the key range (a third missing, a third extra, a third changed).
func (b *bench) reconcile(ctx context.Context, t *table) error {
	if err := b.ensureItems(ctx); err != nil {
		return err
	}
	cfg, err := b.itemsConfig("recon", "items", "items", 1000, "")
	if err != nil {
		return err
	}
	state := b.statePath("recon")
	args := []string{"reconcile", "--config", cfg, "--state", state, "--source", "recon", "--json"}
	if r, err := b.syncd(ctx, args...); notInBuild(r, err) {
		t.missing("reconcile", "`syncd reconcile` is not in this build")
		return nil
	}
	// Reconcile covers what the watermark says was synced: sync the copy
	// with syncd itself.
	os.Remove(state)
	if err := b.emptyCopy(ctx, "items"); err != nil {
		return err
	}
	if _, err := b.syncd(ctx, "run", "--once", "--config", cfg, "--state", state); err != nil {
		return err
	}
	if _, err := b.dst.Exec(ctx, "VACUUM ANALYZE items"); err != nil {
		return err
	}
	measure := func(limit func(context.Context) (time.Duration, error), want int64) (syn, lim []time.Duration, rep reconRep, rss int64, err error) {
		for range b.o.runs {
			d, err := limit(ctx)
			if err != nil {
				return nil, nil, rep, 0, err
			}
			lim = append(lim, d)
			r, err := b.syncd(ctx, args...)
			if err != nil && !(want > 0 && r.exit == 1) {
				return nil, nil, rep, 0, err
			}
			if err := json.Unmarshal(r.stdout, &rep); err != nil {
				return nil, nil, rep, 0, fmt.Errorf("reconcile --json printed %q: %w", r.stdout, err)
			}
			if got := rep.Changed + rep.Missing + rep.Extra; got != want {
				return nil, nil, rep, 0, fmt.Errorf("reconcile found %d changed, %d missing, %d extra rows; want %d in all", rep.Changed, rep.Missing, rep.Extra, want)
			}
			syn = append(syn, r.wall)
			rss = max(rss, r.maxRSS)
		}
		return syn, lim, rep, rss, nil
	}
	ratio := func(s, l time.Duration) string { return fmt.Sprintf("%.2f", s.Seconds()/l.Seconds()) }
	pct := func(n int64) float64 { return 100 * float64(n) / float64(b.rows) }

	// Identical.
	syn, lim, rep, rss, err := measure(b.hashBoth, 0)
	if err != nil {
		return err
	}
	if rep.RowsCompared != int64(b.rows) {
		return fmt.Errorf("reconcile compared %d rows of %d", rep.RowsCompared, b.rows)
	}
	t.add(row{
		name: "reconcile, identical, " + fmtRows(b.rows) + " rows", syncd: fmtDur(median(syn)), limit: fmtDur(median(lim)),
		ratio: ratio(median(syn), median(lim)), target: "<= 1.30 (time)",
		note: fmt.Sprintf("limit: the canonical row hash summed over both tables at once; peak RSS %s; runs syncd %s, limit %s", fmtMB(rss), durs(syn), durs(lim)),
	})

	// 10 scattered differences.
	ids := make([]int64, 10)
	for i := range ids {
		ids[i] = int64(i)*int64(b.rows)/10 + 7
	}
	if _, err := b.dst.Exec(ctx, "UPDATE items SET price = price + 0.01 WHERE id = ANY($1)", ids); err != nil {
		return err
	}
	syn, lim, rep, rss, err = measure(b.hashBoth, 10)
	if err != nil {
		return err
	}
	t.add(row{
		name: "reconcile, 10 differences, " + fmtRows(b.rows) + " rows", syncd: fmtDur(median(syn)), limit: fmtDur(median(lim)),
		ratio: ratio(median(syn), median(lim)), target: "fetched < 0.1%",
		note: fmt.Sprintf("whole rows fetched %d (%.4f%% of the table), (key, hash) pairs read %d (%.3f%%); peak RSS %s; runs syncd %s, limit %s",
			rep.RowsFetched, pct(rep.RowsFetched), rep.HashesRead, pct(rep.HashesRead), fmtMB(rss), durs(syn), durs(lim)),
	})
	if _, err := b.dst.Exec(ctx, "UPDATE items SET price = price - 0.01 WHERE id = ANY($1)", ids); err != nil {
		return err
	}

	// 2% scattered: id % 150 = 1 deleted from the source (extra in the
	// copy), = 2 changed in the copy, = 3 deleted from the copy (missing).
	// The deleted rows are kept aside and put back afterwards.
	if err := execAll(ctx, b.src, "CREATE TABLE items_aside AS SELECT * FROM items WHERE id % 150 = 1", "DELETE FROM items WHERE id % 150 = 1", "VACUUM ANALYZE items"); err != nil {
		return err
	}
	if err := execAll(ctx, b.dst, "CREATE TABLE items_aside AS SELECT * FROM items WHERE id % 150 = 3", "DELETE FROM items WHERE id % 150 = 3",
		"UPDATE items SET price = price + 0.01 WHERE id % 150 = 2", "VACUUM ANALYZE items"); err != nil {
		return err
	}
	var differing, keys int64
	var changed int64
	if err := b.src.QueryRow(ctx, "SELECT count(*) FILTER (WHERE id % 150 IN (1, 2, 3)), count(*) FILTER (WHERE id % 150 = 2) FROM generate_series(1, $1::bigint) id", b.rows).Scan(&keys, &changed); err != nil {
		return err
	}
	// Rows that differ, both sides: a missing row is one source row, an
	// extra row one copy row, a changed row one of each.
	differing = keys + changed
	syn, lim, rep, rss, err = measure(b.streamBoth, keys)
	if err != nil {
		return err
	}
	t.add(row{
		name: "reconcile, 2% scattered, " + fmtRows(b.rows) + " rows", syncd: fmtDur(median(syn)), limit: fmtDur(median(lim)),
		ratio: ratio(median(syn), median(lim)), target: "<= 1.50, fetched <= 1.2x",
		note: fmt.Sprintf("limit: stream (id, md5(row)) of both tables at once; %d keys differ (%d rows on both sides); whole rows fetched %d (%.2fx the differing rows), (key, hash) pairs read %d; peak RSS %s; runs syncd %s, limit %s",
			keys, differing, rep.RowsFetched, float64(rep.RowsFetched)/float64(differing), rep.HashesRead, fmtMB(rss), durs(syn), durs(lim)),
	})
	if err := execAll(ctx, b.src, "INSERT INTO items SELECT * FROM items_aside", "DROP TABLE items_aside", "VACUUM ANALYZE items"); err != nil {
		return err
	}
	return execAll(ctx, b.dst, "INSERT INTO items SELECT * FROM items_aside", "DROP TABLE items_aside",
		"UPDATE items SET price = price - 0.01 WHERE id % 150 = 2", "VACUUM ANALYZE items")
}

// hashBoth is the limit of reconciling identical tables: one pass of the
// canonical row hash over each table, both at the same time.
func (b *bench) hashBoth(ctx context.Context) (time.Duration, error) {
	return both(ctx, b.src, b.dst, func(c *pgx.Conn) error {
		var s *string
		return c.QueryRow(ctx, "SELECT sum("+rowHash+")::text FROM items y").Scan(&s)
	})
}

// streamBoth is the limit of a compare by streaming: every (id, md5 of the
// row's text) of both tables read by the client, both at the same time.
func (b *bench) streamBoth(ctx context.Context) (time.Duration, error) {
	return both(ctx, b.src, b.dst, func(c *pgx.Conn) error {
		_, err := c.PgConn().CopyTo(ctx, io.Discard, "COPY (SELECT id, md5(t::text) FROM items t) TO STDOUT")
		return err
	})
}

func both(ctx context.Context, a, c *pgx.Conn, fn func(*pgx.Conn) error) (time.Duration, error) {
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, conn := range []*pgx.Conn{a, c} {
		wg.Go(func() { errs[i] = fn(conn) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		return 0, fmt.Errorf("limit: %v %v", errs[0], errs[1])
	}
	return time.Since(start), nil
}
