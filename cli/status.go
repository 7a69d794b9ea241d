package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/ops"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/syncer"
)

func cmdStatus(ctx context.Context, env *Env, args []string) error {
	fs := flagSet(env, "status")
	var c common
	c.register(fs, true)
	asJSON := fs.Bool("json", false, "print JSON (the same as -o json)")
	var output string
	fs.StringVar(&output, "o", "", "output format: text (the default, a table that fits 120 columns), wide (a table with every column) or json")
	fs.StringVar(&output, "output", "", "the same as -o")
	withSink := fs.Bool("sink", false, "also read each copy's record in its sink database (syncd's catalog) and show it beside the state file's watermark; needs the DSNs")
	fleet := fs.Bool("fleet", false, "show every copy of the configured sources as their sink databases record it, whichever replica runs it: the process that last claimed it, whether a run holds it now, its cursor, when a page last moved it, its last run, whether it caught up, its lag and whether its record is stale; reads the sinks (needs the DSNs), not the state file")
	var a adminFlags
	a.register(fs)
	if err := parse(env, fs, args, &c); err != nil {
		return err
	}
	format, err := outputFormat(output, *asJSON)
	if err != nil {
		return err
	}
	if *fleet {
		if *withSink {
			return fmt.Errorf("--fleet and --sink: give one (--fleet reads only the sinks): %w", ErrUsage)
		}
		return cmdStatusFleet(ctx, env, c.config, format)
	}
	// status reads only the state file (or the daemon): the configs are
	// loaded without their DSNs, and the file is opened read-only.
	cfgs, err := loadWith(env, c.config, "", config.Options{NoSecrets: true})
	if err != nil {
		return err
	}
	store, err := openStateReadOnly(c.state)
	if isLocked(err) {
		return statusFromDaemon(ctx, env, &a, c.state, format, err, sinkFrom(*withSink, c.config))
	}
	if err != nil {
		return err
	}
	defer store.Close()
	cfgs, err = storedMembers(store, cfgs)
	if err != nil {
		return err
	}
	st, err := ops.BuildStatus(store, env.Kinds, cfgs)
	if err != nil {
		return err
	}
	if *withSink {
		if err := addSinkRecords(ctx, env, c.config, &st); err != nil {
			return err
		}
	}
	if err := printStatus(env, st, format); err != nil {
		return err
	}
	return identityProblem(st)
}

