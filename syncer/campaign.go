package syncer

import (
	"context"
	"errors"
	"log/slog"

	"github.com/syncd/syncd/coupon"
)

// runCampaign runs a coupon_grants source through package coupon, which
// owns the freeze, the grant pages and the final reconcile; Run keeps the
// run bookkeeping (LastStatus, LastError, LastRunAt) as for any source.
func runCampaign(ctx context.Context, o Options, log *slog.Logger) (Result, error) {
	cr, err := coupon.Run(ctx, coupon.Options{Config: o.Config, Store: o.Store, Logger: log, Stop: o.Stop, AfterCommit: o.AfterCommit})
	res := Result{Pages: cr.Pages, Rows: cr.Rows, Written: cr.Written, Cursor: cr.Cursor, Campaign: &cr.Stats}
	if errors.Is(err, coupon.ErrStopped) {
		res.Stopped = true
		return res, ErrStopped
	}
	return res, err
}
