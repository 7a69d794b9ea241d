package syncer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// ErrFromFuture is wrapped by the error of CheckFrom for a resync time past
// the source's clock.
var ErrFromFuture = errors.New("resync time is in the future")

// CheckFrom refuses to move the watermark of c to from (zero: the start)
// when from lies more than source.ClockAllowance past the source's clock:
// the next run would start there and every row written until then would
// never be copied. The clock is now() on the source; when the source cannot
// be reached it is the local clock, and the message says which.
//
// A source in compare mode has no watermark to move: it is refused, as a
// config error.
func CheckFrom(ctx context.Context, c *config.Config, from time.Time) error {
	if c.Compare() {
		return c.Errorf("mode", "source %s is in compare mode: it has no watermark, and each run compares the whole table and repairs the copy, so resync does not apply", c.Name)
	}
	if from.IsZero() {
		return nil
	}
	now, clock := clockForResync(ctx, c)
	if !from.After(now.Add(source.ClockAllowance)) {
		return nil
	}
	return &fromError{fmt.Sprintf("source %s: resync to %s refused: it is %s past %s (%s); the watermark would skip every row written until then: give a time at or before now, or --from-start",
		c.Name, from.UTC().Format(time.RFC3339Nano), from.Sub(now).Round(time.Second), clock, now.UTC().Format(time.RFC3339Nano))}
}

// fromError is an ErrFromFuture and, for the exit code, a bad argument
// like a config error (exit 2).
type fromError struct{ msg string }

func (e *fromError) Error() string   { return e.msg }
func (e *fromError) Unwrap() []error { return []error{ErrFromFuture, config.ErrInvalid} }

// clockForResync reads now() on the source of c, falling back to the local
// clock; the text says which clock was read.
func clockForResync(ctx context.Context, c *config.Config) (time.Time, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgutil.Connect(ctx, c.Source.DSN, "source")
	if err == nil {
		defer conn.Close(context.WithoutCancel(ctx))
		var now time.Time
		if err = conn.QueryRow(ctx, "SELECT now()").Scan(&now); err == nil {
			return now, "the source's clock"
		}
	}
	return time.Now(), fmt.Sprintf("the local clock, as the source could not be reached (%v)", err)
}

// SkippedRows counts the rows of source c that a resync from the stored
// state st to the point to would never copy: the rows past the watermark
// (or at or after an earlier resync point) whose first cursor column is
// before to. It gives up after 5 s (an admin call waits 15 s for its
// answer): the count is for the message only.
func SkippedRows(ctx context.Context, c *config.Config, st watermark.State, to time.Time) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	src, err := source.Open(ctx, c)
	if err != nil {
		return 0, err
	}
	defer src.Close(context.WithoutCancel(ctx))
	var pos source.Position
	switch {
	case st.Cursor != nil && len(st.Cursor) != len(src.Table().Cursor):
		return 0, fmt.Errorf("count the rows a resync of %s would skip: the stored watermark has %d cursor values but source.cursor has %d columns", c.Name, len(st.Cursor), len(src.Table().Cursor))
	case st.Cursor != nil:
		pos.After = st.Cursor
	case st.From != "":
		pos.AtLeast = st.From
	}
	return src.CountBefore(ctx, pos, to)
}
