package ops

import (
	"strings"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// SourceStatus is one source in `syncd status --json` and the daemon's GET /status.
type SourceStatus struct {
	Name         string   `json:"name"`
	Table        string   `json:"table"`
	Sink         string   `json:"sink"`
	Watermark    string   `json:"watermark"` // RFC 3339 with microseconds, or "" before the first page
	Cursor       []string `json:"cursor"`
	ResyncFrom   string   `json:"resync_from,omitempty"`
	LastRunAt    string   `json:"last_run_at,omitempty"`
	LastStatus   string   `json:"last_status,omitempty"`
	LastError    string   `json:"last_error,omitempty"`
	LastSuccess  string   `json:"last_success_at,omitempty"`
	RowsLastRun  int64    `json:"rows_applied_last_run"` // rows read and applied by the last run
	PagesLastRun int64    `json:"pages_last_run"`
	// The row counters since the state began, exactly the counters of the
	// same names in /metrics (syncd_rows_*_total): rows read (re-reads
	// included), written (inserted or changed), deleted (soft deletes) and
	// unchanged (read but neither written nor deleted: lookback re-reads,
	// rows already equal). RowsTotal is RowsWritten, under its old name.
	RowsRead      int64 `json:"rows_read_total"`
	RowsWritten   int64 `json:"rows_written_total"`
	RowsDeleted   int64 `json:"rows_deleted_total"`
	RowsUnchanged int64 `json:"rows_unchanged_total"`
	RowsTotal     int64 `json:"rows_applied_total"`
	// CaughtUp is the point up to which the copy was last known to hold
	// every committed source row (the read bound of the last run that
	// caught up); FreshnessSeconds is now minus it (nil before the first
	// run that caught up).
	CaughtUp         string   `json:"caught_up,omitempty"`
	FreshnessSeconds *float64 `json:"freshness_seconds,omitempty"`
	// LastCleanReconcile is when the last recorded reconcile that proved
	// the copy equal began ("" before the first).
	LastCleanReconcile string `json:"last_clean_reconcile_at,omitempty"`
	// LastReconcile is what the last recorded reconcile found (nil: none
	// recorded yet).
	LastReconcile *watermark.ReconcileResult `json:"last_reconcile,omitempty"`
	// LastKeyCheck is what the last recorded key check found (nil: none
	// recorded yet).
	LastKeyCheck *watermark.ReconcileResult `json:"last_key_check,omitempty"`
	// NewestRowAgeSeconds is now minus the watermark's timestamp: the age
	// of the newest row in the copy, which grows while the source is quiet
	// (nil when the first cursor column is not a timestamp or nothing was
	// applied yet).
	NewestRowAgeSeconds *float64 `json:"newest_row_age_seconds,omitempty"`
	// SinkRecord is the sink's own record of the copy (syncd's catalog in
	// the sink database), read by `status --sink` only (nil otherwise).
	SinkRecord *SinkRecord `json:"sink_record,omitempty"`
	// Running is the progress of the run going (only from a daemon).
	Running *syncer.Progress `json:"running,omitempty"`
	// Bound is the commit-safe read limit of the last run; HeldBackSeconds
	// is how far it was behind the source's clock; the holder fields name
	// the open transaction that held it back, if one did.
	Bound            string  `json:"bound,omitempty"`
	HeldBackSeconds  float64 `json:"bound_held_back_seconds,omitempty"`
	BoundHolderPID   int32   `json:"bound_holder_pid,omitempty"`
	BoundHolderApp   string  `json:"bound_holder_application,omitempty"`
	BoundHolderSince string  `json:"bound_holder_since,omitempty"`
	// RowsNullCursor and RowsAheadOfClock are the rows the last run that
	// caught up found outside the cursor's reach (a NULL cursor column; a
	// first cursor column past the source's clock plus its allowance) and
	// copied in its extra pass.
	RowsNullCursor   int64 `json:"rows_null_cursor"`
	RowsAheadOfClock int64 `json:"rows_ahead_of_clock"`
	// IdentityError says why the next run will refuse the stored watermark
	// (it was computed for other settings), with the resync that resets it.
	IdentityError string `json:"identity_error,omitempty"`
	// DroppedColumns are the copy's columns the source no longer has (kept,
	// NULL in rows written since); Backfill is an unfinished column-added
	// backfill and LastBackfill the last one that finished.
	DroppedColumns []string            `json:"dropped_columns,omitempty"`
	Backfill       *watermark.Backfill `json:"backfill,omitempty"`
	LastBackfill   *watermark.Backfill `json:"last_backfill,omitempty"`
	// FirstLoad is the progress of a parallel first load that has not
	// finished (nil: none going); the next run resumes it.
	FirstLoad *FirstLoadStatus `json:"first_load,omitempty"`
	// Mode is "compare" for a source whose runs compare the whole table
	// (mode: compare; no watermark), "cursor" otherwise; LastCompare is
	// what its last run compared and wrote.
	Mode        string                   `json:"mode"`
	LastCompare *watermark.CompareResult `json:"last_compare,omitempty"`
}

// FirstLoadStatus is how far an unfinished first load got: its chunks
// committed of all, the rows they wrote, when it started and how many
// processes worked on it.
type FirstLoadStatus struct {
	Started    string `json:"started_at"`
	ChunksDone int    `json:"chunks_done"`
	Chunks     int    `json:"chunks"`
	Rows       int64  `json:"rows_written"`
	Runs       int    `json:"runs"`
}

func firstLoadStatus(f *watermark.FirstLoad) *FirstLoadStatus {
	if f == nil {
		return nil
	}
	out := &FirstLoadStatus{Started: TimeText(f.Started), Chunks: len(f.Chunks), Runs: f.Runs}
	for _, c := range f.Chunks {
		if c.Done {
			out.ChunksDone++
			out.Rows += c.Rows
		}
	}
	return out
}

// Status is the document `syncd status --json` prints.
type Status struct {
	State   string         `json:"state"`
	Sources []SourceStatus `json:"sources"`
	// Skipped are the tables pattern sources matched but do not sync, with
	// the reason, as their last match recorded them.
	Skipped []SkippedTable `json:"skipped_tables,omitempty"`
}

// BuildStatus reads the stored state of every configured source.
func BuildStatus(store *watermark.Store, kinds *kind.Registry, cfgs []*config.Config) (Status, error) {
	out := Status{State: store.Path(), Sources: []SourceStatus{}}
	now := time.Now()
	for _, c := range cfgs {
		s, _, err := store.Get(c.Name)
		if err != nil {
			return out, err
		}
		out.Sources = append(out.Sources, withBound(now, s, SourceStatus{
			Name:          c.Name,
			Table:         c.Source.Table,
			Sink:          c.Sink.Table,
			Watermark:     watermarkText(s.Cursor),
			Cursor:        s.Cursor,
			ResyncFrom:    s.From,
			LastRunAt:     TimeText(s.LastRunAt),
			LastStatus:    s.LastStatus,
			LastError:     s.LastError,
			LastSuccess:   TimeText(s.LastSuccess),
			RowsLastRun:   s.LastRows,
			PagesLastRun:  s.LastPages,
			RowsRead:      s.TotalRead,
			RowsWritten:   s.TotalWritten,
			RowsDeleted:   s.TotalDeleted,
			RowsUnchanged: max(s.TotalRead-s.TotalWritten-s.TotalDeleted, 0),
			RowsTotal:     s.TotalWritten,

			RowsNullCursor:   s.NullCursorRows,
			RowsAheadOfClock: s.AheadOfClockRows,
		}))
		if c.Compare() {
			out.Sources[len(out.Sources)-1].Mode = config.ModeCompare // before its first run
		}
		// Without the DSNs (status loads none) the sink's database is
		// unknown here: CheckIdentity compares every other setting, and
		// the next run checks them all.
		k, err := kinds.Of(c)
		if err == nil {
			err = syncer.CheckIdentity(k, c, s, store.Path())
		}
		if err != nil {
			out.Sources[len(out.Sources)-1].IdentityError = err.Error()
		}
	}
	skipped, err := SkippedTables(store, PatternsOf(cfgs))
	out.Skipped = skipped
	return out, err
}

// withBound adds the freshness, the newest row's age and the last run's
// read bound to a source's status.
func withBound(now time.Time, s watermark.State, out SourceStatus) SourceStatus {
	if len(s.Cursor) > 0 {
		if t, ok := pgutil.ParseTime(s.Cursor[0]); ok {
			age := now.Sub(t).Round(time.Millisecond).Seconds()
			out.NewestRowAgeSeconds = &age
		}
	}
	out.LastReconcile = s.LastReconcile
	out.LastKeyCheck = s.LastKeyCheck
	if !s.LastCleanReconcile.IsZero() {
		out.LastCleanReconcile = TimeText(s.LastCleanReconcile)
	}
	if !s.CaughtUp.IsZero() {
		out.CaughtUp = TimeText(s.CaughtUp)
		f := now.Sub(s.CaughtUp).Round(time.Millisecond).Seconds()
		out.FreshnessSeconds = &f
	}
	out.Bound = TimeText(s.Bound)
	if !s.Bound.IsZero() && !s.BoundAt.IsZero() {
		out.HeldBackSeconds = s.BoundAt.Sub(s.Bound).Round(time.Millisecond).Seconds()
	}
	out.BoundHolderPID = s.BoundHolderPID
	out.BoundHolderApp = s.BoundHolderApp
	out.BoundHolderSince = TimeText(s.BoundHolderSince)
	out.DroppedColumns, out.Backfill, out.LastBackfill = s.Dropped, s.Backfill, s.LastBackfill
	out.FirstLoad = firstLoadStatus(s.FirstLoad)
	out.Mode, out.LastCompare = config.ModeCursor, s.LastCompare
	if s.Mode == watermark.ModeCompare {
		out.Mode = config.ModeCompare
	}
	return out
}

// WithRunning adds the progress of the runs going (by source) to st.
func (st *Status) WithRunning(running map[string]syncer.Progress) {
	for i, s := range st.Sources {
		if p, ok := running[s.Name]; ok {
			st.Sources[i].Running = &p
		}
	}
}

// TimeText renders t as RFC 3339 in UTC with microseconds, "" for the zero time.
func TimeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00")
}

