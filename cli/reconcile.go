package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/ops"
	"github.com/syncd/syncd/reconcile"
	"github.com/syncd/syncd/watermark"
)

func cmdReconcile(ctx context.Context, env *Env, args []string) error {
	fs := flagSet(env, "reconcile")
	var c common
	c.register(fs, true)
	name := fs.String("source", "", "the source to reconcile (this or --all is required)")
	all := fs.Bool("all", false, "reconcile every source of the config (a pattern source: every table it matches), one summary line each; exit 0 only when every copy equals its source")
	repair := fs.Bool("repair", false, "write the source's values over every difference, then compare again")
	asJSON := fs.Bool("json", false, "print the report as one JSON object (with --all: an array, one object per source)")
	concurrency := fs.Int("concurrency", DefaultReconcileConcurrency, "with --all: how many sources are reconciled at once (each holds sessions on its source and its copy)")
	keys := fs.Bool("keys", false, "compare the key sets only, by checksummed key ranges (index-only scans): finds the copy's rows deleted at the source and the keys it lacks, not changed values; with --repair deletes the extra rows only")
	if err := parse(env, fs, args, &c); err != nil {
		return err
	}
	chk := fullCheck
	if *keys {
		chk = keysCheck
	}
	switch {
	case *all && *name != "":
		return fmt.Errorf("--all and --source exclude each other: name one source, or reconcile them all: %w", ErrUsage)
	case *all && *concurrency < 1:
		return fmt.Errorf("--concurrency %d: give at least 1: %w", *concurrency, ErrUsage)
	case *all:
		return reconcileAll(ctx, env, c, chk, *repair, *asJSON, *concurrency)
	case *name == "":
		return fmt.Errorf("--source or --all is required: %w", ErrUsage)
	}
	cfg, err := loadOne(ctx, env, c.config, *name, true)
	if err != nil {
		return err
	}
	rep, err := chk.run(ctx, env, cfg, c.state, *repair)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		chk.print(env.Stdout, cfg, rep)
	}
	return chk.outcome(cfg, rep)
}

// SourceReconcile is one element of `reconcile --all --json`: the source,
// its outcome, and its report (absent when the reconcile could not run).
type SourceReconcile struct {
	Source string `json:"source"`
	// Outcome is "equal", "differences" (or rows not compared yet), or
	// "error" (the reconcile could not run; Error says why).
	Outcome string            `json:"outcome"`
	Message string            `json:"message,omitempty"`
	Error   string            `json:"error,omitempty"`
	Report  *reconcile.Report `json:"report,omitempty"`
}

// DefaultReconcileConcurrency is how many sources `reconcile --all`
// reconciles at once unless --concurrency says otherwise.
const DefaultReconcileConcurrency = 4

// reconcileAll reconciles every source of the config, pattern sources
// expanded against their catalogs, at most concurrency at once, and prints
// one line per source in the order of the config (or a JSON array), then
// one line that counts them. A source that cannot be reconciled does not
// stop the others. The exit code is the worst one: 0 when every copy
// provably equals its source, 1 otherwise.
func reconcileAll(ctx context.Context, env *Env, c common, chk checker, repair, asJSON bool, concurrency int) error {
	cfgs, err := load(env, c.config, "")
	if err != nil {
		return err
	}
	cfgs, skipped, err := expand(ctx, cfgs, "")
	if err != nil {
		return err
	}
	reportSkipped(env, "reconcile", skipped)
	if chk.applies != nil {
		cfgs = chk.applies(env, cfgs)
	}
	// Each source's result, ready when its channel is closed.
	out := make([]SourceReconcile, len(cfgs))
	ready := make([]chan struct{}, len(cfgs))
	for i := range ready {
		ready[i] = make(chan struct{})
	}
	slots := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(ready[i])
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				out[i] = SourceReconcile{Source: cfg.Name, Outcome: "error", Error: oneLine(ctx.Err().Error())}
				return
			}
			defer func() { <-slots }()
			out[i] = reconcileOne(ctx, env, chk, cfg, c.state, repair)
		}()
	}
	var bad []string
	var n reconcileCounts
	for i, cfg := range cfgs {
		<-ready[i]
		r := out[i]
		if r.Outcome != "equal" {
			bad = append(bad, cfg.Name)
		}
		n.add(r)
		if !asJSON {
			printSummary(env.Stdout, cfg, r, chk.unit)
		}
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
		// The summary line goes to stderr: stdout stays one JSON value.
		fmt.Fprintln(env.Stderr, n.line())
	} else {
		fmt.Fprintln(env.Stdout, n.line())
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d of %d sources are not proven equal to their source (%s); see the line of each above: %w", len(bad), len(out), strings.Join(bad, ", "), ErrDifferences)
	}
	return nil
}

