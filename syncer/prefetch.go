package syncer

import (
	"context"
	"slices"

	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/source"
)

// prefetcher reads the next page from the source while the current one is
// written to the sink, so that the two databases work at the same time.
// It reads at most one page ahead, which bounds memory to two pages, and
// only from a position the loop has already decided on (the cursor of the
// page in hand): the order of commits and watermark writes is unchanged.
//
// The source connection is busy while a read is pending: call wait before
// any other use of it (for example Source.Less).
type prefetcher struct {
	src     source.Source
	limit   int
	pending *fetch
}

type fetch struct {
	pos  source.Position
	done chan struct{}
	p    page.Page
	err  error
}

// read returns the page at pos: the one read ahead when it was read from
// pos, else a fresh read.
func (f *prefetcher) read(ctx context.Context, pos source.Position) (page.Page, error) {
	if pf := f.pending; pf != nil {
		f.pending = nil
		<-pf.done
		if samePosition(pf.pos, pos) {
			return pf.p, pf.err
		}
	}
	return f.src.ReadPage(ctx, pos, f.limit)
}

// ahead starts reading the page at pos in the background.
func (f *prefetcher) ahead(ctx context.Context, pos source.Position) {
	f.wait()
	pf := &fetch{pos: pos, done: make(chan struct{})}
	f.pending = pf
	go func() {
		defer close(pf.done)
		pf.p, pf.err = f.src.ReadPage(ctx, pos, f.limit)
	}()
}

// wait drops a pending read after it has finished, freeing the source
// connection.
func (f *prefetcher) wait() {
	if pf := f.pending; pf != nil {
		f.pending = nil
		<-pf.done
	}
}

func samePosition(a, b source.Position) bool {
	return slices.Equal(a.After, b.After) && (a.After == nil) == (b.After == nil) &&
		a.AtLeast == b.AtLeast && a.Lookback == b.Lookback && a.Before == b.Before &&
		(a.Seen == nil) == (b.Seen == nil) && (a.Seen == nil || a.Seen.Xmin == b.Seen.Xmin && slices.Equal(a.Seen.Upto, b.Seen.Upto))
}
