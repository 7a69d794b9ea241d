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

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/coupon"
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
	// Stop, when closed, ends the run before its next page; the page in
	// flight still commits and its watermark is still written.
	Stop <-chan struct{}
	// AfterCommit, when set, is called after a page has committed in the
	// sink and before its watermark is written. Tests use it to inject a
	// crash at the worst moment.
	AfterCommit func(pageNo int64) error
	// OnPage, when set, is called after each page's watermark is written
	// (metrics use it to show progress during a long run).
	OnPage func(PageStats)
	// OnProgress, when set, is called with the run's progress when it
	// starts reading and after each page (status shows it).
	OnProgress func(Progress)
	// ProgressEvery is how often a long run logs its progress
	// (DefaultProgressEvery when zero).
	ProgressEvery time.Duration
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
	// Campaign holds a coupon campaign's counts (sink type coupon_grants),
	// also when the run failed; nil for other sinks.
	Campaign *coupon.Stats
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
	// lookbackBound is the run's read bound when it sees every writer
	// (trustedBound), stored for the next run's start when the run ends
	// without error.
	lookbackBound string
	// SchemaChanges lists the kinds of the source schema changes the run
	// found before reading (followed, or refused when err says so).
	SchemaChanges []string
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
	res, err := run(ctx, o, log)
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
		if err == nil && res.CaughtUp.After(st.CaughtUp) {
			st.CaughtUp = res.CaughtUp
		}
		if err == nil {
			// Read every page from its start to its end (idle.go).
			st.LookbackBound = ""
			if st.Cursor != nil {
				st.LookbackBound = res.lookbackBound
			}
		}
		return nil
	})
	if err == nil && rerr != nil {
		err = rerr
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
	default:
		log.Info("run done", attrs...)
	}
	return res, err
}

