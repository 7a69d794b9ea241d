package syncer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
)

// tableReader is the page reader of a table copy: keyset pages of the
// source table below the run's bound, one page read ahead while the
// previous one is written.
type tableReader struct {
	src   source.Source
	fetch *prefetcher
	pos   source.Position
	// behindOf is the stored watermark while the run re-reads the lookback
	// window behind it (nil once a page ended past it): the watermark must
	// not move back, so it is held until then.
	behindOf []string
	// caughtUp is the point up to which the copy holds every committed
	// source row once the run catches up (see Result.CaughtUp).
	caughtUp time.Time
	// prog is the run's progress, which begins with the first page.
	prog *progress
}

// Next implements plan.Reader.
func (t *tableReader) Next(ctx context.Context, limit int) (page.Page, bool, error) {
	p, err := t.fetch.read(ctx, t.pos)
	if err != nil {
		return p, false, err
	}
	// The first page says whether the run reads more (progress.begin).
	t.prog.begin(ctx, int64(p.Len()), p.Len() < limit && !p.More)
	if p.Len() == 0 {
		return p, false, nil
	}
	behind := t.behindOf != nil
	if behind {
		less, err := t.src.Less(ctx, t.behindOf, p.Last)
		if err != nil {
			return page.Page{}, false, err
		}
		if less {
			t.behindOf = nil
		}
	}
	next := source.Position{After: p.Last, Before: t.pos.Before, Seen: t.pos.Seen}
	if !behind && (p.Len() == limit || p.More) {
		t.fetch.ahead(ctx, next) // while this page is written
	}
	t.pos = next
	return p, behind && t.behindOf != nil, nil
}

// openTable opens the run of a table copy step by step: the source and the
// sink at once, the bound, the run lock on the sink's connection, the copy
// prepared for the source's columns, and the reader at the position the
// state and the bound give. read is false when there is nothing to read.
func (r *runner) openTable(ctx context.Context, k kind.Kind) (read bool, err error) {
	// The sink's session is opened while the source's is (each is a
	// connection and a few catalog reads, about 20 ms of every run), and
	// both are open, idle, before the bound is read: a session still
	// starting would hold the bound back as if it were a writer. Opening
	// the sink writes nothing; a source error still comes first.
	var (
		dst  sink.Sink
		derr error
		wg   sync.WaitGroup
	)
	wg.Go(func() { dst, derr = k.OpenSink(ctx, r.c) })
	// A PostgreSQL source (rd) is taken from the daemon's schema cache
	// when the run has one; the cache and the pool apply only to it.
	var (
		src     source.Source
		rd      *source.Reader
		opening *source.Opening
	)
	if r.o.OpenSource == nil && r.o.Schema != nil {
		known, fp := r.o.Schema.cached(r.c)
		opening, err = source.OpenCached(ctx, r.c, fp, known)
	} else {
		src, err = r.o.openSource(ctx, r.c)
		rd, _ = src.(*source.Reader)
	}
	wg.Wait()
	if opening != nil {
		// Once both sessions are open: the first round trip reads the
		// bound too (srcstart.go). Also when the sink failed: a source
		// error (a table that does not exist) still comes first.
		var p source.Prefetch
		if derr == nil {
			p = r.prefetch(dst)
		}
		if rd, r.srcFP, err = opening.Start(ctx, p); rd != nil {
			src = rd
		}
	}
	if err == nil && src != nil {
		r.src = rd
		r.closers = append(r.closers, func(ctx context.Context) { _ = src.Close(ctx) })
	}
	if dst != nil {
		r.dst = dst
		// The run's own ctx, not the closers' uncancelled one: a forced
		// stop also cancels the sink's closing work (the ANALYZE of a
		// fresh copy).
		r.closers = append(r.closers, func(context.Context) { _ = dst.Close(ctx) })
	}
	if err != nil {
		return false, err
	}
	if derr != nil {
		return false, derr
	}
	if r.src != nil && r.o.Schema.changed(r.c, r.src.Described, "") {
		if err := r.src.SchemaChanged(ctx); err != nil {
			return false, err
		}
	}
	bound, caughtUp, err := r.bound(ctx, src)
	if err != nil {
		return false, err
	}
	if err := CheckSequence(r.c, src.Table(), r.st, bound); err != nil {
		return false, err
	}
	r.checkIndex(ctx, src)
	if err := r.acquire(ctx, dst); err != nil {
		return false, err
	}
	if err := r.copyFingerprint(ctx); err != nil {
		return false, err
	}
	// The sink's catalog names the copy's one writer and where it is;
	// the state file follows it (catalog.go).
	rec, err := r.claim(ctx, src, dst)
	if err != nil {
		return false, err
	}
	held, err := checkCopyNotLost(ctx, sink.LockConn(dst), r.c, r.st, r.o.Store.Path(), r.pre.holds)
	if err != nil {
		return false, err
	}
	if pg, ok := dst.(*sink.Postgres); ok && held {
		pg.HoldsRows() // the fast path need not ask again
	}
	if err := adoptIdentity(r.o.Store, k, r.c, r.st); err != nil {
		return false, err
	}
	if err := r.prepare(ctx, src); err != nil {
		return false, err
	}
	if err := r.rewritten(ctx, src, rec, r.repairFunc(k)); err != nil {
		return false, err
	}
	return r.position(ctx, src, bound, caughtUp)
}

