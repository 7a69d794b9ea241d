package daemon

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/internal/retry"
	"github.com/syncd/syncd/metrics"
	"github.com/syncd/syncd/ops"
	"github.com/syncd/syncd/reconcile"
	"github.com/syncd/syncd/runlock"
	syncsource "github.com/syncd/syncd/source"
	"github.com/syncd/syncd/syncer"
)

// Jobs a source's schedule starts.
const (
	jobSync      = "sync"
	jobReconcile = "reconcile"
	jobKeys      = "reconcile_keys" // the key check (reconcile.keys_schedule)
)

// source is one configured source: its config in effect, its schedule
// entries, and whether a run of it is going. At most one job (sync or
// reconcile) of a source runs at a time in this process; the run lock
// extends that to every process.
type source struct {
	d   *daemon
	log *slog.Logger
	// schema is what the source's runs read from the catalogs, re-read
	// when a catalog fingerprint changes (see syncer.SchemaCache).
	schema syncer.SchemaCache

	mu      sync.Mutex
	cfg     *config.Config
	entries []entryID
	busy    bool
	lastErr string // the error of the last run when it failed
	// logged is the text of the last fault logged with its error, so
	// that a fault that repeats (a database down for an hour) is logged
	// in full once, not at every attempt and tick.
	logged  string
	pending *pendingResync // a resync waiting for the run in flight to end
	removed bool
	// due holds the reconciles (jobReconcile, jobKeys) whose schedule
	// fired while a job of the source was going: each runs when it ends.
	due   map[string]bool
	prog  *syncer.Progress // the run going, nil when none
	phase string           // what the job going does (syncer.Phase*, phaseReconcile, ...)
}

// Phases of a job besides a run's own (syncer.Phase*).
const (
	phaseReconcile = "reconcile"
	phaseKeys      = "key check"
	phaseQueued    = "queued: waiting for a slot of --max-concurrent-runs"
	phaseRetryWait = "waiting to retry"
)

func (s *source) setPhase(p string) {
	s.mu.Lock()
	s.phase = p
	s.mu.Unlock()
}

// doing is what the job going does, "" when none is.
func (s *source) doing() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.busy {
		return ""
	}
	if s.phase == "" {
		return "starting"
	}
	return s.phase
}

// progressNow is the progress of the run going, if one is.
func (s *source) progressNow() (syncer.Progress, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prog == nil {
		return syncer.Progress{}, false
	}
	return *s.prog, true
}

func (s *source) setProgress(p syncer.Progress) {
	s.mu.Lock()
	s.prog = &p
	s.mu.Unlock()
}

func (s *source) config() *config.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

func (s *source) isBusy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busy
}

// failure is the error of the last run when it failed, else "".
func (s *source) failure() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// update gives the source config c from its next run, when c says
// something else than the config in effect; it reports whether it did.
func (s *source) update(c *config.Config) bool {
	if sameConfig(s.config(), c) {
		return false
	}
	s.mu.Lock()
	s.cfg = c
	s.mu.Unlock()
	s.schedule(c)
	return true
}

// schedule (re)places the source's cron entries for c.
func (s *source) schedule(c *config.Config) {
	s.mu.Lock()
	old := s.entries
	s.entries = nil
	s.mu.Unlock()
	for _, id := range old {
		s.d.cron.remove(id)
	}
	var ids []entryID
	id, err := s.d.cron.addSpread(c.Schedule, c.Name+"\x00"+jobSync, func() { s.tick(jobSync) })
	if err != nil {
		s.log.Error("schedule not usable; the source will not run", "schedule", c.Schedule, "err", err)
	} else {
		ids = append(ids, id)
	}
	if c.Reconcile != nil && c.Reconcile.Schedule != "" {
		id, err := s.d.cron.addSpread(c.Reconcile.Schedule, c.Name+"\x00"+jobReconcile, func() { s.tick(jobReconcile) })
		if err != nil {
			s.log.Error("reconcile schedule not usable; reconcile will not run", "schedule", c.Reconcile.Schedule, "err", err)
		} else {
			ids = append(ids, id)
		}
	}
	// A pattern's table synced in compare mode deletes extras in each run.
	if c.Reconcile != nil && c.Reconcile.KeysSchedule != "" && !c.Compare() {
		id, err := s.d.cron.addSpread(c.Reconcile.KeysSchedule, c.Name+"\x00"+jobKeys, func() { s.tick(jobKeys) })
		if err != nil {
			s.log.Error("reconcile.keys_schedule not usable; the key check will not run", "schedule", c.Reconcile.KeysSchedule, "err", err)
		} else {
			ids = append(ids, id)
		}
	}
	s.mu.Lock()
	s.entries = ids
	s.mu.Unlock()
}

