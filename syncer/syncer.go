// Package syncer owns one run of one source: read a page by the keyset
// cursor, apply it to the sink in one transaction, and only after that
// commit write the page's cursor to the watermark, until a short page says
// the source is caught up. The order of those two writes is the guarantee
// that nothing is skipped: a crash between them re-applies a page, and the
// upsert makes that harmless.
package syncer

import (
	"context"
	"errors"
	"fmt"
	"github.com/syncd/syncd/internal/sourceerr"
	"log/slog"
	"time"

	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgpool"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/plan"
	"github.com/syncd/syncd/runlock"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// Options configure one run.
type Options struct {
	Config *config.Config
	Store  *watermark.Store
	Logger *slog.Logger
	// Kinds are the kinds of sink the run may open, as the caller built
	// them (cli's DefaultKinds); nil: the table copy (kind.Postgres) only.
	Kinds *kind.Registry
	// Stop, when closed, ends the run before its next page; the page in
	// flight still commits and its watermark is still written.
	Stop <-chan struct{}
	// OnPage, when set, is called after each page's watermark is written
	// (metrics use it to show progress during a long run).
	OnPage func(PageStats)
	// OnProgress, when set, is called with the run's progress when it
	// starts reading and after each page (status shows it).
	OnProgress func(Progress)
	// OnPhase, when set, is told what the run is doing each time that
	// changes: PhaseOpen, PhaseFirstLoad, PhasePages or PhaseFinish (the
	// daemon's stop says what it waits for).
	OnPhase func(phase string)
	// ProgressEvery is how often a long run logs its progress
	// (DefaultProgressEvery when zero).
	ProgressEvery time.Duration
	// AheadWait is how far ahead of the source's clock a row may be stamped
	// for the run to wait for the clock, and how long it waits for open
	// writers that hold the bound at the watermark (DefaultAheadWait when
	// zero).
	AheadWait time.Duration
	// HoldWarnAfter is how long a transaction that holds the bound back
	// must have been open for the run to log it as a warning rather than
	// at debug level (DefaultHoldWarnAfter when zero).
	HoldWarnAfter time.Duration
	// Test, zero in production, lets a test act at moments inside a run
	// (see TestSignals).
	Test TestSignals
	// QuietIdle logs an incremental run (one that starts from a
	// watermark) that changes nothing in the copy (it may read rows of the
	// lookback window again, but writes none) at debug level: its "run
	// started" and its "run done". The daemon sets it, so that hundreds of sources
	// that have caught up do not write two INFO lines per tick; its
	// periodic summary counts them.
	QuietIdle bool
	// FirstLoad tunes the first load of an empty copy (nil: the defaults,
	// overridden by the environment; see FirstLoadOptions).
	FirstLoad *FirstLoadOptions
	// OpenSource opens the source a table copy reads (nil: source.Open,
	// the PostgreSQL table of Config). The run uses the capabilities the
	// source declares and does without the others (see source.Source).
	OpenSource func(ctx context.Context, c *config.Config) (source.Source, error)
	// Pool, when set, lends the run its source and sink sessions and takes
	// them back at its end (the daemon's, shared by every source; see
	// package pgpool); nil opens fresh sessions and closes them.
	Pool *pgpool.Pool
	// Schema, when set, is what the source's earlier runs read from the
	// catalogs (the daemon keeps one per source): the run re-does that
	// work only when a catalog fingerprint changed (see SchemaCache).
	Schema *SchemaCache
	// RecordEvery is how often, at most, an idle run is recorded in the
	// sink's record of the copy (see runrecord.go; zero:
	// $SYNCD_RECORD_EVERY, else DefaultRecordEvery), never more often
	// than the source's schedule runs it.
	RecordEvery time.Duration
}

// openSource opens the run's source: Options.OpenSource, or the
// PostgreSQL table. On failure the Source is nil, not an interface
// holding a nil *source.Reader.
func (o Options) openSource(ctx context.Context, c *config.Config) (source.Source, error) {
	if o.OpenSource != nil {
		return o.OpenSource(ctx, c)
	}
	src, err := source.Open(ctx, c)
	if err != nil {
		return nil, err
	}
	return src, nil
}

// PageStats says what one committed page did.
type PageStats struct {
	Rows    int64    // rows read and applied
	Written int64    // rows the sink inserted or changed
	Deleted int64    // rows the sink removed (soft deletes)
	Cursor  []string // the watermark now stored (nil while re-reading the lookback window)
}

// Result says what a run did.
type Result struct {
	Pages   int64
	Rows    int64 // rows read and applied
	Written int64 // rows the sink inserted or changed
	Deleted int64 // rows the sink removed (soft deletes)
	Cursor  []string
	// Stopped is true when Stop ended the run before it caught up.
	Stopped bool
	// Bound is the commit-safe limit this run read below (zero: none),
	// BoundAt the source's clock when it was taken, HeldBack the distance
	// between the two, and Holder the open transaction that set it (PID 0:
	// the clock minus source.settle did). BoundBlind is true when the source
	// role cannot see other roles' transactions. See source.Bound.
	Bound      time.Time
	BoundAt    time.Time
	HeldBack   time.Duration
	Holder     source.Holder
	BoundBlind bool
	// Campaign holds a campaign's counts (sink type coupon_grants), also
	// when the run failed; nil for other sinks.
	Campaign *plan.CampaignStats
	// CaughtUp, set when the run caught up, is the point up to which the
	// copy holds every committed source row: Bound, or without a bound the
	// source's clock when the run began reading (see watermark.State).
	CaughtUp time.Time
	// NullCursorRows and AheadOfClockRows count the rows no cursor page
	// can reach (a NULL cursor column; a first cursor column past the
	// source's clock plus source.ClockAllowance), found by the extra pass at
	// the end of a run that caught up; OutsideRows is how many rows that
	// pass read and upserted, OutsideWritten how many of them the sink
	// inserted, changed or removed (see copyOutside).
	NullCursorRows   int64
	AheadOfClockRows int64
	OutsideRows      int64
	OutsideWritten   int64
	// outsideCounted is true when the extra pass counted them.
	outsideCounted bool
	// incremental is true when the run started from a watermark.
	incremental bool
	// lookbackBound is the run's read bound when it sees every writer
	// (trustedBound), stored for the next run's start when the run ends
	// without error.
	lookbackBound string
	// seen is what the next run may skip in the lookback window, kept
	// with lookbackBound (idle.go).
	seen source.Seen
	// SchemaChanges lists the kinds of the source schema changes the run
	// found before reading (followed, or refused when err says so).
	SchemaChanges []string
	// CursorIndex is what the catalog said about the index the page query
	// walks (nil: not read, as for a campaign or a run that failed first).
	CursorIndex *source.CursorIndex
	// Compare is what a run in compare mode compared and wrote (nil for
	// a cursor run); Written and Deleted hold its sums as well.
	Compare *watermark.CompareResult
}

// idle reports whether the run started from a watermark and changed
// nothing in the copy: it may have read rows again (the lookback window)
// but wrote none.
func (r Result) idle() bool {
	return r.incremental && r.Written == 0 && r.Deleted == 0 && r.OutsideWritten == 0
}

// What a run is doing (Options.OnPhase), besides PhaseFirstLoad.
const (
	PhaseOpen   = "opening the run: connecting, reading the catalogs"
	PhasePages  = "page in flight"
	PhaseFinish = "finishing the run: rows outside the cursor, the last watermark"
)

func (o Options) phase(p string) {
	if o.OnPhase != nil {
		o.OnPhase(p)
	}
}

// ErrStopped is returned by Run when Stop ended it early.
var ErrStopped = errors.New("run stopped before it caught up")

// Run syncs one source until a short page, then records the run.
func Run(ctx context.Context, o Options) (Result, error) {
	c := o.Config
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("source", c.Name)
	started := time.Now()
	ctx = pgpool.With(ctx, o.Pool)
	res, err := run(ctx, o, log)
	err = sink.ExplainReadOnly(c, err)
	if errors.Is(err, runlock.ErrHeld) {
		// Another process owns this source right now: its state is not ours
		// to change.
		log.Info("run skipped", "reason", err.Error())
		return res, err
	}
	status, msg := "ok", ""
	if err != nil && !errors.Is(err, ErrStopped) {
		status, msg = "failed", err.Error()
	}
	rerr := o.Store.Update(c.Name, func(st *watermark.State) error {
		st.LastRunAt = started.UTC()
		st.LastStatus = status
		st.LastError = msg
		st.LastRows = res.Rows
		st.LastPages = res.Pages
		st.Bound, st.BoundAt = res.Bound, res.BoundAt
		st.BoundHolderPID, st.BoundHolderApp, st.BoundHolderSince = res.Holder.PID, res.Holder.App, res.Holder.Since
		if res.outsideCounted {
			st.NullCursorRows, st.AheadOfClockRows = res.NullCursorRows, res.AheadOfClockRows
		}
		if status == "ok" {
			st.LastSuccess = time.Now().UTC()
		}
		st.Mode = ""
		if c.Compare() {
			// No watermark: each run compares the whole table.
			st.Mode, st.LastCompare = watermark.ModeCompare, res.Compare
			if err == nil {
				st.Cursor, st.From, st.LookbackBound, st.LookbackXmin, st.LookbackServer = nil, "", "", 0, time.Time{}
			}
			st.TotalRead += res.Compare.CompareRead()
			st.TotalRows += res.Rows
			st.TotalWritten += res.Written
			st.TotalDeleted += res.Deleted
		}
		if err == nil && res.CaughtUp.After(st.CaughtUp) {
			st.CaughtUp = res.CaughtUp
		}
		if err == nil {
			// Read every page from its start to its end (idle.go).
			st.LookbackBound, st.LookbackXmin, st.LookbackServer = "", 0, time.Time{}
			if st.Cursor != nil {
				st.LookbackBound = res.lookbackBound
				if st.LookbackBound != "" {
					st.LookbackXmin, st.LookbackServer = res.seen.Xmin, res.seen.Server
				}
			}
		}
		return nil
	})
	if err == nil && rerr != nil {
		err = rerr
	}
	if cr := res.Compare; cr != nil {
		log = log.With("mode", watermark.ModeCompare, "compared", cr.Compared, "inserted", cr.Inserted, "updated", cr.Updated)
	}
	attrs := []any{"pages", res.Pages, "rows", res.Rows, "written", res.Written, "deleted", res.Deleted,
		"rows_null_cursor", res.NullCursorRows, "rows_ahead_of_clock", res.AheadOfClockRows, "outside_written", res.OutsideWritten, "duration", time.Since(started).Round(time.Millisecond).String()}
	switch {
	case errors.Is(err, ErrStopped):
		log.Info("run stopped before catching up; the next run continues from the watermark", attrs...)
	case err != nil:
		// The caller reports the failure once: run --once as its one-line
		// reason on stderr, the daemon with its retry decision.
		log.Debug("run failed", append(attrs, "err", err)...)
	case o.QuietIdle && res.idle():
		log.Debug("run done", attrs...)
	default:
		log.Info("run done", attrs...)
	}
	return res, err
}

// runner is one run in progress: what it opened, in the order it opened
// it, and what it did so far.
type runner struct {
	o   Options
	c   *config.Config
	log *slog.Logger
	st  watermark.State // the source's state, read once when the run starts
	res Result
	k   kind.Kind // the kind of the source's sink

	rd    plan.Reader
	src   *source.Reader // nil: a plan's own reader
	dst   sink.Sink
	hooks plan.Hooks   // nil: nothing before the first page or after the last
	plan  *plan.Plan   // nil: a table copy
	table *tableReader // nil: a plan's own reader
	lock  kind.RunLock // nil: the kind holds no run lock
	wm    *marks
	// keepMarks is set when writing a watermark failed: the run ends at
	// once, without the final flush.
	keepMarks bool
	closers   []func(context.Context) // undone in reverse when the run ends
	// source is the source table's identity as claim read it (nil: the
	// sink keeps no catalog).
	source *catalog.Source
	// srcFP and dstFP are the catalog fingerprints of the source table
	// and the copy read by a run with a SchemaCache; trusted is set when
	// they are the cache's (the copy's checks are skipped).
	srcFP, dstFP string
	trusted      bool
	known        *sink.Known // what the sink's Prepare read of the copy (SchemaCache)
	pre          prefetched  // read with the copy's fingerprint (copyFingerprint)
	// recordedColumns are the source's columns as the sink's record knew
	// them before this run (nil: a record registered by this run): the
	// columns the copy follows when the state file has no schema of them.
	recordedColumns []catalog.Column
	// rec is the sink's record of the copy as claim read it (nil: the sink
	// keeps no catalog), read by the sink's clock at rec.ReadAt, this
	// process's claimedAt; handover is set when this run took the copy
	// over from another process; ended once the run's end is recorded
	// (runrecord.go).
	rec       *catalog.Record
	claimedAt time.Time
	handover  bool
	ended     bool

	// sourceRead is the source table's identity as the run's first round
	// trip read it, for claim (srcstart.go; nil: claim reads it).
	sourceRead *catalog.Source
}

// run is one run: open (source, bound, sink, lock, prepare), the page
// loop, then finish (outside pass, final flush, the kind's after hook).
func run(ctx context.Context, o Options, log *slog.Logger) (_ Result, err error) {
	r := &runner{o: o, c: o.Config, log: log}
	defer r.close(context.WithoutCancel(ctx))
	defer func() {
		// Before the sink closes: a run that did not catch up (a stop,
		// graceful or forced, or a failure) skips the sink's closing work.
		if u, ok := r.dst.(sink.Unfinisher); ok && err != nil {
			u.Unfinished()
		}
		// A session of a run that failed is closed, not given back to
		// the pool: it may be in any state (a statement cancelled, a
		// connection half lost). A run skipped because another process
		// holds the run lock did nothing on either side.
		if err != nil && !errors.Is(err, runlock.ErrHeld) && r.src != nil {
			r.src.Broken(ctx)
			if r.dst != nil { // a table copy's sink: a session of the pool
				pgpool.Broken(ctx, sink.LockConn(r.dst))
			}
		}
	}()
	o.phase(PhaseOpen)
	if r.c.Compare() {
		err = r.compare(ctx)
		r.recordRun(ctx, err)
		return r.res, err
	}
	read, err := r.open(ctx)
	if err != nil {
		r.o.Schema.forget()
		return r.result(), err
	}
	if !read {
		o.phase(PhaseFinish)
		res, err := r.finish(ctx, nil)
		r.remember(err)
		r.recordRun(ctx, err)
		return res, err
	}
	o.phase(PhasePages)
	err = r.loop(ctx)
	o.phase(PhaseFinish)
	res, err := r.finish(ctx, err)
	r.remember(err)
	r.recordRun(ctx, err)
	return res, err
}

// remember keeps what a table run read from the catalogs for the next run
// when it succeeded, and forgets it when it failed.
func (r *runner) remember(err error) {
	sc := r.o.Schema
	if err != nil || r.src == nil {
		sc.forget()
		return
	}
	st, _, gerr := r.o.Store.Get(r.c.Name)
	if gerr != nil {
		sc.forget()
		return
	}
	sc.store(r.c, r.srcFP, r.dstFP, r.src.Table(), r.res.CursorIndex, r.known, st)
}

// open reads the state, refuses a watermark computed for other settings,
// and opens the run for the source's kind of sink. read is false when the
// run has nothing to read (a bound below the watermark).
func (r *runner) open(ctx context.Context) (read bool, err error) {
	c := r.c
	if r.st, _, err = r.o.Store.Get(c.Name); err != nil {
		return false, err
	}
	k, err := r.o.Kinds.Of(c)
	if err != nil {
		return false, err
	}
	r.k = k
	// A watermark computed for other settings is refused before anything
	// is read or written.
	if err := CheckIdentity(k, c, r.st, r.o.Store.Path()); err != nil {
		return false, err
	}
	if k.OpenPlan != nil {
		return true, r.openPlan(ctx, k)
	}
	return r.openTable(ctx, k)
}

// openPlan opens a run that reads its own pages (a campaign): the plan
// (which writes nothing until its hooks run), the kind's run lock (a
// campaign's lives on the plan's sink session), then the plan's before
// hook.
func (r *runner) openPlan(ctx context.Context, k kind.Kind) error {
	p, err := k.OpenPlan(ctx, r.c, plan.Options{Logger: r.log, Test: r.o.Test.Plan, Stop: r.o.Stop})
	if err != nil {
		return err
	}
	r.plan, r.rd, r.dst, r.hooks = p, p.Reader, p.Sink, p.Hooks
	r.closers = append(r.closers, func(ctx context.Context) { _ = p.Sink.Close(ctx) })
	if p.Close != nil {
		r.closers = append(r.closers, p.Close)
	}
	// Released before the plan closes (closers run in reverse).
	if err := r.acquire(ctx, p.Sink); err != nil {
		return err
	}
	// The state file records the identity (a campaign's binds from its
	// first granted page on, see plan.Plan.Record), so that a sink.table
	// moved to another schema is refused by the next run.
	if err := adoptIdentity(r.o.Store, k, r.c, r.st); err != nil {
		return err
	}
	r.wm = r.newMarks(nil, p.Record)
	if r.hooks == nil {
		return nil
	}
	return r.hooks.Before(ctx)
}

// acquire takes the run lock the way the sink's kind holds it (Kind.Lock:
// for a PostgreSQL sink, on dst's own session when it is a
// sink.LockHolder, else on a connection of its own). A kind that cannot
// hold one runs without.
func (r *runner) acquire(ctx context.Context, dst sink.Sink) error {
	if r.k.Lock == nil {
		r.log.Debug("run without a run lock: the sink's kind cannot hold one", "sink_type", r.k.Type)
		return nil
	}
	lock, err := r.k.Lock(ctx, r.c, dst, LockTarget(r.k, r.c))
	if err != nil {
		return err
	}
	r.lock = lock
	r.closers = append(r.closers, func(ctx context.Context) { _ = lock.Release(ctx) })
	return nil
}

// checkLock fails when the run lost its lock (Kind.Lock), before a page
// is written.
func checkLock(ctx context.Context, lock kind.RunLock) error {
	if lock == nil {
		return nil
	}
	return lock.Check(ctx)
}

// verifyLock checks that the run still holds lock even where Check
// trusts the sink's session to fail the commit (a lock on that session):
// for writes that commit on sessions of their own.
func verifyLock(ctx context.Context, lock kind.RunLock) error {
	if v, ok := lock.(interface{ Verify(context.Context) error }); ok {
		return v.Verify(ctx)
	}
	return checkLock(ctx, lock)
}

// newMarks writes the watermark of each committed page and reports it.
func (r *runner) newMarks(prog *progress, record func(*watermark.State)) *marks {
	// A page is reported (OnPage, the "page applied" line) once its
	// watermark is written, in page order.
	wm := newMarks(r.o.Store, r.c.Name, r.dst, func(k mark, saved []string) {
		if prog != nil {
			prog.add(int64(k.rows))
		}
		if r.o.OnPage != nil {
			r.o.OnPage(PageStats{Rows: int64(k.rows), Written: k.written, Deleted: k.deleted, Cursor: saved})
		}
		r.log.Debug("page applied", "page", k.page, "rows", k.rows, "written", k.written, "cursor", k.last)
	})
	wm.record = record
	return wm
}

// loop applies the reader's pages to the sink, each in one transaction,
// and writes each page's watermark after its commit, until a short page,
// a stop or an error.
func (r *runner) loop(ctx context.Context) error {
	limit := r.c.Source.PageSize
	if r.plan != nil && r.plan.PageSize > 0 {
		limit = r.plan.PageSize
	}
	for {
		select {
		case <-r.o.Stop:
			r.res.Stopped = true
			return ErrStopped
		default:
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sync %s: %w", r.c.Name, err)
		}
		p, behind, err := r.rd.Next(ctx, limit)
		if err != nil {
			return err
		}
		if p.Len() == 0 {
			return nil
		}
		if err := checkLock(ctx, r.lock); err != nil {
			return err
		}
		last := p.Len() < limit && !p.More
		if r.table != nil && !behind {
			p.Mark = p.Last // the copy's record in the sink moves with the page
			if last {
				p.End = r.runEnd() // and records the run's end (runrecord.go)
			}
		}
		// A graceful stop (o.Stop) lets the page in flight commit; a forced
		// one (ctx) cancels it on the server, and it rolls back.
		ar, err := r.dst.Apply(ctx, p)
		if err != nil {
			return err
		}
		r.res.Pages++
		r.res.Rows += int64(p.Len())
		r.res.Written += ar.Written
		r.res.Deleted += ar.Deleted
		if err := r.o.Test.AfterCommit.Fire(ctx, Commit{Source: r.c.Name, Page: r.res.Pages}); err != nil {
			return err // the pages before this one keep their watermark
		}
		if err := r.wm.committed(p, r.res.Pages, ar, !behind); err != nil {
			r.keepMarks = true
			return err
		}
		r.res.Cursor = r.wm.saved
		r.ended = r.ended || p.End != nil
		// A short page is the end, unless its bytes ended it (page.More).
		if last {
			return nil
		}
	}
}

// finish ends the run however it ends: every page committed so far
// becomes durable and gets its watermark, as if each had been written
// right after its commit (only a killed process leaves the watermark a few
// pages behind, which the next run re-applies harmlessly). A run that
// caught up first copies the rows the cursor cannot reach (a table copy),
// and afterwards runs the kind's after hook (a campaign's final count).
func (r *runner) finish(ctx context.Context, err error) (Result, error) {
	if r.keepMarks {
		return r.result(), err
	}
	if err == nil && r.table != nil {
		// Caught up: copy the rows the cursor cannot reach before the
		// final flush, so their pages become durable with the others.
		r.table.fetch.wait()
		err = copyOutside(ctx, r.o, r.table.src, r.dst, r.lock, r.log, &r.res)
	}
	ferr := r.wm.flush(ctx)
	r.res.Cursor = r.wm.saved
	if ferr != nil && err == nil {
		return r.result(), ferr
	}
	if err == nil && r.hooks != nil {
		err = r.hooks.After(ctx)
	}
	if err == nil && r.table != nil {
		r.res.CaughtUp = r.table.caughtUp
	}
	return r.result(), err
}

// result is what the run did so far, with a campaign's numbers.
func (r *runner) result() Result {
	if r.plan != nil {
		r.res.Campaign = r.plan.Campaign
	}
	return r.res
}

// close releases what the run opened, in reverse order.
func (r *runner) close(ctx context.Context) {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i](ctx)
	}
}