// reconcileOne reconciles one source of `reconcile --all`.
func reconcileOne(ctx context.Context, env *Env, chk checker, cfg *config.Config, state string, repair bool) SourceReconcile {
	r := SourceReconcile{Source: cfg.Name}
	rep, err := chk.run(ctx, env, cfg, state, repair)
	switch {
	case err != nil:
		r.Outcome, r.Error = "error", oneLine(err.Error())
	default:
		r.Report = rep
		if oerr := chk.outcome(cfg, rep); oerr != nil {
			msg := strings.TrimSuffix(oerr.Error(), ": "+ErrDifferences.Error())
			r.Outcome, r.Message = "differences", strings.TrimPrefix(msg, "source "+cfg.Name+": ")
		} else {
			r.Outcome = "equal"
		}
	}
	return r
}

// reconcileCounts are the counts of the last line of `reconcile --all`.
type reconcileCounts struct {
	sources, equal, differ, notCovered, failed int
}

// add counts one source: a copy that differs counts as differing even
// when some rows were not compared too; one that does not differ but has
// rows not compared yet counts as not covered.
func (n *reconcileCounts) add(r SourceReconcile) {
	n.sources++
	switch {
	case r.Outcome == "equal":
		n.equal++
	case r.Outcome == "error" || r.Report == nil:
		n.failed++
	case !r.Report.Final().Equal():
		n.differ++
	default:
		n.notCovered++
	}
}

func (n reconcileCounts) line() string {
	return fmt.Sprintf("reconcile --all: %d sources: %d equal, %d differ, %d not covered, %d failed", n.sources, n.equal, n.differ, n.notCovered, n.failed)
}

// printSummary writes the one line `reconcile --all` prints per source.
func printSummary(w io.Writer, cfg *config.Config, r SourceReconcile, unit string) {
	switch r.Outcome {
	case "error":
		fmt.Fprintf(w, "%s: error: %s\n", cfg.Name, r.Error)
	case "equal":
		fmt.Fprintf(w, "%s: equal: %d %s compared, %s -> %s\n", cfg.Name, r.Report.RowsCompared, unit, cfg.Source.Table, cfg.Sink.Table)
	default:
		fmt.Fprintf(w, "%s: %s\n", cfg.Name, r.Message)
	}
}

