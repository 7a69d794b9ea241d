package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// SourceStatus is one source in `syncd status --json`.
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
	// NewestRowAgeSeconds is now minus the watermark's timestamp: the age
	// of the newest row in the copy, which grows while the source is quiet
	// (nil when the first cursor column is not a timestamp or nothing was
	// applied yet).
	NewestRowAgeSeconds *float64 `json:"newest_row_age_seconds,omitempty"`
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
}

// Status is the document `syncd status --json` prints.
type Status struct {
	State   string         `json:"state"`
	Sources []SourceStatus `json:"sources"`
}

func cmdStatus(ctx context.Context, env *Env, args []string) error {
	fs := flagSet(env, "status")
	var c common
	c.register(fs, true)
	asJSON := fs.Bool("json", false, "print JSON")
	var a adminFlags
	a.register(fs)
	if err := parse(env, fs, args, &c); err != nil {
		return err
	}
	// status reads only the state file (or the daemon): the configs are
	// loaded without their DSNs, and the file is opened read-only.
	cfgs, err := loadWith(env, c.config, "", config.Options{NoSecrets: true})
	if err != nil {
		return err
	}
	store, err := openStateReadOnly(c.state)
	if isLocked(err) {
		return statusFromDaemon(ctx, env, &a, c.state, *asJSON, err)
	}
	if err != nil {
		return err
	}
	defer store.Close()
	cfgs, err = storedMembers(store, cfgs)
	if err != nil {
		return err
	}
	st, err := BuildStatus(store, cfgs)
	if err != nil {
		return err
	}
	if err := PrintStatus(env, st, *asJSON); err != nil {
		return err
	}
	return identityProblem(st)
}

// identityProblem is the first source whose next run will refuse its
// watermark, as a config error (exit 2).
func identityProblem(st Status) error {
	for _, s := range st.Sources {
		if s.IdentityError != "" {
			return configProblem(s.IdentityError)
		}
	}
	return nil
}

// configProblem is a config error whose text is already complete.
type configProblem string

func (e configProblem) Error() string { return string(e) }
func (e configProblem) Unwrap() error { return config.ErrInvalid }

// statusFromDaemon asks the daemon that holds the state file for its status.
func statusFromDaemon(ctx context.Context, env *Env, a *adminFlags, state string, asJSON bool, lockErr error) error {
	token, err := adminToken(env, a.tokenFile)
	if err != nil {
		return err
	}
	c, err := newAdminClient(a, state, token, lockErr)
	if err != nil {
		return err
	}
	st, err := daemonStatus(ctx, c)
	if err != nil {
		return err
	}
	if err := PrintStatus(env, st, asJSON); err != nil {
		return err
	}
	return identityProblem(st)
}

// daemonStatus reads the status of the daemon holding the state file,
// once it has proved that it holds it.
func daemonStatus(ctx context.Context, c *adminClient) (Status, error) {
	var st Status
	code, body, err := c.call(ctx, "GET", "/status", nil)
	if err != nil {
		return st, err
	}
	if code != 200 {
		return st, fmt.Errorf("the daemon at %s answered %d: %s", c.where, code, apiMessage(body))
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("the daemon at %s sent a status this syncd cannot read (%v); run the same syncd version as the daemon", c.where, err)
	}
	return st, nil
}

// BuildStatus reads the stored state of every configured source.
func BuildStatus(store *watermark.Store, cfgs []*config.Config) (Status, error) {
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
			LastRunAt:     timeText(s.LastRunAt),
			LastStatus:    s.LastStatus,
			LastError:     s.LastError,
			LastSuccess:   timeText(s.LastSuccess),
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
		// Without the DSNs (status loads none) the sink's database is
		// unknown here: CheckIdentity compares every other setting, and
		// the next run checks them all.
		if err := syncer.CheckIdentity(c, s, store.Path()); err != nil {
			out.Sources[len(out.Sources)-1].IdentityError = err.Error()
		}
	}
	return out, nil
}

// withBound adds the freshness, the newest row's age and the last run's
// read bound to a source's status.
func withBound(now time.Time, s watermark.State, out SourceStatus) SourceStatus {
	if len(s.Cursor) > 0 {
		if t, ok := ParsePGTime(s.Cursor[0]); ok {
			age := now.Sub(t).Round(time.Millisecond).Seconds()
			out.NewestRowAgeSeconds = &age
		}
	}
	if !s.CaughtUp.IsZero() {
		out.CaughtUp = timeText(s.CaughtUp)
		f := now.Sub(s.CaughtUp).Round(time.Millisecond).Seconds()
		out.FreshnessSeconds = &f
	}
	out.Bound = timeText(s.Bound)
	if !s.Bound.IsZero() && !s.BoundAt.IsZero() {
		out.HeldBackSeconds = s.BoundAt.Sub(s.Bound).Round(time.Millisecond).Seconds()
	}
	out.BoundHolderPID = s.BoundHolderPID
	out.BoundHolderApp = s.BoundHolderApp
	out.BoundHolderSince = timeText(s.BoundHolderSince)
	out.DroppedColumns, out.Backfill, out.LastBackfill = s.Dropped, s.Backfill, s.LastBackfill
	return out
}

