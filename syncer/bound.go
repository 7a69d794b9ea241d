package syncer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/source"
)

// HoldWarnAfter is how long a transaction must have been open, when it holds
// the bound back, before a run logs a warning; on a busy database shorter
// transactions are always open and are logged at debug level only.
var HoldWarnAfter = time.Second

// AheadWait is how far ahead of the source's clock a row may be stamped
// for a run to wait for the clock rather than leave it to the next run.
var AheadWait = 2 * time.Second

// blindWarned remembers the sources whose blind bound was already logged:
// that warning is said once per process, not at every run.
var blindWarned sync.Map

// readBound computes the run's read bound and logs what a user must know
// about it: once per process when the role cannot see other sessions, and
// at most once per run when a long transaction holds it back.
func readBound(ctx context.Context, src *source.Reader, c *config.Config, log *slog.Logger) (source.Bound, error) {
	b, err := src.Bound(ctx)
	if err != nil {
		return b, err
	}
	// Rows stamped a moment ahead of the source's clock (now() plus an
	// offset, an application clock slightly fast) would wait for the next
	// run; when they are at most AheadWait away, wait for the clock to pass
	// them and take the bound again, so a run catches up with them.
	ahead, ok, err := src.AheadOfClock(ctx, b, AheadWait)
	if err != nil {
		return b, err
	}
	if ok {
		log.Debug("waiting for the source clock to pass rows stamped ahead of it", "wait", ahead.Round(time.Millisecond).String())
		select {
		case <-time.After(ahead + time.Millisecond):
		case <-ctx.Done():
			return b, ctx.Err()
		}
		if b, err = src.Bound(ctx); err != nil {
			return b, err
		}
	}
	if w := b.Warning(c.Source.Lookback.Duration); w != "" {
		key := c.Name + "\x00" + pgutil.Describe(c.Source.DSN)
		if _, seen := blindWarned.LoadOrStore(key, true); !seen {
			log.Warn(w)
		}
	}
	if h := b.Holder; h.PID != 0 {
		open := b.Now.Sub(h.Since)
		lvl := slog.LevelDebug
		if open >= HoldWarnAfter {
			lvl = slog.LevelWarn
		}
		log.Log(ctx, lvl, "bound held back by a transaction open since "+h.Since.Format(time.RFC3339Nano)+"; rows stamped at or after it wait until it ends",
			"pid", h.PID, "application_name", h.App, "open_for", open.Round(time.Millisecond).String(), "bound", b.Value)
	}
	return b, nil
}