// prefetched is what copyFingerprint read, in its round trip, for the
// steps after it: the sink catalog's version and the copy's record (for
// claim) and whether the copy holds a row (for the lost-copy check). Each
// step reads what is missing itself.
type prefetched struct {
	catalog *catalog.Prefetch
	holds   *bool
}

// copyFingerprint reads the copy's catalog fingerprint for a run with a
// SchemaCache, on the sink's session after the run lock is taken (no other
// syncd process changes the copy meanwhile), and decides whether the run
// can trust what the last one checked. The reads every such run makes on
// the sink next go in the same round trip (a pgx.Batch, one flush): the
// sink catalog's version and the copy's record, whether the copy holds a
// row, and the sink's durability settings. They read the databases at
// this run's moment, under its lock, as the steps that use them would a
// moment later; none is kept for another run. A statement that fails in
// the batch (no catalog yet, no copy) leaves the ones after it unread,
// and each step then reads its own, as run --once always does.
func (r *runner) copyFingerprint(ctx context.Context) error {
	conn := sink.LockConn(r.dst)
	if r.o.Schema == nil || conn == nil || r.src == nil {
		return nil
	}
	t := r.c.Sink.Ident
	var b pgx.Batch
	var read bool
	pgutil.QueueFingerprint(&b, t.Schema, t.Name, &r.dstFP, &read)
	// In the order of how rarely each fails: the catalog on the first
	// run in a sink database, the copy's EXISTS when the copy is missing
	// (a run that then fails, or a first load that does not ask), the WAL
	// positions on a sink in recovery (every run there).
	if _, ok := r.dst.(sink.Recorder); ok {
		r.pre.catalog = catalog.Queue(&b, t.String())
	}
	if checksCopy(r.c, r.st) {
		b.Queue(copyHoldsSQL(r.c)).QueryRow(func(row pgx.Row) error {
			var holds bool
			if err := row.Scan(&holds); err != nil {
				return err
			}
			r.pre.holds = &holds
			return nil
		})
	}
	pg, _ := r.dst.(*sink.Postgres)
	if pg != nil {
		pg.QueueDurability(&b)
	}
	berr := conn.SendBatch(ctx, &b).Close()
	if !read {
		var err error
		if r.dstFP, err = pgutil.Fingerprint(ctx, conn, t.Schema, t.Name); err != nil {
			return fmt.Errorf("sink table %s: %w", t, errors.Join(err, berr))
		}
	}
	r.trusted = r.o.Schema.trusted(r.c, r.src, r.dstFP, r.st)
	if pg != nil && r.o.Schema.changed(r.c, r.src.Described, r.dstFP) {
		if err := pg.SchemaChanged(ctx); err != nil {
			return fmt.Errorf("sink table %s: %w", t, err)
		}
	}
	return nil
}

// bound reads the commit-safe bound the run reads below, and the point
// the copy is caught up to when the run reaches the end.
func (r *runner) bound(ctx context.Context, src source.Source) (source.Bound, time.Time, error) {
	bound, err := readBound(ctx, src, r.c, waitsOf(r.o), r.log)
	if err != nil {
		return bound, time.Time{}, err
	}
	r.res.Bound, r.res.BoundAt, r.res.HeldBack, r.res.Holder, r.res.BoundBlind = bound.At, bound.Now, bound.HeldBack(), bound.Holder, bound.Blind
	// Enum labels read after the bound include every label a row under it
	// uses; Prepare adds the missing ones to the copy's enums. A table
	// taken from the cache without an enum has nothing to refresh: its
	// other types changed with its fingerprint.
	if s, ok := src.(source.SchemaReader); ok && (r.src == nil || r.src.Described || src.Table().HasEnums()) {
		if err := s.RefreshTypes(ctx); err != nil {
			return bound, time.Time{}, err
		}
	}
	caughtUp := bound.At
	if caughtUp.IsZero() {
		if caughtUp, err = src.Clock(ctx); err != nil {
			return bound, time.Time{}, err
		}
	}
	return bound, caughtUp, nil
}

