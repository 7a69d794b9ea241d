package syncer

import (
	"context"
	"fmt"
	"slices"

	"github.com/syncd/syncd/reconcile"
	"github.com/syncd/syncd/watermark"
)

// PhaseCompare is what a run in compare mode does after it opened.
const PhaseCompare = "comparing the whole table with its copy and repairing the differences"

// compare is one run of a source in compare mode (mode: compare): there
// is no cursor and no watermark. The run opens like a table copy (the run
// lock, the sink's catalog claim, the copy created or its schema followed),
// then compares the whole source table with the copy by checksummed key
// ranges and writes only the differences (package reconcile with
// WholeTable and Repair), so the copy equals the source at the end, hard
// deletes included.
func (r *runner) compare(ctx context.Context) error {
	// Describe fills sink.key with the primary key when the file gives
	// none: on a copy of the config, which the daemon shares.
	c := *r.c
	c.Sink.Key = slices.Clone(c.Sink.Key)
	r.c = &c
	var err error
	if r.st, _, err = r.o.Store.Get(c.Name); err != nil {
		return err
	}
	k, err := r.o.Kinds.Of(&c)
	if err != nil {
		return err
	}
	r.k = k
	if k.OpenSink == nil || k.Reconcile == nil {
		return c.Errorf("mode", "a %s sink cannot be synced in compare mode", c.Sink.Type)
	}
	// The source first: it settles sink.key, which the sink is opened with.
	src, err := r.o.openSource(ctx, &c)
	if err != nil {
		return err
	}
	r.closers = append(r.closers, func(ctx context.Context) { _ = src.Close(ctx) })
	dst, err := k.OpenSink(ctx, &c)
	if err != nil {
		return err
	}
	r.dst = dst
	r.closers = append(r.closers, func(context.Context) { _ = dst.Close(ctx) })
	if err := r.acquire(ctx, dst); err != nil {
		return err
	}
	rec, err := r.claim(ctx, src, dst)
	if err != nil {
		return err
	}
	// A watermark left by cursor runs is not resumed from (Run drops it
	// once the run succeeds, so that a return to mode: cursor starts from
	// the beginning): the identity is adopted, not checked.
	if err := adoptIdentity(r.o.Store, k, &c, r.st); err != nil {
		return err
	}
	if err := r.prepare(ctx, src); err != nil {
		return err
	}
	if err := r.rewritten(ctx, src, rec, nil); err != nil {
		return err
	}
	began, err := src.Clock(ctx)
	if err != nil {
		return err
	}
	r.o.phase(PhaseCompare)
	// reconcile names the source in its log lines itself.
	rep, err := reconcile.Run(ctx, &c, nil, reconcile.Options{Repair: true, WholeTable: true, Logger: r.o.Logger})
	if err != nil {
		return fmt.Errorf("compare %s with its copy %s: %w", c.Source.Ident, c.Sink.Ident, err)
	}
	cr := &watermark.CompareResult{Compared: rep.RowsCompared}
	if n := rep.Repair; n != nil {
		cr.Inserted, cr.Updated, cr.Deleted = n.Inserted, n.Updated, n.Deleted
	}
	final := rep.Final()
	for _, n := range final.Differences() {
		cr.Remaining += n
	}
	r.res.Compare = cr
	r.res.Pages = 1
	r.res.Rows = cr.Inserted + cr.Updated + cr.Deleted
	r.res.Written = cr.Inserted + cr.Updated
	r.res.Deleted = cr.Deleted
	if r.o.OnPage != nil {
		r.o.OnPage(PageStats{Rows: cr.CompareRead(), Written: r.res.Written, Deleted: r.res.Deleted})
	}
	if cr.Remaining == 0 {
		r.res.CaughtUp = began.UTC()
	} else {
		r.log.Warn("the source changed while it was compared; the next run repairs what is left", "remaining", cr.Remaining)
	}
	return nil
}