// unschedule removes the source's cron entries; a run in flight finishes.
func (s *source) unschedule() {
	s.mu.Lock()
	old := s.entries
	s.entries = nil
	s.removed = true
	busy := s.busy
	s.mu.Unlock()
	for _, id := range old {
		s.d.cron.remove(id)
	}
	if !busy {
		s.d.m.RemoveSource(s.cfg.Name)
	}
}

// tick is a schedule firing: it runs the job unless one is going.
func (s *source) tick(job string) {
	if cfg, ok := s.start(job); ok {
		s.runJob(job, cfg)
	}
}

// start marks the source busy and registers the job with the daemon; it
// says no (and counts a skipped tick) when a job of the source is going.
func (s *source) start(job string) (*config.Config, bool) {
	if !s.d.begin() {
		return nil, false
	}
	s.mu.Lock()
	busy, removed, cfg := s.busy, s.removed, s.cfg
	if !busy && !removed {
		s.busy = true
	}
	// Set with the look at busy, so that the job going cannot end
	// between the two unseen (it starts the reconcile when it ends).
	keep := job != jobSync
	firstDue := busy && !removed && keep && !s.due[job]
	if busy && !removed && keep {
		if s.due == nil {
			s.due = map[string]bool{}
		}
		s.due[job] = true
	}
	s.mu.Unlock()
	if busy || removed {
		s.d.jobDone()
		if !busy {
			return nil, false
		}
		if keep {
			// A due reconcile is never lost to a sync that runs long: it
			// runs when the job going (or waiting for the budget) ends.
			if firstDue {
				s.log.Info("reconcile due while another job of this source is going or queued: it runs when that job ends", "job", job)
			}
			return nil, false
		}
		// The metric counts them; a long run would repeat the line at
		// every tick.
		s.log.Debug("tick skipped: the previous run of this source is still going", "job", job)
		s.d.m.SkippedTick(cfg.Name)
		return nil, false
	}
	return cfg, true
}

func (s *source) runJob(job string, cfg *config.Config) {
	defer s.d.jobDone()
	s.setPhase(phaseQueued)
	queued := time.Now()
	if !s.d.budget.acquire(s.d.stop) {
		s.finish(job, metrics.OutcomeStopped, nil)
		return
	}
	s.setPhase("")
	s.d.sum.waited(time.Since(queued))
	s.log.Debug("job started", "job", job, "waited", since(queued))
	defer func() {
		s.log.Debug("job ended", "job", job)
		s.d.budget.release()
		s.startDueReconcile()
	}()
	started := time.Now()
	if job == jobReconcile {
		s.setPhase(phaseReconcile)
		outcome := s.reconcile(cfg, started)
		s.d.m.ReconcileDone(cfg.Name, outcome, time.Since(started))
		s.d.sum.reconciled(cfg.Name, outcome == metrics.OutcomeFailed, time.Since(started))
		s.finish(job, outcome, nil)
		return
	}
	if job == jobKeys {
		s.setPhase(phaseKeys)
		s.finish(job, s.keyCheck(cfg, started), nil)
		return
	}
	var rows, written int64
	outcome, err := s.attempts(cfg, &rows, &written)
	s.d.m.RunDone(cfg.Name, outcome, time.Since(started))
	s.d.sum.ran(cfg.Name, rows, written, outcome == metrics.OutcomeFailed, time.Since(started))
	s.finish(job, outcome, err)
}