// prepare follows the source's schema changes and prepares the copy for
// the source's columns.
func (r *runner) prepare(ctx context.Context, src source.Source) error {
	dst := r.dst
	if u, ok := dst.(sink.SourceSchemaUser); ok {
		u.UseSourceSchema(src.Table().Types, src.Table().Checks)
	}
	if r.trusted {
		// The source's schema and the copy are as the last run left
		// them: nothing to follow, nothing to check again.
		pg, _ := dst.(*sink.Postgres)
		if pg != nil {
			pg.Trust()
			pg.UseKnown(r.o.Schema.copyKnown(r.c, r.dstFP))
		}
		if err := dst.Prepare(ctx, src.Table().Columns); err != nil {
			return err
		}
		if pg != nil {
			r.known = pg.Known()
		}
		if b, ok := dst.(sink.BinaryWriter); ok && b.WantsBinary() {
			if s, ok := src.(source.BinaryReader); ok {
				s.UseBinary()
			}
		}
		return nil
	}
	var err error
	st := r.st
	if st.Schema == nil {
		// A state file without the source's schema (lost, or new): the
		// sink's record knows the columns the copy follows, so a column
		// the source gained since is followed (added and backfilled), not
		// taken for a copy made by hand.
		st.Schema = RecordedSchema(r.recordedColumns)
	}
	if r.res.SchemaChanges, err = followSchema(ctx, r.o, st, src, dst, r.log); err != nil {
		return err
	}
	if err := dst.Prepare(ctx, src.Table().Columns); err != nil {
		return err
	}
	if pg, ok := dst.(*sink.Postgres); ok {
		r.known = pg.Known()
	}
	if conn := sink.LockConn(dst); conn != nil {
		sink.WarnFsync(ctx, conn, r.c.Sink.DSN, r.log)
	}
	if b, ok := dst.(sink.BinaryWriter); ok && b.WantsBinary() {
		if s, ok := src.(source.BinaryReader); ok {
			s.UseBinary()
		}
	}
	return nil
}

// position sets up the reader where the stored state and the bound say
// the first page starts, and the progress line and watermark writer.
func (r *runner) position(ctx context.Context, src source.Source, bound source.Bound, caughtUp time.Time) (bool, error) {
	pos, err := startPosition(r.c, src.Table(), r.st)
	if err != nil {
		return false, err
	}
	// The lookback window is re-read only as far back as a row the last
	// run could not see can lie (idle.go).
	pos = lookbackStart(r.st, pos, bound.Seen)
	r.res.lookbackBound = trustedBound(r.c, src.Table(), bound)
	if r.res.lookbackBound != "" {
		r.res.seen = bound.Seen
	}
	if err := lowerLookbackBound(r.o.Store, r.c.Name, r.st, r.res.lookbackBound); err != nil {
		return false, err
	}
	// Rows at or past the bound wait for a later run, so the watermark never
	// passes a transaction that may still commit. A bound below the
	// watermark reads nothing new and leaves the watermark where it is.
	pos, read := boundPosition(pos, r.st, bound, &r.res)
	if pos, err = firstLoad(ctx, r.o, src, r.dst, r.lock, pos, read, r.log, &r.res); err != nil {
		return false, err
	}
	if bound.Hold {
		caughtUp = time.Time{} // nothing past the watermark is read: not caught up
	}
	t := &tableReader{src: src, pos: pos, caughtUp: caughtUp}
	// While re-reading the lookback window the cursor is behind the stored
	// watermark.
	if r.st.Cursor != nil && pos.After == nil {
		t.behindOf = r.st.Cursor
	}
	r.res.incremental = r.st.Cursor != nil
	prog := startProgress(ctx, r.o, r.log, src, pos, r.st)
	r.closers = append(r.closers, func(context.Context) { prog.stop() })
	t.prog = prog
	if !read {
		prog.begin(ctx, 0, true)
	}
	t.fetch = &prefetcher{src: src, limit: r.c.Source.PageSize}
	r.closers = append(r.closers, func(context.Context) { t.fetch.wait() }) // before src.Close
	r.table, r.rd = t, t
	r.wm = r.newMarks(prog, nil)
	return read, nil
}
