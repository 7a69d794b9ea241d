package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
)

// pagePoint is the initial-sync throughput at one page size.
type pagePoint struct {
	size   int
	rate   float64
	maxRSS int64
}

// pageSizes measures initial-sync throughput against page size and draws
// the plot.
func (b *bench) pageSizes(ctx context.Context, t *table) error {
	if len(b.o.pageSizes) == 0 {
		return nil
	}
	if err := b.ensureItems(ctx); err != nil {
		return err
	}
	if limitMedian == 0 {
		var lim []time.Duration
		for range b.o.runs {
			d, err := b.limitCopy(ctx)
			if err != nil {
				return err
			}
			lim = append(lim, d)
		}
		limitMedian = median(lim)
	}
	var pts []pagePoint
	var parts []string
	// The sweep measures the page loop, so the first load (which reads no
	// pages) is turned off for it.
	b.pagesOnly = true
	defer func() { b.pagesOnly = false }()
	for _, size := range b.o.pageSizes {
		var ds []time.Duration
		var rss []int64
		for range b.o.plotRuns {
			r, err := b.syncdInitial(ctx, size)
			if err != nil {
				return err
			}
			ds = append(ds, r.wall)
			rss = append(rss, r.maxRSS)
		}
		p := pagePoint{size: size, rate: rate(b.rows, median(ds)), maxRSS: maxOf(rss)}
		fmt.Fprintf(os.Stderr, "  page %d: %s, peak RSS %s\n", size, fmtRate(p.rate), fmtMB(p.maxRSS))
		pts = append(pts, p)
		parts = append(parts, fmt.Sprintf("%d: %.2f/%s", size, p.rate/rate(b.rows, limitMedian), fmtMB(p.maxRSS)))
	}
	t.add(row{
		name:   "initial sync by page size",
		syncd:  "see notes",
		limit:  fmtRate(rate(b.rows, limitMedian)),
		ratio:  "see notes",
		target: ">= 0.80, RSS < 100 MB",
		note:   "page: ratio/peak RSS " + strings.Join(parts, ", "),
	})
	if b.o.plot != "" {
		if err := writePlot(b.o.plot, pts, rate(b.rows, limitMedian), b.rows); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "syncd-bench: wrote %s\n", b.o.plot)
	}
	return nil
}