// reconcile runs the scheduled reconcile and records what it found.
func (s *source) reconcile(cfg *config.Config, started time.Time) string {
	rep, err := ops.Reconcile(s.d.stopCtx, s.d.o.Kinds, cfg, s.d.o.Store, cfg.Reconcile != nil && cfg.Reconcile.Repair, s.d.log)
	took := time.Since(started).Round(time.Millisecond).String()
	if err != nil {
		s.log.Error("scheduled reconcile failed", "err", err, "duration", took)
		return metrics.OutcomeFailed
	}
	if rep == nil {
		s.log.Info("scheduled reconcile done", "duration", took)
		return metrics.OutcomeOK
	}
	final := rep.Final()
	for kind, n := range final.Differences() {
		s.d.m.SetReconcileDifferences(cfg.Name, kind, n)
	}
	for _, reason := range reconcile.Reasons {
		s.d.m.SetReconcileNotCovered(cfg.Name, reason, final.NotCovered[reason])
	}
	s.d.m.ReconcileRows(cfg.Name, rep.RowsCompared, rep.RowsFetched)
	s.d.m.ReconcileClean(cfg.Name, rep.CleanAt)
	attrs := []any{"missing", rep.Missing, "extra", rep.Extra, "changed", rep.Changed, "duplicate", rep.Duplicate, "null_key", rep.NullKey,
		"not_covered", final.NotCoveredRows(), "repaired", rep.Repaired, "duration", took}
	switch {
	case rep.Clean():
		s.log.Info("scheduled reconcile done: the copy equals the source", attrs...)
	case final.Equal():
		s.log.Warn("scheduled reconcile done: no difference, but some source rows could not be compared yet", attrs...)
	default:
		s.log.Warn("scheduled reconcile found differences", attrs...)
	}
	return metrics.OutcomeOK
}

// finish records the outcome, applies a resync that waited for the run,
// and frees the source for its next tick.
func (s *source) finish(job, outcome string, err error) {
	s.mu.Lock()
	if job == jobSync {
		switch outcome {
		case metrics.OutcomeOK:
			s.lastErr = ""
		case metrics.OutcomeFailed:
			s.lastErr = err.Error()
		}
	}
	if s.pending != nil {
		p := *s.pending
		s.pending = nil
		if m, rerr := ops.ResyncMove(s.d.o.Store, s.d.o.Kinds, s.cfg, p.from, p.skipRows); rerr != nil {
			s.log.Error("resync requested during the run could not be applied", "err", rerr)
		} else {
			s.log.Info("resync requested during the run applied", "from", resyncText(p.from), "result", m.Done(s.cfg.Name, -1))
		}
	}
	s.busy = false
	s.prog = nil
	s.phase = ""
	removed := s.removed
	s.mu.Unlock()
	if removed {
		s.d.m.RemoveSource(s.cfg.Name)
	}
}

// startDueReconcile starts a reconcile that came due while the job that
// just ended was going (queued through the budget like any job): the full
// reconcile first, the key check when that one ends.
func (s *source) startDueReconcile() {
	s.mu.Lock()
	job := ""
	for _, j := range []string{jobReconcile, jobKeys} {
		if s.due[j] && !s.busy && !s.removed {
			job = j
			break
		}
	}
	delete(s.due, job)
	s.mu.Unlock()
	if job == "" {
		return
	}
	if cfg, ok := s.start(job); ok {
		go s.runJob(job, cfg)
	}
}

