package ops

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/coupon"
	"github.com/syncd/syncd/reconcile"
)

// Reconcile runs the reconcile of cfg's sink type: the table reconcile for
// a postgres sink (against the watermark states gives), the campaign's for
// a coupon_grants sink. With repair it writes the source's values over
// every difference and compares again; the report's After holds that
// second comparison.
func Reconcile(ctx context.Context, cfg *config.Config, states reconcile.StateReader, repair bool, log *slog.Logger) (*reconcile.Report, error) {
	switch cfg.Sink.Type {
	case config.SinkPostgres:
		return reconcile.Run(ctx, cfg, states, reconcile.Options{Repair: repair, Logger: log})
	case config.SinkCouponGrants:
		rep, err := coupon.Reconcile(ctx, cfg, repair)
		if err != nil || !rep.Repaired {
			return rep, err
		}
		// Verify the repair, as the table reconcile does.
		if rep.After, err = coupon.Reconcile(ctx, cfg, false); err != nil {
			return nil, fmt.Errorf("verify the repair of %s: %w", cfg.Name, err)
		}
		return rep, nil
	}
	return nil, cfg.Errorf("sink.type", "reconcile does not support sink type %q", cfg.Sink.Type)
}