// reconcileOutcome is nil when the copy provably equals the source, else
// one line (wrapping ErrDifferences: exit 1) that says what differs or what
// could not be compared, and what to do.
func reconcileOutcome(cfg *config.Config, rep *reconcile.Report) error {
	if rep.Clean() {
		return nil
	}
	final := rep.Final()
	var parts []string
	if !final.Equal() {
		msg := fmt.Sprintf("%s and %s differ: %d missing, %d extra, %d changed", cfg.Source.Table, cfg.Sink.Table, final.Missing, final.Extra, final.Changed)
		if final.Duplicate > 0 {
			msg += fmt.Sprintf(", %d keys held more than once in the copy", final.Duplicate)
		}
		if final.NullKey > 0 {
			msg += fmt.Sprintf(", %d rows with a NULL sink.key", final.NullKey)
		}
		switch {
		case rep.After != nil && final.NullKey > 0:
			msg += fmt.Sprintf(" (left after the repair: a writer added rows whose key is NULL meanwhile; make the key columns (%s) of %s NOT NULL)", strings.Join(cfg.Sink.Key, ", "), cfg.Sink.Table)
		case rep.After != nil:
			msg += " (left after the repair: the copy's columns cannot hold the source's values, or a writer changed them meanwhile)"
		default:
			msg += fmt.Sprintf("; run `syncd reconcile --source %s --repair`", cfg.Name)
		}
		parts = append(parts, msg)
	}
	if n := final.NotCoveredRows(); n > 0 {
		var reasons []string
		for _, r := range reconcile.Reasons {
			if v := final.NotCovered[r]; v > 0 {
				reasons = append(reasons, fmt.Sprintf("%s: %d", reconcile.ReasonText[r], v))
			}
		}
		parts = append(parts, fmt.Sprintf("%d rows of %s not compared yet (%s); run `syncd run --once --source %s`, then reconcile again",
			n, cfg.Source.Table, strings.Join(reasons, ", "), cfg.Name))
	}
	return fmt.Errorf("source %s: %s: %w", cfg.Name, strings.Join(parts, "; "), ErrDifferences)
}

// Reconcile reconciles cfg with the watermark read from the state file at
// statePath: opened read-only with a short wait and closed at once, or,
// when a running daemon holds it, read from a private copy.
func Reconcile(ctx context.Context, env *Env, cfg *config.Config, statePath string, repair bool) (*reconcile.Report, error) {
	k, err := env.Kinds.Of(cfg)
	if err != nil {
		return nil, err
	}
	if k.Reconcile == nil {
		return nil, k.NoReconcile(cfg)
	}
	var states reconcile.StateReader
	if k.ReconcileWatermark {
		if states, err = readWatermark(statePath, cfg); err != nil {
			return nil, err
		}
	}
	started := time.Now()
	rep, err := ops.Reconcile(ctx, env.Kinds, cfg, states, repair, env.Logger)
	if err == nil && k.ReconcileWatermark {
		recordOutcome(env, cfg, statePath, started, rep, reconcile.Record)
	}
	return rep, err
}

// readWatermark reads cfg's watermark from the state file at statePath
// and lets the file go at once: a run --once started meanwhile must not
// wait for the reconcile.
func readWatermark(statePath string, cfg *config.Config) (reconcile.StateReader, error) {
	st, ok, err := watermark.ReadState(statePath, cfg.Name, 2*time.Second)
	switch {
	case errors.Is(err, os.ErrNotExist):
		// A read-only command never creates the state file, and a
		// missing one is most likely the wrong path.
		store, uerr := openStateReadOnly(statePath)
		if uerr != nil {
			return nil, uerr
		}
		store.Close()
		return nil, err
	case err != nil:
		return nil, err
	}
	return reconcile.Watermark{State: st, Found: ok}, nil
}

// recordOutcome stores what a one-off reconcile found in the state file, as
// the daemon does for its scheduled ones, so that `status`, the metrics and
// an alert on "not proven for 24 h" see reconciles run by cron too. The
// file is taken only if it is free at once: while a daemon or a run holds
// it, the outcome is left out (the daemon records its own reconciles) and
// the command's result is unchanged.
func recordOutcome(env *Env, cfg *config.Config, statePath string, started time.Time, rep *reconcile.Report,
	record func(reconcile.StateRecorder, string, time.Time, *reconcile.Report) error) {
	// The reconciles of `reconcile --all` run at once: one at a time
	// takes the file, so that they do not make each other give up.
	recordMu.Lock()
	defer recordMu.Unlock()
	store, err := watermark.Open(statePath, 200*time.Millisecond)
	if err == nil {
		defer store.Close()
		err = record(store, cfg.Name, started, rep)
	}
	if err != nil {
		env.Logger.Info("reconcile outcome not recorded in the state file", "source", cfg.Name, "state", statePath, "reason", oneLine(err.Error()))
	}
}

// recordMu makes this process's reconciles record their outcomes one at a
// time.
var recordMu sync.Mutex

