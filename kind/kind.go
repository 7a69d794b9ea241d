// Package kind is the one place that knows the kinds of sink: per
// sink.type, how a run opens it, what validate checks, how reconcile works
// on it, whether resync applies and whether the daemon runs it at start.
// syncer, reconcile's callers, daemon and cli look a source's kind up here
// instead of comparing sink.type; a new kind of sink is one package that
// implements sink.Sink (and, when it reads its own pages, plan.Reader and
// plan.Hooks) plus its line in the registry below.
package kind

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/coupon"
	"github.com/syncd/syncd/plan"
	"github.com/syncd/syncd/reconcile"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
)

// Kind describes one sink type.
type Kind struct {
	// Type is the sink.type value.
	Type string
	// OpenSink opens the sink of a table copy: syncer reads the source
	// table into it by the keyset cursor, below the commit-safe bound,
	// with lookback and the outside pass. Nil for a kind that reads its
	// own pages (OpenPlan).
	OpenSink func(ctx context.Context, c *config.Config) (sink.Sink, error)
	// OpenPlan opens a run that reads its own pages (a campaign's frozen
	// targets). Its run lock has its own connection, taken before the
	// plan is opened. Nil for a table copy (OpenSink).
	OpenPlan func(ctx context.Context, c *config.Config, o plan.Options) (*plan.Plan, error)
	// Check is what validate checks against the databases besides the
	// source table, given the open source (nil: the table checks of a
	// postgres copy: the page query's plan, the copy's columns and key; a
	// new kind sets its own).
	Check func(ctx context.Context, c *config.Config, src source.Source) ([]string, error)
	// Reconcile compares the source with what the sink holds (and with
	// repair fixes it); states holds the watermark when ReconcileWatermark.
	Reconcile func(ctx context.Context, c *config.Config, states reconcile.StateReader, repair bool, log *slog.Logger) (*reconcile.Report, error)
	// ReconcileWatermark is true when Reconcile compares the rows up to the
	// watermark in the state file (a campaign's progress lives in its sink).
	ReconcileWatermark bool
	// NoResync, when set, says why resync does not apply to the kind, as
	// the end of a sentence "source NAME ...".
	NoResync string
	// RunsAtStart is true when the daemon runs the source at start, not
	// only on its schedule.
	RunsAtStart bool
	// Campaign is true when a run is a campaign: its identity includes
	// sink.campaign, and a new campaign id starts afresh instead of being
	// refused.
	Campaign bool
}

// registry holds every kind this build knows, built once.
var registry = map[string]Kind{
	config.SinkPostgres: {
		Type:               config.SinkPostgres,
		OpenSink:           openPostgres,
		Reconcile:          reconcileTable,
		ReconcileWatermark: true,
		RunsAtStart:        true,
	},
	config.SinkCouponGrants: {
		Type:      config.SinkCouponGrants,
		OpenPlan:  coupon.OpenPlan,
		Check:     coupon.Check,
		Reconcile: reconcileCampaign,
		NoResync:  "is a coupon campaign: its progress lives in the grants database, so resync does not apply; re-running it is always safe, and a new target set needs a new sink.campaign (docs/COUPONS.md)",
		Campaign:  true,
	},
}

// Of returns the kind of c's sink, or an error naming sink.type when this
// build does not know it (config validation refuses such a config first).
func Of(c *config.Config) (Kind, error) {
	if k, ok := registry[c.Sink.Type]; ok {
		return k, nil
	}
	return Kind{}, c.Errorf("sink.type", "unknown sink type %q; use one of %s", c.Sink.Type, strings.Join(Types(), ", "))
}

// IsCampaign reports whether c's sink is a campaign (Kind.Campaign).
func IsCampaign(c *config.Config) bool { return registry[c.Sink.Type].Campaign }

// Types lists the known sink types, sorted.
func Types() []string {
	out := make([]string, 0, len(registry))
	for t := range registry {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

func reconcileTable(ctx context.Context, c *config.Config, states reconcile.StateReader, repair bool, log *slog.Logger) (*reconcile.Report, error) {
	return reconcile.Run(ctx, c, states, reconcile.Options{Repair: repair, Logger: log})
}

func reconcileCampaign(ctx context.Context, c *config.Config, _ reconcile.StateReader, repair bool, _ *slog.Logger) (*reconcile.Report, error) {
	rep, err := coupon.Reconcile(ctx, c, repair)
	if err != nil || !rep.Repaired {
		return rep, err
	}
	// Verify the repair, as the table reconcile does.
	if rep.After, err = coupon.Reconcile(ctx, c, false); err != nil {
		return nil, fmt.Errorf("verify the repair of %s: %w", c.Name, err)
	}
	return rep, nil
}

// openPostgres opens the table copy's sink; on failure the Sink is nil, not
// an interface holding a nil *sink.Postgres (a run that failed to open its
// sink would otherwise call methods on it).
func openPostgres(ctx context.Context, c *config.Config) (sink.Sink, error) {
	s, err := sink.OpenPostgres(ctx, c)
	if err != nil {
		return nil, err
	}
	return s, nil
}
