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
	if !r.aheadApplies() || b.Value == "" || b.Holder.PID != 0 || b.Hold {
		return 0, false, nil
	}
	if a := r.ahead; a != nil {
		r.ahead = nil
		if a.now.Equal(b.Now) && a.within == within {
			// Read in the bound's own round trip, with the bound's now()
			// as the limit: b is that bound, not held, so its Value is
			// exactly that now() (see queueBound).
			return a.result()
		}
	}
	q := r.aheadQuery("$1::"+first.Type, "$2::interval")
	var secs *float64
	if err := r.conn.QueryRow(ctx, q, b.Value, interval(within)).Scan(&secs); err != nil {
		return 0, false, fmt.Errorf("look for rows of %s stamped ahead of the source clock: %w", r.table.Ident, err)
	}
	return aheadRead{secs: secs}.result()
}

// aheadApplies reports whether rows stamped ahead of the clock are looked
// for at all: a date or timestamp first cursor column whose bound is the
// clock (not source.settle behind it, nor the ceiling of bound: off).
func (r *Reader) aheadApplies() bool {
	return r.table.Temporal && r.cfg.Source.Settle.Duration <= 0 && r.cfg.Source.Bound != config.BoundOff &&
		baseType(r.table.Cursor[0].Type) != "date"
}

// aheadQuery is AheadOfClock's statement with the bound value v and the
// wait within as SQL.
func (r *Reader) aheadQuery(v, within string) string {
	col := pgutil.Ident(r.table.Cursor[0].Name)
	q := "SELECT extract(epoch FROM max(" + col + ") - " + v + ")::float8 FROM " +
		pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name) +
		" WHERE " + col + " >= " + v + " AND " + col + " < " + v + " + " + within
	if f := r.filter(); f != "" {
		q += " AND " + f
	}
	return q
}

// aheadAtNow is AheadOfClock's statement for the bound a statement of the
// same implicit transaction reads (queueBound): its value is that
// transaction's now(), as the column's type prints it. Only for a column
// of microseconds: a timestamp(p) truncates the bound to p digits, which
// now() in SQL does not (ok is false).
func (r *Reader) aheadAtNow() (q string, ok bool) {
	first := r.table.Cursor[0]
	if !r.aheadApplies() || precision(first.Type) != time.Microsecond {
		return "", false
	}
	now := "now()"
	if baseType(first.Type) == "timestamp without time zone" {
		now = "(now() AT TIME ZONE 'UTC')" // limitText prints the UTC time
	}
	return r.aheadQuery(now+"::"+first.Type, "$1::interval"), true
}

// aheadRead is what AheadOfClock's statement returned: the seconds from
// the bound to the latest row stamped ahead of it (nil: none). The bound
// read with it (queueBound) sets now and within.
type aheadRead struct {
	now    time.Time
	within time.Duration
	secs   *float64
}

func (a aheadRead) result() (time.Duration, bool, error) {
	if a.secs == nil {
		return 0, false, nil
	}
	return time.Duration(*a.secs * float64(time.Second)), true, nil
}

// interval is d as the text of an interval.
func interval(d time.Duration) string {
	return fmt.Sprintf("%d microseconds", d.Microseconds())
}