func run(ctx context.Context, o Options, log *slog.Logger) (Result, error) {
	c := o.Config
	var res Result
	st, _, err := o.Store.Get(c.Name)
	if err != nil {
		return res, err
	}
	// A watermark computed for other settings is refused before anything
	// is read or written.
	if err := CheckIdentity(c, st, o.Store.Path()); err != nil {
		return res, err
	}
	if c.Sink.Type == config.SinkCouponGrants {
		return runCampaign(ctx, o, log)
	}
	src, err := source.Open(ctx, c)
	if err != nil {
		return res, err
	}
	defer src.Close(context.WithoutCancel(ctx))
	bound, err := readBound(ctx, src, c, log)
	if err != nil {
		return res, err
	}
	res.Bound, res.BoundAt, res.HeldBack, res.Holder, res.BoundBlind = bound.At, bound.Now, bound.HeldBack(), bound.Holder, bound.Blind
	// Enum labels read after the bound include every label a row under it
	// uses; Prepare adds the missing ones to the copy's enums.
	if err := src.RefreshTypes(ctx); err != nil {
		return res, err
	}
	caughtUp := bound.At
	if caughtUp.IsZero() {
		if caughtUp, err = sourceClock(ctx, src); err != nil {
			return res, err
		}
	}
	dst, err := openSink(ctx, c)
	if err != nil {
		return res, err
	}
	defer dst.Close(context.WithoutCancel(ctx))
	lock, err := runlock.Acquire(ctx, sinkConn(dst), c.Sink.DSN, LockTarget(c))
	if err != nil {
		return res, err
	}
	defer lock.Release(context.WithoutCancel(ctx))
	if err := checkCopyNotLost(ctx, sinkConn(dst), c, st, o.Store.Path()); err != nil {
		return res, err
	}
	if err := adoptIdentity(o.Store, c); err != nil {
		return res, err
	}
	if u, ok := dst.(sink.SourceSchemaUser); ok {
		u.UseSourceSchema(src.Table.Types, src.Table.Checks)
	}
	if res.SchemaChanges, err = followSchema(ctx, o, src, dst, log); err != nil {
		return res, err
	}
	if err := dst.Prepare(ctx, src.Table.Columns); err != nil {
		return res, err
	}
	if conn := sinkConn(dst); conn != nil {
		sink.WarnFsync(ctx, conn, c.Sink.DSN, log)
	}
	if b, ok := dst.(sink.BinaryWriter); ok && b.WantsBinary() {
		src.UseBinary()
	}

	pos, err := startPosition(c, src.Table, st)
	if err != nil {
		return res, err
	}
	// The lookback window is re-read only as far back as a row the last
	// run could not see can lie (idle.go).
	pos = lookbackStart(st, pos)
	res.lookbackBound = trustedBound(c, src.Table, bound)
	if err := lowerLookbackBound(o.Store, c.Name, st, res.lookbackBound); err != nil {
		return res, err
	}
	// Rows at or past the bound wait for a later run, so the watermark never
	// passes a transaction that may still commit. A bound below the
	// watermark reads nothing new and leaves the watermark where it is.
	pos, read := boundPosition(pos, st, bound, &res)
	if bound.Hold {
		caughtUp = time.Time{} // nothing past the watermark is read: not caught up
	}
	// While re-reading the lookback window the cursor is behind the stored
	// watermark; the watermark must not move back, so it is held until a
	// page ends past it.
	behind := st.Cursor != nil && pos.After == nil
	prog := startProgress(ctx, o, log, src, pos, st)
	defer prog.stop()
	fetch := &prefetcher{src: src, limit: c.Source.PageSize}
	defer fetch.wait() // before src.Close (deferred above)
	// A page is reported (OnPage, the "page applied" line) once its
	// watermark is written, in page order.
	wm := newMarks(o.Store, c.Name, dst, func(k mark, saved []string) {
		prog.add(int64(k.rows))
		if o.OnPage != nil {
			o.OnPage(PageStats{Rows: int64(k.rows), Written: k.written, Deleted: k.deleted, Cursor: saved})
		}
		log.Debug("page applied", "page", k.page, "rows", k.rows, "written", k.written, "cursor", k.last)
	})
	// done ends the run however it ends: every page committed so far
	// becomes durable and gets its watermark, as if each had been written
	// right after its commit (only a killed process leaves the watermark a
	// few pages behind, which the next run re-applies harmlessly).
	done := func(err error) (Result, error) {
		if err == nil {
			// Caught up: copy the rows the cursor cannot reach before the
			// final flush, so their pages become durable with the others.
			fetch.wait()
			err = copyOutside(ctx, o, src, dst, lock, log, &res)
		}
		ferr := wm.flush(ctx)
		res.Cursor = wm.saved
		if ferr != nil && err == nil {
			return res, ferr
		}
		if err == nil {
			res.CaughtUp = caughtUp
		}
		return res, err
	}
	for read {
		select {
		case <-o.Stop:
			res.Stopped = true
			return done(ErrStopped)
		default:
		}
		if err := ctx.Err(); err != nil {
			return done(fmt.Errorf("sync %s: %w", c.Name, err))
		}
		p, err := fetch.read(ctx, pos)
		if err != nil {
			return done(err)
		}
		if p.Len() == 0 {
			return done(nil)
		}
		next := source.Position{After: p.Last, Before: pos.Before}
		if !behind && p.Len() == c.Source.PageSize {
			fetch.ahead(ctx, next) // while this page is written
		}
		if err := lock.Check(ctx); err != nil {
			return done(err)
		}
		// The page in flight commits even when ctx is cancelled meanwhile:
		// a cancelled COPY would only roll back and repeat the work.
		ar, err := dst.Apply(context.WithoutCancel(ctx), p)
		if err != nil {
			return done(err)
		}
		res.Pages++
		res.Rows += int64(p.Len())
		res.Written += ar.Written
		res.Deleted += ar.Deleted
		if o.AfterCommit != nil {
			if err := o.AfterCommit(res.Pages); err != nil {
				return done(err) // the pages before this one keep their watermark
			}
		}
		if behind {
			less, err := src.Less(ctx, st.Cursor, p.Last)
			if err != nil {
				return done(err)
			}
			behind = !less
		}
		if err := wm.committed(p, res.Pages, ar, !behind); err != nil {
			return res, err
		}
		res.Cursor = wm.saved
		if p.Len() < c.Source.PageSize {
			return done(nil)
		}
		pos = next
	}
	return done(nil)
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

// sinkConn is the sink's own connection when it has one, so that the run
// lock is lost exactly when the sink's connection is.
func sinkConn(s sink.Sink) *pgx.Conn {
	if c, ok := s.(interface{ Conn() *pgx.Conn }); ok {
		return c.Conn()
	}
	return nil
}

func openSink(ctx context.Context, c *config.Config) (sink.Sink, error) {
	switch c.Sink.Type {
	case config.SinkPostgres:
		return sink.OpenPostgres(ctx, c)
	}
	return nil, c.Errorf("sink.type", "internal: sink type %q has no table sink (config validation admits only postgres and coupon_grants, and coupon_grants runs as a campaign)", c.Sink.Type)
}