// watermarkText renders a stored cursor: its first value as RFC 3339 with
// microseconds when it is a timestamp, the values joined otherwise.
func watermarkText(cursor []string) string {
	if len(cursor) == 0 {
		return ""
	}
	if t, ok := pgutil.ParseTime(cursor[0]); ok {
		return t.Format("2006-01-02T15:04:05.000000Z07:00")
	}
	return strings.Join(cursor, ",")
}

// SinkRecord is the sink catalog's record of a copy, beside the state
// file's watermark (see package catalog).
type SinkRecord struct {
	// Error, when set, says why the record could not be read; Found is
	// false when the copy is not recorded yet.
	Error string `json:"error,omitempty"`
	Found bool   `json:"found"`
	// Source is the source recorded as the copy's one writer, and From
	// where its rows come from.
	Source    string   `json:"source,omitempty"`
	From      string   `json:"from,omitempty"`
	Cursor    []string `json:"cursor,omitempty"`
	Pages     int64    `json:"pages,omitempty"`
	Rows      int64    `json:"rows,omitempty"`
	Writer    string   `json:"writer,omitempty"`
	StateFile string   `json:"state_file,omitempty"`
	UpdatedAt string   `json:"updated_at,omitempty"`
	// SameAsStateFile is true when the record's cursor is the state
	// file's watermark.
	SameAsStateFile bool `json:"same_as_state_file"`
}
