package source

import (
	"context"
	"fmt"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
)

// AheadOfClock looks for selected rows stamped after the source's clock,
// at most within of it: rows written a moment ago with a stamp slightly in
// the future (now() + an offset, an application clock a little ahead). It
// returns how far past the bound the latest of them lies, and false when
// there is none or the bound is not the clock (a transaction holds it,
// source.settle keeps it behind on purpose, or with bound: off it is the
// clock plus ClockAllowance).
func (r *Reader) AheadOfClock(ctx context.Context, b Bound, within time.Duration) (time.Duration, bool, error) {
	first := r.table.Cursor[0]
	base := baseType(first.Type)
	if !r.table.Temporal || b.Value == "" || b.Holder.PID != 0 || b.Hold || r.cfg.Source.Settle.Duration > 0 || r.cfg.Source.Bound == config.BoundOff || base == "date" {
		return 0, false, nil
	}
	col := pgutil.Ident(first.Name)
	q := "SELECT extract(epoch FROM max(" + col + ") - $1::" + first.Type + ")::float8 FROM " +
		pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name) +
		" WHERE " + col + " >= $1::" + first.Type + " AND " + col + " < $1::" + first.Type + " + $2::interval"
	if f := r.filter(); f != "" {
		q += " AND " + f
	}
	var secs *float64
	if err := r.conn.QueryRow(ctx, q, b.Value, fmt.Sprintf("%d microseconds", within.Microseconds())).Scan(&secs); err != nil {
		return 0, false, fmt.Errorf("look for rows of %s stamped ahead of the source clock: %w", r.table.Ident, err)
	}
	if secs == nil {
		return 0, false, nil
	}
	return time.Duration(*secs * float64(time.Second)), true, nil
}
