package daemon

import (
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/metrics"
	"github.com/syncd/syncd/reconcile"
)

// keyCheck runs the scheduled key check (reconcile.keys_schedule), with
// repair when reconcile.repair says so, and records what it found: in the
// state file (last_key_check) and in the syncd_reconcile_keys_* series.
func (s *source) keyCheck(cfg *config.Config, started time.Time) string {
	repair := cfg.Reconcile != nil && cfg.Reconcile.Repair
	rep, err := reconcile.Keys(s.d.stopCtx, cfg, s.d.o.Store, reconcile.Options{Repair: repair, Logger: s.d.log})
	took := time.Since(started)
	if err != nil {
		s.log.Error("scheduled key check failed", "err", err, "duration", took.Round(time.Millisecond).String())
		s.d.m.KeyCheckDone(cfg.Name, metrics.OutcomeFailed, took, 0, nil)
		return metrics.OutcomeFailed
	}
	final := rep.Final()
	s.d.m.KeyCheckDone(cfg.Name, metrics.OutcomeOK, took, rep.Deleted(), final.Differences())
	attrs := []any{"missing", final.Missing, "extra", rep.Extra, "deleted", rep.Deleted(), "not_covered", final.NotCoveredRows(),
		"keys_compared", rep.RowsCompared, "duration", took.Round(time.Millisecond).String()}
	if final.Equal() {
		s.log.Info("scheduled key check done", attrs...)
	} else {
		s.log.Warn("scheduled key check found differences", attrs...)
	}
	return metrics.OutcomeOK
}
