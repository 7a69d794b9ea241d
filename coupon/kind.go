package coupon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/reconcile"
)

// Kind is the coupon campaign's kind of sink (sink.type coupon_grants):
// a run reads the campaign's frozen targets (OpenPlan), holds the run lock
// on its grants session, and is identified by its database and campaign
// id, so that a new campaign id starts afresh.
func Kind() kind.Kind {
	return kind.Kind{
		Type:     config.SinkCouponGrants,
		OpenPlan: OpenPlan,
		Check:    Check,
		Identity: func(c *config.Config) map[string]string {
			id := kind.DatabaseIdentity(c)
			id["sink.campaign"] = c.Sink.Campaign
			return id
		},
		Secrets:   kind.DSNSecrets,
		Lock:      kind.PostgresLock,
		Reconcile: reconcileCampaign,
		NoResync:  "is a coupon campaign: its progress lives in the grants database, so resync does not apply; re-running it is always safe, and a new target set needs a new sink.campaign (docs/COUPONS.md)",
		Campaign:  true,
	}
}

func reconcileCampaign(ctx context.Context, c *config.Config, _ reconcile.StateReader, repair bool, _ *slog.Logger) (*reconcile.Report, error) {
	rep, err := Reconcile(ctx, c, repair)
	if err != nil || !rep.Repaired {
		return rep, err
	}
	// Verify the repair, as the table reconcile does.
	if rep.After, err = Reconcile(ctx, c, false); err != nil {
		return nil, fmt.Errorf("verify the repair of %s: %w", c.Name, err)
	}
	return rep, nil
}
