package catalog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Run is how a run of the copy ended, as its record keeps it: any replica
// of a fleet reads there when the copy was last run, by which process
// (Record.Writer) and how fresh it is. An idle run writes nothing else to
// the sink, so the record is written at most once per Every (the
// caller's throttle, see syncer), or with the last page of a run that has
// pages.
type Run struct {
	// At is when the run ended, by the sink's clock (zero: no run
	// recorded).
	At time.Time
	// Bound is the commit-safe read bound the run reached (zero: the run
	// read without one).
	Bound time.Time
	// CaughtUp is whether the run caught up: read every committed row
	// below its bound.
	CaughtUp bool
	// Fresh is the point up to which the copy holds every committed source
	// row: that of the last recorded run that caught up (it never moves
	// back). Zero: no run recorded one.
	Fresh time.Time
	// Every is how often, at most, the writer records an idle run: a
	// record older than a few of them was left by a replica that stopped.
	Every time.Duration
}

// runColumns are the run's columns in a select list (format 2), in the
// order scan reads them; noRunColumns stand for them in a catalog of
// format 1.
const (
	runColumns   = `run_at, run_bound, run_caught_up, caught_up, extract(epoch FROM run_every)::float8`
	noRunColumns = `NULL::timestamptz, NULL::timestamptz, NULL::boolean, NULL::timestamptz, NULL::float8`
)

// handover is the SET list that clears the last run's fields when the
// writer changes ($3 is the new writer; the right-hand sides read the row
// as it was).
const handover = `run_at = CASE WHEN writer = $3 THEN run_at END, run_bound = CASE WHEN writer = $3 THEN run_bound END, ` +
	`run_caught_up = CASE WHEN writer = $3 THEN run_caught_up END, run_every = CASE WHEN writer = $3 THEN run_every END`

func runOf(at, bound *time.Time, caught *bool, fresh *time.Time, every *float64) Run {
	var r Run
	if at != nil {
		r.At = *at
	}
	if bound != nil {
		r.Bound = *bound
	}
	if caught != nil {
		r.CaughtUp = *caught
	}
	if fresh != nil {
		r.Fresh = *fresh
	}
	if every != nil {
		r.Every = time.Duration(*every * float64(time.Second))
	}
	return r
}

// set is the SET list that records r as the run that ended now (the
// sink's clock), in literals (see MarkSQL). Fresh never moves back:
// GREATEST ignores a NULL.
func (r Run) set() string {
	return "run_at = now(), run_bound = " + timeLiteral(r.Bound) + ", run_caught_up = " + strconv.FormatBool(r.CaughtUp) +
		", caught_up = GREATEST(caught_up, " + timeLiteral(r.Fresh) + "), run_every = " + strconv.FormatInt(r.Every.Microseconds(), 10) + " * interval '1 microsecond'"
}

// timeLiteral is t as a timestamptz literal at full precision, NULL for
// the zero time.
func timeLiteral(t time.Time) string {
	if t.IsZero() {
		return "NULL"
	}
	return "'" + t.UTC().Format("2006-01-02 15:04:05.999999Z07:00") + "'::timestamptz"
}

// RecordRun records that a run of copy ended now with r (a run without a
// page to carry it, see MarkSQL). It is not made durable: a record lost
// in a crash of the sink is written again by the next run.
func RecordRun(ctx context.Context, conn *pgx.Conn, copy string, r Run) error {
	if _, err := conn.Exec(ctx, "UPDATE syncd.copies SET "+r.set()+" WHERE copy_table = "+literal(copy), pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("record the run of %s in the syncd catalog: %w", copy, err)
	}
	return nil
}

// List returns every record of the catalog in conn's database (none when
// there is no catalog: List never creates it), of format 1 or later (a
// later format only adds columns).
func List(ctx context.Context, conn *pgx.Conn) ([]Record, error) {
	v, err := version(ctx, conn)
	if errors.Is(err, errNoCatalog) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, "SELECT "+columnsOf(v)+" FROM syncd.copies ORDER BY copy_table")
	if err != nil {
		return nil, fmt.Errorf("read syncd's catalog (syncd.copies) in the sink: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("read syncd's catalog (syncd.copies) in the sink: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read syncd's catalog (syncd.copies) in the sink: %w", err)
	}
	return out, nil
}
