package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/syncd/syncd/ops"
)

// FleetStatus is what `syncd status --fleet --json` prints (ops.FleetStatus).
type FleetStatus = ops.FleetStatus

// FleetSource is one copy in the fleet status (ops.FleetSource).
type FleetSource = ops.FleetSource

// printFleet writes the fleet status as JSON or as a table, one line per
// copy, and the sinks that could not be read below it.
func printFleet(w io.Writer, st FleetStatus, format string) error {
	if format == outputJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tWRITER\tRUNNING\tCURSOR\tPAGES\tLAST UPDATE\tLAST RUN\tCAUGHT UP\tLAG")
	var problems, stale []string
	for _, s := range st.Sources {
		switch {
		case s.Error != "":
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\tunreadable\t-\t-\t-\n", s.Name)
			problems = append(problems, fmt.Sprintf("%s: the sink's record could not be read: %s", s.Name, s.Error))
			continue
		case !s.Found:
			fmt.Fprintf(tw, "%s\t-\tno\t-\t-\tnever (no run has claimed %s yet)\t-\t-\t-\n", s.Name, s.Sink)
			continue
		}
		cursor := "-"
		if len(s.Cursor) > 0 {
			cursor = strings.Join(s.Cursor, ", ")
		}
		running := "no"
		if s.Running {
			running = "yes"
		}
		last := s.UpdatedAt
		if s.SinceUpdateSeconds != nil {
			last = durationText(secondsDuration(*s.SinceUpdateSeconds)) + " ago"
		}
		run, caught := "-", "-"
		if s.SinceRunSeconds != nil {
			run = durationText(secondsDuration(*s.SinceRunSeconds)) + " ago"
		}
		if s.RunCaughtUp != nil {
			caught = "no"
			if *s.RunCaughtUp {
				caught = "yes"
			}
		}
		if s.Stale {
			run += ", stale"
			stale = append(stale, fmt.Sprintf("%s: stale: nothing moved its record for more than %s (%d × the %s its writer records an idle run at most): the writer %s has stopped or lost the sink, or one run has been going that long; another replica takes the source over at its next tick once the run lock is free",
				s.Name, durationText(secondsDuration(s.StaleAfterSeconds)), ops.StaleAfter, durationText(secondsDuration(s.RecordEverySeconds)), s.Writer))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", s.Name, s.Writer, running, cursor, s.Pages, last, run, caught, secondsText(s.LagSeconds))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range append(problems, stale...) {
		fmt.Fprintln(w, p)
	}
	return nil
}

// errFleetUnreadable is the exit-1 error of status --fleet when a sink's
// records could not be read (each is named above it).
var errFleetUnreadable = errors.New("the record of some sources could not be read from their sink")

// cmdStatusFleet is `status --fleet`: the configs with their DSNs, no
// state file.
func cmdStatusFleet(ctx context.Context, env *Env, path, format string) error {
	cfgs, err := load(env, path, "")
	if err != nil {
		return err
	}
	st := ops.ReadFleet(ctx, env.Kinds, cfgs)
	if err := printFleet(env.Stdout, st, format); err != nil {
		return err
	}
	for _, s := range st.Sources {
		if s.Error != "" {
			return errFleetUnreadable
		}
	}
	return nil
}
