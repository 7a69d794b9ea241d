package main

import (
	"context"
	"fmt"
	"os"
	"time"
)

// ensureItems creates the source table items with n rows (once) and an
// empty copy with its primary key in the sink database.
func (b *bench) ensureItems(ctx context.Context) error {
	if b.rows > 0 {
		return nil
	}
	n := b.o.rows(1_000_000)
	fmt.Fprintf(os.Stderr, "syncd-bench: generating %d rows ...\n", n)
	if _, err := b.src.Exec(ctx, itemsDDL("items")); err != nil {
		return err
	}
	if err := fill(ctx, b.src, "items", 1, n); err != nil {
		return err
	}
	if _, err := b.src.Exec(ctx, "CREATE INDEX items_cursor ON items (updated_at, id)"); err != nil {
		return err
	}
	if _, err := b.src.Exec(ctx, "VACUUM ANALYZE items"); err != nil {
		return err
	}
	if _, err := b.dst.Exec(ctx, itemsDDL("items")); err != nil {
		return err
	}
	if err := b.src.QueryRow(ctx, "SELECT pg_relation_size('items'), pg_total_relation_size('items')").Scan(&b.heap, &b.total); err != nil {
		return err
	}
	b.rows = n
	return nil
}

// emptyCopy truncates the sink table, releases its record in the syncd
// catalog (each benchmark writes it under a source name of its own, and a
// copy has one writer) and checkpoints, so every timed run starts from the
// same state.
func (b *bench) emptyCopy(ctx context.Context, table string) error {
	if _, err := b.dst.Exec(ctx, "TRUNCATE "+table); err != nil {
		return err
	}
	var catalog bool
	if err := b.dst.QueryRow(ctx, "SELECT to_regclass('syncd.copies') IS NOT NULL").Scan(&catalog); err != nil {
		return err
	}
	if catalog {
		if _, err := b.dst.Exec(ctx, "DELETE FROM syncd.copies WHERE copy_table = $1", "public."+table); err != nil {
			return fmt.Errorf("release the copy public.%s in the syncd catalog: %w", table, err)
		}
	}
	_, err := b.admin.Exec(ctx, "CHECKPOINT")
	return err
}

const orderedItems = "SELECT " + itemCols + " FROM items ORDER BY updated_at, id"

// limitCopy is one run of the initial-sync limit into the empty sink items.
func (b *bench) limitCopy(ctx context.Context) (time.Duration, error) {
	if err := b.emptyCopy(ctx, "items"); err != nil {
		return 0, err
	}
	return b.pipeCopy(ctx, b.srcDB, orderedItems, b.dstDB, "items ("+itemCols+")")
}

// syncdInitial is one initial sync of items into the empty sink items.
func (b *bench) syncdInitial(ctx context.Context, pageSize int) (syncdResult, error) {
	name := fmt.Sprintf("initial-%d", pageSize)
	if pageSize == 0 {
		name = "initial-default"
	}
	extra := ""
	if b.pagesOnly {
		extra = "  first_load: {workers: 0}\n"
	}
	cfg, err := b.itemsConfig(name, "items", "items", pageSize, extra)
	if err != nil {
		return syncdResult{}, err
	}
	state := b.statePath(name)
	os.Remove(state)
	if err := b.emptyCopy(ctx, "items"); err != nil {
		return syncdResult{}, err
	}
	r, err := b.syncdHWM(ctx, "run", "--once", "--config", cfg, "--state", state)
	if err != nil {
		return r, err
	}
	n, err := count(ctx, b.dst, "items")
	if err != nil {
		return r, err
	}
	if n != int64(b.rows) {
		return r, fmt.Errorf("the copy has %d rows after an initial sync of %d", n, b.rows)
	}
	return r, nil
}

var limitMedian time.Duration // of the initial sync, for the page-size plot

func (b *bench) initialSync(ctx context.Context, t *table) error {
	if err := b.ensureItems(ctx); err != nil {
		return err
	}
	var lim, syn, peer, par []time.Duration
	var rss []int64
	pgcopydb := pgcopydbPath()
	for i := range b.o.runs {
		d, err := b.limitCopy(ctx)
		if err != nil {
			return err
		}
		lim = append(lim, d)
		p, err := b.parallelPipes(ctx, "items")
		if err != nil {
			return err
		}
		par = append(par, p)
		r, err := b.syncdInitial(ctx, 0)
		if err != nil {
			return err
		}
		syn = append(syn, r.wall)
		rss = append(rss, r.maxRSS)
		fmt.Fprintf(os.Stderr, "  run %d: limit %s, 2 parallel pipes %s, syncd %s (peak RSS %s)\n", i+1, fmtDur(d), fmtDur(p), fmtDur(r.wall), fmtMB(r.maxRSS))
		if pgcopydb != "" {
			p, err := b.pgcopydbCopy(ctx, pgcopydb, i)
			if err != nil {
				return err
			}
			peer = append(peer, p)
			fmt.Fprintf(os.Stderr, "  run %d: pgcopydb %s\n", i+1, fmtDur(p))
		}
	}
	if pgcopydb != "" {
		same, err := sameContent(ctx, b.src, "items", b.dst, "items")
		if err != nil {
			return err
		}
		if !same {
			return fmt.Errorf("the copy differs from the source after pgcopydb copy table-data")
		}
		// The syncd copy is checked below: sync it once more.
		if _, err := b.syncdInitial(ctx, 0); err != nil {
			return err
		}
	}
	same, err := sameContent(ctx, b.src, "items", b.dst, "items")
	if err != nil {
		return err
	}
	if !same {
		return fmt.Errorf("the copy differs from the source after the initial sync")
	}
	limitMedian = median(lim)
	ls, ss := rate(b.rows, median(lim)), rate(b.rows, median(syn))
	t.add(row{
		name:   fmt.Sprintf("initial sync, %s rows (%s heap, %s with indexes), default config", fmtRows(b.rows), fmtMB(b.heap), fmtMB(b.total)),
		syncd:  fmt.Sprintf("%s (%s)", fmtRate(ss), fmtDur(median(syn))),
		limit:  fmt.Sprintf("%s (%s)", fmtRate(ls), fmtDur(median(lim))),
		ratio:  fmt.Sprintf("%.2f", ss/ls),
		target: ">= 1.00",
		note:   fmt.Sprintf("peak RSS %s (max %s; target < 100 MB); runs syncd %s, limit %s", fmtMB(median(rss)), fmtMB(maxOf(rss)), durs(syn), durs(lim)),
	})
	b.parallelRow(t, syn, par)
	peerName := fmt.Sprintf("peer: pgcopydb copy table-data, %s rows, --table-jobs 2", fmtRows(b.rows))
	if pgcopydb == "" {
		t.missing(peerName, "pgcopydb is not installed (Debian package pgcopydb)")
		return nil
	}
	ps := rate(b.rows, median(peer))
	t.add(row{
		name:   peerName,
		syncd:  fmt.Sprintf("%s (%s)", fmtRate(ps), fmtDur(median(peer))),
		limit:  fmt.Sprintf("%s (%s)", fmtRate(ls), fmtDur(median(lim))),
		ratio:  fmt.Sprintf("%.2f", ps/ls),
		target: "-",
		note:   fmt.Sprintf("the syncd column is pgcopydb here (%s); syncd / pgcopydb %.2f; runs %s", pgcopydbVersion(pgcopydb), ss/ps, durs(peer)),
	})
	return nil
}

func maxOf(xs []int64) int64 {
	var m int64
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
