package ops

import (
	"errors"
	"fmt"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// ErrSkipsRows is wrapped by the error of a resync refused because it
// would move the watermark forward: the rows between the watermark and
// the new point would never be copied.
var ErrSkipsRows = errors.New("resync would move the watermark forward and skip rows")

// Move is what a resync does to a source's watermark.
type Move struct {
	// Was is the first cursor value the watermark held, or the point of an
	// earlier resync the next run was to read from ("" when it held none).
	Was string
	// WasAt is Was as an instant (zero when Was is "" or not a time).
	WasAt time.Time
	// day is true when Was is a date: a run reads from the day To falls in.
	day bool
	// To is the new point (zero: the start).
	To time.Time
}

// PlanMove is the move a resync to from (zero: the start) makes from st.
func PlanMove(st watermark.State, from time.Time) Move {
	m := Move{To: from}
	switch {
	case len(st.Cursor) > 0:
		m.Was = st.Cursor[0]
	case st.From != "":
		m.Was = st.From
	}
	if m.Was != "" {
		if _, err := time.Parse(time.DateOnly, m.Was); err == nil {
			m.day = true
		}
		if t, ok := pgutil.ParseTime(m.Was); ok {
			m.WasAt = t
		} else if t, err := time.Parse(time.RFC3339Nano, m.Was); err == nil {
			m.WasAt = t.UTC()
		}
	}
	return m
}

// Forward is true when the move passes rows the next run would otherwise
// read: the new point is after the watermark's first cursor value. A
// watermark that holds nothing, or no time, is never passed.
func (m Move) Forward() bool {
	to := m.To
	if m.day {
		// A date cursor is read from the day the point falls in.
		to = time.Date(to.Year(), to.Month(), to.Day(), 0, 0, 0, 0, time.UTC)
	}
	return !m.To.IsZero() && !m.WasAt.IsZero() && to.After(m.WasAt)
}

// Done says what the applied move did, in one line; skipped is the number
// of rows a forward move skipped (-1: unknown).
func (m Move) Done(source string, skipped int64) string {
	switch {
	case m.To.IsZero():
		return fmt.Sprintf("source %s: watermark cleared; the next run re-reads the whole source", source)
	case m.WasAt.IsZero() && m.Was == "":
		return fmt.Sprintf("source %s: watermark set to %s (it held none); the next run reads from there", source, TimeText(m.To))
	case m.WasAt.IsZero():
		return fmt.Sprintf("source %s: watermark moved from %s to %s; the next run reads from there", source, m.Was, TimeText(m.To))
	case m.Forward():
		return fmt.Sprintf("source %s: watermark moved forward from %s to %s: %s between were skipped and will not be copied (only syncd reconcile finds them)",
			source, TimeText(m.WasAt), TimeText(m.To), rowsText(skipped))
	}
	return fmt.Sprintf("source %s: watermark moved back from %s to %s; the next run re-reads from there", source, TimeText(m.WasAt), TimeText(m.To))
}

func rowsText(n int64) string {
	switch {
	case n < 0:
		return "an unknown number of source rows (the source could not count them)"
	case n == 1:
		return "1 source row"
	}
	return fmt.Sprintf("%d source rows", n)
}

// SkipError refuses a resync that would move the watermark forward.
type SkipError struct {
	Source string
	Move   Move
	// Rows is how many source rows lie between (-1: unknown).
	Rows int64
}

func (e *SkipError) Error() string {
	lost := rowsText(e.Rows) + " between would never be copied"
	if e.Rows == 0 {
		lost = "a row committed later with a first cursor value between would never be copied (none is there now)"
	}
	return fmt.Sprintf("source %s: resync to %s refused: the watermark is at %s, so this would move it forward and %s; give a time at or before %s to re-read from there, or add --skip-rows (\"skip_rows\": true in POST /resync) to skip them on purpose",
		e.Source, TimeText(e.Move.To), TimeText(e.Move.WasAt), lost, TimeText(e.Move.WasAt))
}

// Unwrap makes a SkipError an ErrSkipsRows and, for the exit code, a bad
// argument like a config error (exit 2).
func (e *SkipError) Unwrap() []error { return []error{ErrSkipsRows, config.ErrInvalid} }

// Resync moves the watermark of source c back to from (the zero time: the
// start) and records c's settings as the ones the watermark now belongs
// to; a move forward is refused (see ResyncMove). c is a table copy (the
// kind.Postgres of a nil registry).
func Resync(store *watermark.Store, c *config.Config, from time.Time) error {
	_, err := ResyncMove(store, nil, c, from, false)
	return err
}

// ResyncMove moves the watermark of source c to from (the zero time: the
// start) and records c's settings as the ones the watermark now belongs
// to; it returns the move it made. A from after the watermark would skip
// every row between: that is refused with a *SkipError unless skipRows
// says the operator wants exactly that. The check and the write are one
// transaction of the state file. A stored state that no longer decodes is
// replaced: resync is the recovery its error message names.
func ResyncMove(store *watermark.Store, kinds *kind.Registry, c *config.Config, from time.Time, skipRows bool) (Move, error) {
	k, err := kinds.Of(c)
	if err != nil {
		return Move{}, err
	}
	if k.NoResync != "" {
		return Move{}, c.Errorf("sink.type", "source %s %s", c.Name, k.NoResync)
	}
	name := c.Name
	id := syncer.IdentityOf(k, c)
	reset := func(st *watermark.State) {
		st.Identity = &id
		st.Cursor = nil
		st.From = ""
		st.FirstLoad = nil // a first load under way is not resumed: the copy is re-read
		st.ResyncedFrom = "start"
		if !from.IsZero() {
			st.From = from.Format("2006-01-02T15:04:05.999999Z07:00")
			st.ResyncedFrom = st.From
		}
		st.ResyncedAt = time.Now().UTC()
	}
	m := Move{To: from}
	err = store.Update(name, func(st *watermark.State) error {
		m = PlanMove(*st, from)
		if m.Forward() && !skipRows {
			return &SkipError{Source: name, Move: m, Rows: -1}
		}
		reset(st)
		return nil
	})
	if errors.Is(err, watermark.ErrCorrupt) {
		var st watermark.State
		reset(&st)
		return Move{To: from}, store.Replace(name, st)
	}
	return m, err
}
