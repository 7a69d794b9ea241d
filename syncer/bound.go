package syncer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// DefaultHoldWarnAfter is how long a transaction must have been open, when
// it holds the bound back, before a run logs a warning (Options.HoldWarnAfter
// when zero); on a busy database shorter transactions are always open and
// are logged at debug level only.
const DefaultHoldWarnAfter = time.Second

// DefaultAheadWait is how far ahead of the source's clock a row may be
// stamped for a run to wait for the clock rather than leave it to the next
// run, and how long a run waits for open writers that hold the bound at the
// watermark (Options.AheadWait when zero).
const DefaultAheadWait = 2 * time.Second

// waits are the run's waits and thresholds for the read bound, with the
// defaults filled in.
type waits struct {
	ahead    time.Duration // Options.AheadWait
	holdWarn time.Duration // Options.HoldWarnAfter
}

func waitsOf(o Options) waits {
	w := waits{ahead: o.AheadWait, holdWarn: o.HoldWarnAfter}
	if w.ahead <= 0 {
		w.ahead = DefaultAheadWait
	}
	if w.holdWarn <= 0 {
		w.holdWarn = DefaultHoldWarnAfter
	}
	return w
}

// blindWarned remembers the sources whose blind bound was already logged:
// that warning is said once per process, not at every run.
var blindWarned sync.Map

// readBound computes the run's read bound and logs what a user must know
// about it: once per process when the role cannot see other sessions or
// source.bound: off leaves late commits to reconcile, and once per cause
// (a transaction, a prepared transaction) when one holds it back.
func readBound(ctx context.Context, src source.Source, c *config.Config, w waits, log *slog.Logger) (source.Bound, error) {
	if a, ok := src.(interface{ ReadAheadWith(time.Duration) }); ok {
		a.ReadAheadWith(w.ahead) // asked below, in the bound's round trip
	}
	b, err := settledBound(ctx, src, w)
	if err != nil {
		return b, err
	}
	// Rows stamped a moment ahead of the source's clock (now() plus an
	// offset, an application clock slightly fast) would wait for the next
	// run; when they are at most the ahead wait away, wait for the clock to pass
	// them and take the bound again, so a run catches up with them.
	var ahead time.Duration
	var ok bool
	if s, settles := src.(source.Settler); settles {
		if ahead, ok, err = s.AheadOfClock(ctx, b, w.ahead); err != nil {
			return b, err
		}
	}
	if ok {
		log.Debug("waiting for the source clock to pass rows stamped ahead of it", "wait", ahead.Round(time.Millisecond).String())
		select {
		case <-time.After(ahead + time.Millisecond):
		case <-ctx.Done():
			return b, ctx.Err()
		}
		if b, err = settledBound(ctx, src, w); err != nil {
			return b, err
		}
	}
	if w := b.Warning(c.Source.Lookback.Duration); w != "" {
		key := c.Name + "\x00" + pgutil.Describe(c.Source.DSN)
		if _, seen := blindWarned.LoadOrStore(key, true); !seen {
			log.Warn(w)
		}
	}
	warnLocalTime(ctx, src, log)
	logHolders(ctx, b, src.Table().Temporal, c, w, log)
	return b, nil
}

// warnLocalTime logs source.LocalTimeWarning once per process and source.
func warnLocalTime(ctx context.Context, from source.Source, log *slog.Logger) {
	if src, ok := from.(source.Checker); ok {
		src.WarnLocalTime(ctx, log)
	}
}

// settledBound takes the bound and, when open writers make it hold at the
// watermark, waits up to the ahead wait for exactly those writers to end.
func settledBound(ctx context.Context, src source.Source, w waits) (source.Bound, error) {
	b, err := src.Bound(ctx)
	s, ok := src.(source.Settler)
	if err != nil || !ok {
		return b, err
	}
	return s.AwaitWriters(ctx, b, w.ahead)
}

// logHolders logs each transaction that holds the bound back, at warning
// level once per cause (a transaction by its pid and start, a prepared
// transaction by its gid), at debug level otherwise: a busy source holds
// the bound at every run, and the metric carries the rest.
func logHolders(ctx context.Context, b source.Bound, temporal bool, c *config.Config, w waits, log *slog.Logger) {
	for _, h := range b.Holders {
		open := b.Now.Sub(h.Since)
		seqHold := b.Hold && !temporal
		lvl := slog.LevelDebug
		if (h.Prepared() || seqHold || open >= w.holdWarn) && firstWarning(c.Name, h) {
			lvl = slog.LevelWarn
		}
		since := h.Since.Format(time.RFC3339Nano)
		switch {
		case h.Prepared():
			log.Log(ctx, lvl, "a prepared transaction holds a write lock on "+c.Source.Table+" and holds the source back: rows past the watermark wait until it is committed or rolled back (COMMIT PREPARED / ROLLBACK PREPARED)",
				"gid", h.App, "prepared", since, "table", c.Source.Table)
		case seqHold:
			log.Log(ctx, lvl, "a transaction that can still commit rows below "+c.Source.Cursor[0]+" values already committed stayed open past the wait; rows past the watermark wait until it ends",
				"pid", h.PID, "application_name", h.App, "transaction_start", since, "waited", w.ahead.String(), "table", c.Source.Table)
		default:
			log.Log(ctx, lvl, "bound held back by a transaction open since "+since+"; rows stamped at or after it wait until it ends",
				"pid", h.PID, "application_name", h.App, "open_for", open.Round(time.Millisecond).String(), "bound", b.Value)
		}
	}
}

// maxCauses bounds the causes remembered per source.
const maxCauses = 256

// warnedCauses maps a source name to the causes already warned about.
var warnedCauses sync.Map

type causes struct {
	mu   sync.Mutex
	seen map[source.Holder]bool
}

// firstWarning reports whether h has not yet been warned about for source
// name, and remembers it.
func firstWarning(name string, h source.Holder) bool {
	v, _ := warnedCauses.LoadOrStore(name, &causes{seen: map[source.Holder]bool{}})
	cs := v.(*causes)
	key := source.Holder{PID: h.PID, Since: h.Since}
	if h.Prepared() {
		key.App = h.App // the gid
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.seen[key] {
		return false
	}
	if len(cs.seen) >= maxCauses {
		clear(cs.seen)
	}
	cs.seen[key] = true
	return true
}

// boundPosition applies the run's read bound to where it starts reading. A
// bound that holds at the watermark reads nothing past it (rows behind it,
// in the lookback window, are still re-read), and nothing at all when there
// is no watermark yet; it reports false when nothing is to be read.
func boundPosition(pos source.Position, st watermark.State, b source.Bound, res *Result) (source.Position, bool) {
	if !b.Hold {
		pos.Before = b.Value
		return pos, true
	}
	if st.Cursor == nil {
		return pos, false
	}
	pos.Before = st.Cursor[0]
	if t, ok := pgutil.ParseTime(st.Cursor[0]); ok && !b.Now.IsZero() {
		res.Bound, res.HeldBack = t, b.Now.Sub(t)
	}
	return pos, true
}
