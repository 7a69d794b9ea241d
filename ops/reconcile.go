package ops

import (
	"context"
	"log/slog"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/reconcile"
)

// Reconcile runs the reconcile of cfg's sink kind in kinds (see
// kind.Kind.Reconcile): the table reconcile for a postgres sink (against
// the watermark states gives), the campaign's for a coupon_grants sink.
// With repair it writes the source's values over every difference and
// compares again; the report's After holds that second comparison. A kind
// without a reconcile is refused with a config error (exit 2) saying so.
func Reconcile(ctx context.Context, kinds *kind.Registry, cfg *config.Config, states reconcile.StateReader, repair bool, log *slog.Logger) (*reconcile.Report, error) {
	k, err := kinds.Of(cfg)
	if err != nil {
		return nil, err
	}
	if k.Reconcile == nil {
		return nil, k.NoReconcile(cfg)
	}
	return k.Reconcile(ctx, cfg, states, repair, log)
}