// attempts runs the source until caught up, trying again after transient
// faults with backoff. Each attempt is a new syncer.Run, which starts from
// the watermark of the last committed page.
//
// The rows read and written by its pages are added to *rows and *written.
func (s *source) attempts(cfg *config.Config, rows, written *int64) (string, error) {
	b := s.d.o.Backoff.Defaults()
	name := cfg.Name
	onPage := func(p syncer.PageStats) {
		*rows += p.Rows
		*written += p.Written + p.Deleted
		var wm time.Time
		if len(p.Cursor) > 0 {
			wm, _ = pgutil.ParseTime(p.Cursor[0])
		}
		s.d.m.Page(name, p.Rows, p.Written, p.Deleted, wm)
	}
	for n := 1; ; n++ {
		res, err := syncer.Run(s.d.ctx, syncer.Options{
			Config: cfg, Kinds: s.d.o.Kinds, Store: s.d.o.Store, Logger: s.d.log, Stop: s.d.stop, OnPage: onPage, OnProgress: s.setProgress, OnPhase: s.setPhase,
			Test: s.d.o.Test, QuietIdle: true, Pool: s.d.pool, Schema: &s.schema,
		})
		err = syncsource.Explain(cfg, err) // name the config key that caused a database error
		s.d.m.Bound(name, res.Bound, res.HeldBack, res.Holder.PID)
		s.d.m.CaughtUp(name, res.CaughtUp)
		if ci := res.CursorIndex; ci != nil {
			s.d.m.CursorIndexMissing(name, ci.Name == "")
		}
		for _, ch := range res.SchemaChanges {
			s.d.m.SchemaChange(name, ch)
		}
		if c := res.Campaign; c != nil {
			s.d.m.Campaign(name, c.Targets, c.Granted, c.Missing, c.Extra)
		}
		switch {
		case err == nil:
			s.logged = ""
			if res.Campaign == nil {
				s.d.m.Outside(name, res.NullCursorRows, res.AheadOfClockRows)
			}
			return metrics.OutcomeOK, nil
		case errors.Is(err, syncer.ErrStopped):
			return metrics.OutcomeStopped, nil
		case errors.Is(err, runlock.ErrHeld):
			return metrics.OutcomeSkipped, nil
		}
		f := retry.Classify(err)
		if f.Kind == retry.KindCanceled && s.d.ctx.Err() != nil {
			return metrics.OutcomeStopped, err
		}
		s.d.m.Error(name, f.Kind)
		if !f.Transient {
			s.log.Error("run failed with a permanent error: the source is marked failed and is tried again at its next tick; fix the cause",
				append([]any{"kind", f.Kind}, s.errAttr(err)...)...)
			return metrics.OutcomeFailed, err
		}
		if n >= b.Attempts {
			s.log.Error("run failed: the transient fault outlasted every retry; the next tick tries again",
				append([]any{"kind", f.Kind, "attempts", n}, s.errAttr(err)...)...)
			return metrics.OutcomeFailed, err
		}
		delay := b.Delay(n)
		s.setPhase(phaseRetryWait)
		s.log.Warn("transient fault: the run is tried again from the last committed page",
			append([]any{"kind", f.Kind, "attempt", n, "retry_in", delay.Round(time.Millisecond).String()}, s.errAttr(err)...)...)
		if !retry.Sleep(s.d.ctx, s.d.stop, delay) {
			return metrics.OutcomeStopped, err
		}
		s.d.m.Retry(name)
	}
}

// errAttr is the error attribute of a failed attempt's line: the error
// when it differs from the last one logged, else same_err=true (the
// status page and /status still show it in full).
func (s *source) errAttr(err error) []any {
	text := err.Error()
	if text == s.logged {
		return []any{"same_err", true}
	}
	s.logged = text
	return []any{"err", text}
}

// requestResync applies a resync now, or when the job in flight ends; a
// move forward is applied only with skipRows (ops.ResyncMove).
func (s *source) requestResync(from time.Time, skipRows bool) (m ops.Move, applied bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy {
		s.pending = &pendingResync{from: from, skipRows: skipRows}
		return ops.Move{}, false, nil
	}
	m, err = ops.ResyncMove(s.d.o.Store, s.d.o.Kinds, s.cfg, from, skipRows)
	if err != nil {
		return m, false, err
	}
	return m, true, nil
}

// pendingResync is a resync that waits for the job in flight to end.
type pendingResync struct {
	from     time.Time
	skipRows bool
}

func resyncText(from time.Time) string {
	if from.IsZero() {
		return "start"
	}
	return from.UTC().Format(time.RFC3339Nano)
}
