package syncer

import (
	"context"
	"errors"
	"log/slog"

	"github.com/syncd/syncd/coupon"
	"github.com/syncd/syncd/runlock"
)

// runCampaign runs a coupon_grants source through package coupon, which
// owns the freeze, the grant pages and the final reconcile; Run keeps the
// run bookkeeping (LastStatus, LastError, LastRunAt) as for any source.
func runCampaign(ctx context.Context, o Options, log *slog.Logger) (Result, error) {
	// One runner per campaign too. The lock has its own connection here,
	// checked after every committed page: a lost lock ends the run.
	lock, err := runlock.Acquire(ctx, nil, o.Config.Sink.DSN, LockTarget(o.Config))
	if err != nil {
		return Result{}, err
	}
	defer lock.Release(context.WithoutCancel(ctx))
	// The state file records the campaign's identity, binding from its
	// first granted page on (coupon records the campaign then), so that a
	// sink.table moved to another schema is refused by the next run.
	if err := adoptIdentity(o.Store, o.Config); err != nil {
		return Result{}, err
	}
	afterCommit := func(n int64) error {
		if err := lock.Check(ctx); err != nil {
			return err
		}
		if o.AfterCommit != nil {
			return o.AfterCommit(n)
		}
		return nil
	}
	cr, err := coupon.Run(ctx, coupon.Options{Config: o.Config, Store: o.Store, Logger: log, Stop: o.Stop, AfterCommit: afterCommit})
	res := Result{Pages: cr.Pages, Rows: cr.Rows, Written: cr.Written, Cursor: cr.Cursor, Campaign: &cr.Stats}
	if errors.Is(err, coupon.ErrStopped) {
		res.Stopped = true
		return res, ErrStopped
	}
	return res, err
}
