package syncer

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/syncd/syncd/internal/saidonce"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
)

// outsideWarned holds the sources whose rows outside the cursor were
// warned about by this process.
var outsideWarned saidonce.Set

// copyOutside is the extra pass at the end of a run that caught up: it
// counts the rows no cursor page can reach (a NULL cursor column, a first
// cursor column past the source's clock plus source.ClockAllowance), warns
// about them, and upserts them through the same sink path in pages keyed by
// sink.key. It never touches the watermark: the pages carry no cursor, and
// the sink's upsert skips rows that are already equal, so repeating the pass
// every run is harmless. With nothing to do it costs one indexed query.
//
// The pass runs before the run's final flush, so its pages become durable
// with the cursor pages; a failure fails the run, and the next run repeats
// the pass.
func copyOutside(ctx context.Context, o Options, from source.Source, dst sink.Sink, lock kind.RunLock, log *slog.Logger, res *Result) error {
	src, ok := from.(source.OutsideReader)
	if !ok {
		return nil // a source whose cursor reaches every row
	}
	out, err := src.CountOutside(ctx)
	if err != nil {
		return err
	}
	res.NullCursorRows, res.AheadOfClockRows = out.NullCursor, out.Ahead
	res.outsideCounted = true
	name := o.Config.Name
	if out.Total() == 0 {
		outsideWarned.Forget(name)
		return nil
	}
	// Said once while the same rows remain (syncd_rows_null_cursor and
	// syncd_rows_ahead_of_clock show
	// their count meanwhile); at debug level at the other runs.
	lvl := slog.LevelWarn
	if !outsideWarned.Changed(name, fmt.Sprint(out.NullCursor, " ", out.Ahead)) {
		lvl = slog.LevelDebug
	}
	for _, w := range out.Warnings(from.Table()) {
		log.Log(ctx, lvl, w, "table", from.Table().Ident.String(), "rows_null_cursor", out.NullCursor, "rows_ahead_of_clock", out.Ahead)
	}
	limit := o.Config.Source.PageSize
	var after []string
	for {
		select {
		case <-o.Stop:
			res.Stopped = true
			return ErrStopped
		default:
		}
		p, next, err := src.ReadOutside(ctx, out, after, limit)
		if err != nil {
			return err
		}
		if p.Len() == 0 {
			return nil
		}
		if err := checkLock(ctx, lock); err != nil {
			return err
		}
		ar, err := dst.Apply(ctx, p)
		if err != nil {
			return err
		}
		// Kept apart from Written and Deleted, which count the cursor pages
		// exactly as the state's and the metrics' row counters do.
		res.OutsideRows += int64(p.Len())
		res.OutsideWritten += ar.Written + ar.Deleted
		if p.Len() < limit {
			return nil
		}
		after = next
	}
}
