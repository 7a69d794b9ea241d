package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/ops"
	"github.com/syncd/syncd/reconcile"
)

// checker is what `syncd reconcile` runs on each source: the full reconcile
// or, with --keys, the key check.
type checker struct {
	run     func(ctx context.Context, env *Env, cfg *config.Config, statePath string, repair bool) (*reconcile.Report, error)
	print   func(w io.Writer, cfg *config.Config, rep *reconcile.Report)
	outcome func(cfg *config.Config, rep *reconcile.Report) error
	// applies, when set, keeps the sources of `--all` the check applies
	// to and says on stderr why it leaves each other one out.
	applies func(env *Env, cfgs []*config.Config) []*config.Config
	unit    string // what --all's "equal" line counts
}

var (
	fullCheck = checker{run: Reconcile, print: printReport, outcome: reconcileOutcome, unit: "rows"}
	keysCheck = checker{run: ReconcileKeys, print: printKeysReport, outcome: keysOutcome, applies: keysApply, unit: "keys"}
)

// noKeyCheck says why the key check does not apply to cfg ("" when it
// does): a sink other than a postgres table copy (a coupon campaign has
// its own reconcile), or a source in compare mode (each run already
// deletes the copy's extra rows).
func noKeyCheck(cfg *config.Config) string {
	switch {
	case cfg.Sink.Type != config.SinkPostgres:
		return fmt.Sprintf("sink.type %s has no key check: its own reconcile compares what it holds (`syncd reconcile --source %s`)", cfg.Sink.Type, cfg.Name)
	case cfg.Compare():
		return "mode compare: each run compares every row and deletes the copy's extra rows itself"
	}
	return ""
}

// keysApply leaves out of `reconcile --keys --all` the sources the key
// check does not apply to, naming each on stderr.
func keysApply(env *Env, cfgs []*config.Config) []*config.Config {
	var out []*config.Config
	for _, cfg := range cfgs {
		if why := noKeyCheck(cfg); why != "" {
			fmt.Fprintf(env.Stderr, "syncd reconcile --keys: %s: left out: %s\n", cfg.Name, why)
			continue
		}
		out = append(out, cfg)
	}
	return out
}

// ReconcileKeys runs the key check of cfg (reconcile.Keys) with the
// watermark read from the state file at statePath, as Reconcile does, and
// records its outcome (last_key_check) when the file is free.
func ReconcileKeys(ctx context.Context, env *Env, cfg *config.Config, statePath string, repair bool) (*reconcile.Report, error) {
	if why := noKeyCheck(cfg); why != "" {
		return nil, fmt.Errorf("source %s: %s: %w", cfg.Name, why, ErrUsage)
	}
	states, err := readWatermark(statePath, cfg)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	rep, err := reconcile.Keys(ctx, cfg, states, reconcile.Options{Repair: repair, Logger: env.Logger})
	if errors.Is(err, reconcile.ErrNoKeyCheck) {
		return nil, fmt.Errorf("%w: %w", err, ErrUsage)
	}
	if err == nil {
		recordOutcome(env, cfg, statePath, started, rep, reconcile.RecordKeys)
	}
	return rep, err
}

// keysOutcome is nil when the key sets are equal and every differing key
// could be judged, else one line (wrapping ErrDifferences: exit 1) saying
// what differs and what to do: extra rows are the key check's to delete,
// missing ones the sync's or the full reconcile's to write.
func keysOutcome(cfg *config.Config, rep *reconcile.Report) error {
	if rep.Clean() {
		return nil
	}
	final := rep.Final()
	var parts []string
	if final.Extra > 0 {
		msg := fmt.Sprintf("%s holds %d keys that %s does not (rows deleted at the source)", cfg.Sink.Table, final.Extra, cfg.Source.Table)
		if rep.After != nil {
			msg += " (left after the repair: a writer changed them meanwhile; check again)"
		} else {
			msg += fmt.Sprintf("; run `syncd reconcile --keys --source %s --repair` to delete them", cfg.Name)
		}
		parts = append(parts, msg)
	}
	if final.Missing > 0 {
		parts = append(parts, fmt.Sprintf("%s lacks %d keys of synced rows of %s; the key check does not write rows: run `syncd reconcile --source %s --repair`",
			cfg.Sink.Table, final.Missing, cfg.Source.Table, cfg.Name))
	}
	if n := final.NotCoveredRows(); n > 0 {
		parts = append(parts, fmt.Sprintf("%d keys of %s not in the copy yet are newer than the watermark; run `syncd run --once --source %s`, then check again",
			n, cfg.Source.Table, cfg.Name))
	}
	return fmt.Errorf("source %s: %s: %w", cfg.Name, strings.Join(parts, "; "), ErrDifferences)
}

// printKeysReport writes a key check's report for people.
func printKeysReport(w io.Writer, cfg *config.Config, rep *reconcile.Report) {
	fmt.Fprintf(w, "source %s: keys of %s -> %s\n", cfg.Name, cfg.Source.Table, cfg.Sink.Table)
	fmt.Fprintf(w, "compared: %s\n", rep.Boundary)
	printKeyCounts(w, "", rep)
	fmt.Fprintf(w, "keys compared: %d (copy: %d), keys streamed: %d, rows fetched: %d, checksum queries: %d, %s\n",
		rep.RowsCompared, rep.CopyRows, rep.HashesRead, rep.RowsFetched, rep.ChecksumQueries, durationText(time.Duration(rep.DurationMS)*time.Millisecond))
	printNotCovered(w, "", rep)
	if rep.Repair != nil && rep.Repaired {
		fmt.Fprintf(w, "repair: deleted %d\n", rep.Repair.Deleted)
	}
	if rep.After != nil {
		printKeyCounts(w, "after repair: ", rep.After)
		printNotCovered(w, "after repair: ", rep.After)
	}
	if rep.Final().Missing > 0 {
		fmt.Fprintln(w, "missing keys are not written by the key check: the sync copies rows past the watermark, the full reconcile (--repair) the others")
	}
	if rep.Clean() {
		fmt.Fprintln(w, "the copy holds exactly the source's keys")
	}
}

func printKeyCounts(w io.Writer, prefix string, rep *reconcile.Report) {
	fmt.Fprintf(w, "%smissing: %d, extra: %d\n", prefix, rep.Missing, rep.Extra)
	printKeyLists(w, prefix, rep)
}

// printKeyCheck says what the last recorded key check of s found, under
// the reconcile's line of `status`.
func printKeyCheck(env *Env, s ops.SourceStatus) {
	r := s.LastKeyCheck
	if r == nil {
		return
	}
	line := fmt.Sprintf("%s: last key check %s", s.Name, ops.TimeText(r.At))
	if r.Deleted > 0 {
		line += fmt.Sprintf(": deleted %d rows deleted at the source", r.Deleted)
	}
	var parts []string
	for _, k := range []string{"extra", "missing"} {
		if n := r.Differences[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	var nc int64
	for _, n := range r.NotCovered {
		nc += n
	}
	switch {
	case len(parts) > 0:
		line += fmt.Sprintf("; keys differ: %s; run `syncd reconcile --keys --source %s --repair` (missing rows: `syncd reconcile --source %s --repair`)", strings.Join(parts, ", "), s.Name, s.Name)
	case nc > 0:
		line += fmt.Sprintf("; %d keys not judged yet (newer than the watermark)", nc)
	default:
		line += "; the copy holds exactly the source's keys"
	}
	fmt.Fprintln(env.Stdout, line)
}