// startPosition turns the stored state into where the first page starts.
func startPosition(c *config.Config, t *source.Table, st watermark.State) (source.Position, error) {
	switch {
	case st.Cursor != nil && len(st.Cursor) != len(t.Cursor):
		return source.Position{}, &sourceerr.ResyncNeeded{Source: c.Name, Alt: "(or --from)",
			Reason: fmt.Sprintf("the stored watermark of %s has %d cursor values but source.cursor has %d columns; the cursor changed: ", c.Name, len(st.Cursor), len(t.Cursor))}
	case st.Cursor != nil && t.Temporal && c.Source.Lookback.Duration > 0:
		return source.Position{AtLeast: st.Cursor[0], Lookback: c.Source.Lookback.Duration}, nil
	case st.Cursor != nil:
		return source.Position{After: st.Cursor}, nil
	case st.From != "" && !t.Temporal:
		return source.Position{}, &sourceerr.ResyncNeeded{Source: c.Name,
			Reason: fmt.Sprintf("the watermark of %s was reset with --from, but its first cursor column %q is not a timestamp; ", c.Name, t.Cursor[0].Name)}
	case st.From != "":
		return source.Position{AtLeast: st.From, Lookback: c.Source.Lookback.Duration}, nil
	}
	return source.Position{}, nil
}
