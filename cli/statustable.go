package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/syncd/syncd/ops"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// The formats of status -o.
const (
	outputText = "text" // the table that fits 120 columns
	outputWide = "wide" // the table with every column
	outputJSON = "json" // the document of --json
)

// outputFormat is the format -o (or --output) and --json ask for.
func outputFormat(o string, asJSON bool) (string, error) {
	switch o {
	case "":
		if asJSON {
			return outputJSON, nil
		}
		return outputText, nil
	case outputText, outputWide, outputJSON:
		if asJSON && o != outputJSON {
			return "", fmt.Errorf("--json and -o %s ask for two formats: give one: %w", o, ErrUsage)
		}
		return o, nil
	}
	return "", fmt.Errorf("-o %q: use text, wide or json: %w", o, ErrUsage)
}

// statusTable writes one line per source. The default table fits 120
// columns for source names up to 21 characters: the last run is an age,
// the status one word (a failed run's error and a running source's
// progress follow the table, each on a line of its own), and the rows
// written and the read bound are left to the wide table, which has every
// column at full length.
func statusTable(w io.Writer, st ops.Status, wide bool, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "SOURCE\tWATERMARK\tLAST RUN\tSTATUS\tFRESHNESS\tROWS LAST RUN\tROWS WRITTEN\tNEWEST ROW AGE\tBOUND")
	} else {
		fmt.Fprintln(tw, "SOURCE\tWATERMARK\tLAST RUN\tSTATUS\tFRESHNESS\tROWS LAST RUN\tNEWEST ROW AGE")
	}
	var details []string
	for _, s := range st.Sources {
		wm := s.Watermark
		switch {
		case s.Mode == watermark.ModeCompare:
			wm = "compare mode" // no watermark: each run compares the whole table
		case wm == "" && s.ResyncFrom != "":
			wm = "from " + s.ResyncFrom
		case wm == "":
			wm = "-"
		}
		status := cmpStr(s.LastStatus, "never run")
		// A first load: running (from a daemon), or stopped or killed
		// mid-way (from the state file).
		loading := ""
		if f := s.FirstLoad; f != nil {
			loading = fmt.Sprintf("loading: %d of %d chunks, %d rows, stopped", f.ChunksDone, f.Chunks, f.Rows)
		}
		if p := s.Running; p != nil && p.Phase == syncer.PhaseFirstLoad {
			loading = loadingText(*p)
		}
		if wide {
			if s.LastError != "" {
				status += ": " + oneLine(s.LastError)
			}
			if p := s.Running; p != nil {
				status = "running: " + progressText(*p)
			}
			if loading != "" {
				if s.LastStatus != "" && s.Running == nil {
					loading += "; last run " + status
				}
				status = loading
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", s.Name, wm, cmpStr(s.LastRunAt, "-"), status,
				secondsText(s.FreshnessSeconds), s.RowsLastRun, s.RowsWritten, secondsText(s.NewestRowAgeSeconds), cmpStr(s.Bound, "-"))
			continue
		}
		if s.LastError != "" {
			details = append(details, fmt.Sprintf("%s: last run %s: %s", s.Name, status, oneLine(s.LastError)))
		}
		switch p := s.Running; {
		case loading != "":
			status = "loading"
			details = append(details, fmt.Sprintf("%s: %s", s.Name, loading))
		case p != nil:
			status = "running"
			details = append(details, fmt.Sprintf("%s: running: %s", s.Name, progressText(*p)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.Name, shorten(wm, len("from 2006-01-02T15:04:05.000000Z")), agoText(s.LastRunAt, now), status,
			secondsText(s.FreshnessSeconds), s.RowsLastRun, secondsText(s.NewestRowAgeSeconds))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, d := range details {
		fmt.Fprintln(w, d)
	}
	return nil
}

// agoText renders a time of the status as its age at now ("3m5s ago"),
// "-" when there is none.
func agoText(at string, now time.Time) string {
	if at == "" {
		return "-"
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return at
	}
	return durationText(now.Sub(t)) + " ago"
}

// shorten cuts s to n characters, the last one an ellipsis.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
