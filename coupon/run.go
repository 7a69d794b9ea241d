package coupon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// Options configure one run of a campaign (the fields mirror syncer.Options).
type Options struct {
	Config *config.Config
	Store  *watermark.Store
	Logger *slog.Logger
	// Stop, when closed, ends the run before its next page.
	Stop <-chan struct{}
	// AfterCommit, when set, is called after each page has committed and
	// before its watermark is written.
	AfterCommit func(pageNo int64) error
}

// Result says what one run did. Stats is filled as far as the run got, also
// when it fails, so that the counts can be exported as metrics.
type Result struct {
	Pages   int64 // pages granted by this run
	Rows    int64 // targets read by this run
	Written int64 // new grants made by this run
	Cursor  []string
	Stats   Stats
}

// Stats are a campaign's numbers after a run, for metrics and status.
type Stats struct {
	Campaign string
	AsOf     time.Time
	// Frozen is true when this run froze the campaign.
	Frozen bool
	Counts
}

// ErrStopped is returned when Stop ended the run before the last target.
var ErrStopped = errors.New("campaign run stopped before its last target")

// ErrNotReconciled is wrapped when the grants differ from the targets.
var ErrNotReconciled = errors.New("grants do not match the frozen targets")

// Run grants a campaign's coupons: it freezes the campaign on its first
// run, grants page by page from the stored progress cursor, and succeeds
// only when the grants equal the targets both ways.
func Run(ctx context.Context, o Options) (Result, error) {
	c := o.Config
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	res := Result{Stats: Stats{Campaign: c.Sink.Campaign}}
	src, err := source.Open(ctx, c)
	if err != nil {
		return res, err
	}
	g, err := Open(ctx, c)
	if err != nil {
		src.Close(context.WithoutCancel(ctx))
		return res, err
	}
	defer g.Close(context.WithoutCancel(ctx))
	if err := g.Prepare(ctx, src.Table.Cursor); err != nil {
		src.Close(context.WithoutCancel(ctx))
		return res, err
	}
	sink.WarnFsync(ctx, g.conn, c.Sink.DSN, log)
	camp, err := g.Freeze(ctx, src.Conn(), src.Table.Ident)
	src.Close(context.WithoutCancel(ctx)) // the targets are frozen: the source is not read again
	if err != nil {
		return res, err
	}
	res.Stats.AsOf, res.Stats.Frozen = camp.AsOf, camp.Frozen
	if camp.Frozen {
		// Whatever the sink's synchronous_commit, the frozen targets are on
		// disk before the campaign is reported frozen: a crash must not let
		// a later run freeze again at another as_of.
		if err := g.flush(ctx); err != nil {
			return res, err
		}
		log.Info("campaign frozen", "campaign", camp.ID, "as_of", camp.AsOf.UTC().Format(time.RFC3339Nano), "targets", camp.Targets)
	}

	if err := grantAll(ctx, o, g, camp.Cursor, &res, log); err != nil {
		return res, err
	}
	if mutation == "skip_reconcile" {
		return res, nil
	}
	counts, err := g.Count(context.WithoutCancel(ctx))
	if err != nil {
		return res, err
	}
	res.Stats.Counts = counts
	if err := g.setOutcome(context.WithoutCancel(ctx), counts); err != nil {
		return res, err
	}
	if !counts.Reconciled() {
		return res, fmt.Errorf("campaign %s: %d of %d targets have no grant and %d grants are not targets: %w; run `syncd reconcile --source %s` to list them (--repair grants the missing ones)",
			camp.ID, counts.Missing, counts.Targets, counts.Extra, ErrNotReconciled, c.Name)
	}
	log.Info("campaign reconciled", "campaign", camp.ID, "targets", counts.Targets, "granted", counts.Granted, "new_grants", res.Written)
	return res, nil
}

// grantAll pages through the frozen targets after the cursor after.
func grantAll(ctx context.Context, o Options, g *Grants, after []string, res *Result, log *slog.Logger) error {
	c := o.Config
	for {
		select {
		case <-o.Stop:
			return ErrStopped
		default:
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("campaign %s: %w", g.campaign, err)
		}
		p, err := g.ReadTargets(ctx, after, c.Source.PageSize)
		if err != nil {
			return err
		}
		if p.Len() == 0 {
			return nil
		}
		if after != nil {
			ok, err := g.advances(ctx, after, p.Last)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("campaign %s: the page after key %v ends at %v and does not advance; stopped instead of looping (the targets table %s or its index may be damaged: REINDEX it and run again)", g.campaign, after, p.Last, g.t.targets)
			}
		}
		if mutation == "progress_first" || mutation == "watermark_first" {
			if err := save(o.Store, c.Name, g.campaign, p.Last, p.Len()); err != nil {
				return err
			}
		}
		ar, err := g.Apply(context.WithoutCancel(ctx), p)
		if err != nil {
			return err
		}
		res.Pages++
		res.Rows += int64(p.Len())
		res.Written += ar.Written
		if o.AfterCommit != nil {
			if err := o.AfterCommit(res.Pages); err != nil {
				return err
			}
		}
		if mutation != "progress_first" && mutation != "watermark_first" {
			if err := save(o.Store, c.Name, g.campaign, p.Last, p.Len()); err != nil {
				return err
			}
		}
		res.Cursor = p.Last
		log.Debug("page granted", "page", res.Pages, "targets", p.Len(), "new_grants", ar.Written, "cursor", p.Last)
		if p.Len() < c.Source.PageSize {
			return nil
		}
		after = p.Last
	}
}

// save mirrors the committed progress into the state file, for status.
func save(store *watermark.Store, name, campaign string, last []string, n int) error {
	return store.Update(name, func(st *watermark.State) error {
		st.Cursor = last
		st.From = ""
		st.Campaign = campaign
		st.TotalRows += int64(n)
		return nil
	})
}