// printReport writes the report for people: counts, then a bounded list of
// keys of each kind.
func printReport(w io.Writer, cfg *config.Config, rep *reconcile.Report) {
	fmt.Fprintf(w, "source %s: %s -> %s\n", cfg.Name, cfg.Source.Table, cfg.Sink.Table)
	if rep.NoWatermark && rep.NotCoveredRows() > 0 {
		fmt.Fprintf(w, "nothing compared: %s\n", rep.Boundary)
		printNotCovered(w, "", rep)
		return
	}
	if rep.Boundary != "" {
		fmt.Fprintf(w, "compared: %s\n", rep.Boundary)
	}
	printCounts(w, "", rep)
	fmt.Fprintf(w, "rows compared: %d (null cursor: %d compared, ahead of the clock: %d compared; copy: %d), rows fetched: %d, checksum queries: %d, skipped as changed after the watermark: %d, %s\n",
		rep.RowsCompared, rep.NullCursor, rep.AheadOfClock, rep.CopyRows, rep.RowsFetched, rep.ChecksumQueries, rep.SkippedUnsynced, durationText(time.Duration(rep.DurationMS)*time.Millisecond))
	if rep.Plan != "" {
		plan := "plan: " + rep.Plan
		if sm := rep.Sample; sm != nil {
			plan += fmt.Sprintf(" (density sample by %s: %d of %d differ, about %.0f%% of the rows in differing ranges)", strings.ReplaceAll(sm.By, "_", " "), sm.Differing, sm.Taken, 100*sm.Share)
		}
		fmt.Fprintln(w, plan)
	}
	printNotCovered(w, "", rep)
	if rep.Repair != nil && rep.Repaired {
		fmt.Fprintf(w, "repair: inserted %d, updated %d, deleted %d\n", rep.Repair.Inserted, rep.Repair.Updated, rep.Repair.Deleted)
	}
	if rep.After != nil {
		printCounts(w, "after repair: ", rep.After)
		printNotCovered(w, "after repair: ", rep.After)
	}
	if rep.Clean() {
		fmt.Fprintln(w, "the copy equals the source")
	}
}

// printNotCovered lists the rows that were not compared, by reason.
func printNotCovered(w io.Writer, prefix string, rep *reconcile.Report) {
	for _, r := range reconcile.Reasons {
		if n := rep.NotCovered[r]; n > 0 {
			fmt.Fprintf(w, "%snot compared: %d rows (%s)\n", prefix, n, reconcile.ReasonText[r])
		}
	}
}

func printCounts(w io.Writer, prefix string, rep *reconcile.Report) {
	fmt.Fprintf(w, "%smissing: %d, extra: %d, changed: %d", prefix, rep.Missing, rep.Extra, rep.Changed)
	if rep.Duplicate > 0 || rep.NullKey > 0 {
		fmt.Fprintf(w, ", duplicate: %d, null key: %d", rep.Duplicate, rep.NullKey)
	}
	fmt.Fprintln(w)
	printKeyLists(w, prefix, rep)
}

// printKeyLists writes the keys of each kind of difference found (a key
// check finds missing and extra keys only).
func printKeyLists(w io.Writer, prefix string, rep *reconcile.Report) {
	for _, l := range []struct {
		name string
		n    int64
		keys []string
	}{{"missing", rep.Missing, rep.Keys.Missing}, {"extra", rep.Extra, rep.Keys.Extra}, {"changed", rep.Changed, rep.Keys.Changed},
		{"duplicate", rep.Duplicate, rep.Keys.Duplicate}, {"null key", rep.NullKey, rep.Keys.NullKey}} {
		if len(l.keys) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s%s keys:\n", prefix, l.name)
		for _, k := range l.keys {
			fmt.Fprintf(w, "  %s\n", k)
		}
		if l.n > int64(len(l.keys)) {
			fmt.Fprintf(w, "  ... and %d more\n", l.n-int64(len(l.keys)))
		}
	}
}