// identityProblem is the first source whose next run will refuse its
// watermark, as a config error (exit 2).
func identityProblem(st ops.Status) error {
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
func statusFromDaemon(ctx context.Context, env *Env, a *adminFlags, state string, format string, lockErr error, sinkConfig string) error {
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
	if sinkConfig != "" {
		if err := addSinkRecords(ctx, env, sinkConfig, &st); err != nil {
			return err
		}
	}
	if err := printStatus(env, st, format); err != nil {
		return err
	}
	return identityProblem(st)
}

// sinkFrom is the config path status --sink reads the sinks of ("" without
// --sink).
func sinkFrom(on bool, path string) string {
	if on {
		return path
	}
	return ""
}

// daemonStatus reads the status of the daemon holding the state file,
// once it has proved that it holds it.
func daemonStatus(ctx context.Context, c *adminClient) (ops.Status, error) {
	var st ops.Status
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

// PrintStatus writes the status as JSON or as the default table.
func PrintStatus(env *Env, st ops.Status, asJSON bool) error {
	if asJSON {
		return printStatus(env, st, outputJSON)
	}
	return printStatus(env, st, outputText)
}

// printStatus writes the status in one of the -o formats: the table that
// fits 120 columns (the details of a failed or running source on a line
// of their own below it), the wide table with every column, or JSON.
func printStatus(env *Env, st ops.Status, format string) error {
	if format == outputJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	if err := statusTable(env.Stdout, st, format == outputWide, time.Now()); err != nil {
		return err
	}
	for _, s := range st.Sources {
		// Like the log, the table names only a holder open long enough to
		// matter; --json always carries it.
		if s.BoundHolderPID == source.PreparedPID {
			fmt.Fprintf(env.Stdout, "%s: held at the watermark by prepared transaction %q (prepared at %s), which holds a write lock on the source table; rows past the watermark wait until it is committed or rolled back\n",
				s.Name, s.BoundHolderApp, s.BoundHolderSince)
		} else if s.BoundHolderPID != 0 && s.HeldBackSeconds >= syncer.DefaultHoldWarnAfter.Seconds() {
			fmt.Fprintf(env.Stdout, "%s: bound held back by pid %d (application_name %q), a transaction open since %s (%s at the last run); rows stamped after it wait until it ends\n",
				s.Name, s.BoundHolderPID, s.BoundHolderApp, s.BoundHolderSince, durationText(secondsDuration(s.HeldBackSeconds)))
		}
		printOutside(env, s)
		if c := s.LastCompare; c != nil {
			fmt.Fprintf(env.Stdout, "%s: compare mode: the last run compared %d rows and wrote %d inserted, %d updated, %d deleted\n", s.Name, c.Compared, c.Inserted, c.Updated, c.Deleted)
		}
		if len(s.DroppedColumns) > 0 {
			fmt.Fprintf(env.Stdout, "%s: column %s dropped from the source; the copy keeps it; rows inserted since have NULL there, rows updated since keep their last value\n",
				s.Name, strings.Join(s.DroppedColumns, ", "))
		}
		printReconcile(env, s)
		printKeyCheck(env, s)
		printSinkRecord(env, s)
		if b := s.Backfill; b != nil {
			fmt.Fprintf(env.Stdout, "%s: backfilling added column %s into the copy: %d rows so far; the next run resumes it\n", s.Name, strings.Join(b.Columns, ", "), b.Rows)
		}
		if f := s.FirstLoad; f != nil {
			fmt.Fprintf(env.Stdout, "%s: first load unfinished: %d of %d chunks committed (%d rows), started %s by %d run(s); no watermark until every chunk is committed; the next run resumes it\n",
				s.Name, f.ChunksDone, f.Chunks, f.Rows, f.Started, f.Runs)
		}
	}
	printSkipped(env, st)
	return nil
}

// secondsText renders a number of seconds as a duration, "-" when unknown.
func secondsText(sec *float64) string {
	if sec == nil {
		return "-"
	}
	return durationText(secondsDuration(*sec))
}

// progressText renders a running source's progress for the status table.
func progressText(p syncer.Progress) string {
	out := fmt.Sprintf("%d rows from %s, %.0f rows/s", p.Rows, p.From, p.RowsPerSecond)
	if p.Left >= 0 {
		out += fmt.Sprintf(", ~%d left", p.Left)
	}
	if p.ETASeconds >= 0 {
		out += ", ETA " + durationText(time.Duration(p.ETASeconds)*time.Second)
	}
	return out
}

// loadingText renders a first load's progress for the status table.
func loadingText(p syncer.Progress) string {
	eta := "unknown"
	if p.ETASeconds >= 0 {
		eta = durationText(time.Duration(p.ETASeconds) * time.Second)
	}
	return fmt.Sprintf("loading: %d of %d chunks, %d rows, %.0f rows/s, ETA %s", p.ChunksDone, p.Chunks, p.Rows, p.RowsPerSecond, eta)
}

// printOutside names the rows the cursor cannot reach, when the last run
// found any: they are copied by each run's extra pass, but only fixing them
// in the source brings them back under the cursor.
func printOutside(env *Env, s ops.SourceStatus) {
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

// ParsePGTime parses PostgreSQL's ISO text output of a timestamp (with or
// without time zone; without one it is taken as UTC) or a date.
func ParsePGTime(s string) (time.Time, bool) { return pgutil.ParseTime(s) }

// printReconcile says what the last scheduled reconcile of s found and when
// a reconcile last proved the copy equal, so that "diverged" and "not
// proven for a day" show without the metrics.
func printReconcile(env *Env, s ops.SourceStatus) {
	r := s.LastReconcile
	clean := cmpStr(s.LastCleanReconcile, "never")
	if r == nil {
		if s.LastCleanReconcile != "" {
			fmt.Fprintf(env.Stdout, "%s: last clean reconcile %s\n", s.Name, s.LastCleanReconcile)
		}
		return
	}
	at := ops.TimeText(r.At)
	var parts []string
	for _, k := range []string{"missing", "extra", "changed", "duplicate", "null_key"} {
		if n := r.Differences[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, strings.ReplaceAll(k, "_", " ")))
		}
	}
	var nc int64
	for _, n := range r.NotCovered {
		nc += n
	}
	switch {
	case len(parts) > 0:
		what := "found"
		if r.Repaired {
			what = "repaired, but still found"
		}
		fmt.Fprintf(env.Stdout, "%s: the copy has diverged: the last reconcile (%s) %s %s; last clean reconcile %s; run `syncd reconcile --source %s --repair`\n",
			s.Name, at, what, strings.Join(parts, ", "), clean, s.Name)
	case nc > 0:
		fmt.Fprintf(env.Stdout, "%s: the last reconcile (%s) found no difference but could not compare %d rows yet; last clean reconcile %s\n", s.Name, at, nc, clean)
	default:
		fmt.Fprintf(env.Stdout, "%s: last clean reconcile %s\n", s.Name, clean)
	}
}