// PrintStatus writes the status as JSON or as a table.
func PrintStatus(env *Env, st Status, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tWATERMARK\tLAST RUN\tSTATUS\tFRESHNESS\tROWS LAST RUN\tROWS WRITTEN\tNEWEST ROW AGE\tBOUND")
	for _, s := range st.Sources {
		wm := s.Watermark
		switch {
		case wm == "" && s.ResyncFrom != "":
			wm = "from " + s.ResyncFrom
		case wm == "":
			wm = "-"
		}
		status := cmpStr(s.LastStatus, "never run")
		if s.LastError != "" {
			status += ": " + s.LastError
		}
		if p := s.Running; p != nil {
			status = "running: " + progressText(*p)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", s.Name, wm, cmpStr(s.LastRunAt, "-"), status,
			secondsText(s.FreshnessSeconds), s.RowsLastRun, s.RowsWritten, secondsText(s.NewestRowAgeSeconds), cmpStr(s.Bound, "-"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range st.Sources {
		// Like the log, the table names only a holder open long enough to
		// matter; --json always carries it.
		if s.BoundHolderPID == source.PreparedPID {
			fmt.Fprintf(env.Stdout, "%s: held at the watermark by prepared transaction %q (prepared at %s), which holds a write lock on the source table; rows past the watermark wait until it is committed or rolled back\n",
				s.Name, s.BoundHolderApp, s.BoundHolderSince)
		} else if s.BoundHolderPID != 0 && s.HeldBackSeconds >= syncer.HoldWarnAfter.Seconds() {
			fmt.Fprintf(env.Stdout, "%s: bound held back by pid %d (application_name %q), a transaction open since %s (%s at the last run); rows stamped after it wait until it ends\n",
				s.Name, s.BoundHolderPID, s.BoundHolderApp, s.BoundHolderSince, time.Duration(s.HeldBackSeconds*1000)*time.Millisecond)
		}
		printOutside(env, s)
		if len(s.DroppedColumns) > 0 {
			fmt.Fprintf(env.Stdout, "%s: column %s dropped from the source; the copy keeps it; rows inserted since have NULL there, rows updated since keep their last value\n",
				s.Name, strings.Join(s.DroppedColumns, ", "))
		}
		if b := s.Backfill; b != nil {
			fmt.Fprintf(env.Stdout, "%s: backfilling added column %s into the copy: %d rows so far; the next run resumes it\n", s.Name, strings.Join(b.Columns, ", "), b.Rows)
		}
	}
	return nil
}

// secondsText renders a number of seconds as a duration, "-" when unknown.
func secondsText(sec *float64) string {
	if sec == nil {
		return "-"
	}
	return (time.Duration(*sec*1000) * time.Millisecond).String()
}

// progressText renders a running source's progress for the status table.
func progressText(p syncer.Progress) string {
	out := fmt.Sprintf("%d rows from %s, %.0f rows/s", p.Rows, p.From, p.RowsPerSecond)
	if p.Left >= 0 {
		out += fmt.Sprintf(", ~%d left", p.Left)
	}
	if p.ETASeconds >= 0 {
		out += ", ETA " + (time.Duration(p.ETASeconds) * time.Second).String()
	}
	return out
}

// printOutside names the rows the cursor cannot reach, when the last run
// found any: they are copied by each run's extra pass, but only fixing them
// in the source brings them back under the cursor.
func printOutside(env *Env, s SourceStatus) {
	if s.RowsNullCursor > 0 {
		fmt.Fprintf(env.Stdout, "%s: %d rows with a NULL cursor column at the last run; each run copies them in an extra pass; set the column and make it NOT NULL in %s\n", s.Name, s.RowsNullCursor, s.Table)
	}
	if s.RowsAheadOfClock > 0 {
		fmt.Fprintf(env.Stdout, "%s: %d rows stamped past the source's clock plus %s at the last run; each run copies them in an extra pass; correct their cursor in %s\n", s.Name, s.RowsAheadOfClock, source.ClockAllowance, s.Table)
	}
}

func cmpStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func timeText(t time.Time) string {
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
	if t, ok := ParsePGTime(cursor[0]); ok {
		return t.Format("2006-01-02T15:04:05.000000Z07:00")
	}
	return strings.Join(cursor, ",")
}

// ParsePGTime parses PostgreSQL's ISO text output of a timestamp (with or
// without time zone; without one it is taken as UTC) or a date.
func ParsePGTime(s string) (time.Time, bool) { return pgutil.ParseTime(s) }
