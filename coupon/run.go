package coupon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/plan"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// Stats are a campaign's numbers after a run, for metrics and status.
type Stats = plan.CampaignStats

// ErrNotReconciled is wrapped when the grants differ from the targets.
var ErrNotReconciled = errors.New("grants do not match the frozen targets")

// campaignRun is one run of a campaign for the run loop: it freezes the
// campaign before the first page (on its first run), reads the frozen
// targets page by page from the stored progress cursor, and succeeds only
// when the grants equal the targets both ways.
type campaignRun struct {
	c     *config.Config
	log   *slog.Logger
	src   freezeSource // open until the freeze
	g     *Grants
	after []string // the key of the last target read
	pos   int64    // and its position in the frozen order
	// first is the grant page the freeze committed (freezeInDB), which
	// the run reads before the others.
	first *page.Page
	stats *Stats
}

// freezeSource is what a campaign needs of its source: the table, and the
// PostgreSQL session its freeze reads the targets on.
type freezeSource interface {
	source.Source
	source.Session
}

// OpenPlan opens one run of the campaign of c (a coupon_grants sink): the
// source (read only by the freeze) and the grants sink. Nothing is written
// before the run calls the plan's hooks.
func OpenPlan(ctx context.Context, c *config.Config, o plan.Options) (*plan.Plan, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	// The two sessions are opened at once (each is a connection and a few
	// catalog reads, about 10 ms of a campaign that is measured against
	// one statement); a failure closes the other.
	var (
		src  freezeSource
		serr error
		wg   sync.WaitGroup
	)
	wg.Go(func() {
		if r, err := source.Open(ctx, c); err == nil {
			src = r
		} else {
			serr = err
		}
	})
	g, err := Open(ctx, c)
	wg.Wait()
	if err != nil || serr != nil {
		if src != nil {
			src.Close(context.WithoutCancel(ctx))
		}
		if g != nil {
			g.Close(ctx)
		}
		return nil, cmp.Or(serr, err)
	}
	g.test, g.stop = o.Test, o.Stop
	r := &campaignRun{c: c, log: log, src: src, g: g, stats: &Stats{Campaign: c.Sink.Campaign}}
	return &plan.Plan{
		Reader:   r,
		Sink:     g,
		Hooks:    r,
		Record:   func(st *watermark.State) { st.Campaign = g.campaign },
		Campaign: r.stats,
		PageSize: c.Sink.GrantPageSize,
		Close: func(ctx context.Context) {
			if r.src != nil {
				r.src.Close(ctx)
			}
		},
	}, nil
}

// Before prepares the grants tables and freezes the campaign on its first
// run; later runs read its frozen row and start after its progress cursor.
func (r *campaignRun) Before(ctx context.Context) (err error) {
	// A lock timeout on any statement of the campaign names its tables.
	defer func() { err = r.g.explain(ctx, err) }()
	g := r.g
	if err := g.Prepare(ctx, r.src.Table().Cursor); err != nil {
		return err
	}
	sink.WarnFsync(ctx, g.conn, r.c.Sink.DSN, r.log)
	camp, err := g.Freeze(ctx, r.src, r.src.Table().Ident)
	r.src.Close(context.WithoutCancel(ctx)) // the targets are frozen: the source is not read again
	r.src = nil
	if err != nil {
		return err
	}
	r.stats.AsOf, r.stats.Frozen = camp.AsOf, camp.Frozen
	if camp.Frozen {
		// The freeze committed durably (whatever the sink's
		// synchronous_commit) before the campaign is reported frozen.
		// path says who read the targets: the database itself, which froze
		// them and granted the first page in one transaction, or syncd,
		// streaming them from the source session.
		path := "streamed"
		if camp.InDB {
			path = "in-database"
		}
		r.log.Info("campaign frozen", "campaign", camp.ID, "as_of", camp.AsOf.UTC().Format(time.RFC3339Nano), "targets", camp.Targets, "path", path)
	}
	r.after = camp.Cursor
	if p, ok := g.takeFrozenPage(); ok {
		// The freeze granted the first page: the run reports it first and
		// goes on after it (its end is the stored cursor).
		r.first, r.pos = &p, int64(p.Len())
		return nil
	}
	r.pos, err = g.position(ctx, camp.Cursor)
	return err
}

// Next reads where the next grant page ends: at most limit frozen targets
// after the last one read. The page carries no keys; Apply grants its span
// on the sink's server.
func (r *campaignRun) Next(ctx context.Context, limit int) (_ page.Page, _ bool, err error) {
	defer func() { err = r.g.explain(ctx, err) }()
	if r.first != nil {
		p := *r.first
		r.first = nil
		return p, false, nil
	}
	p, err := r.g.ReadSpan(ctx, r.after, r.pos, limit)
	if err != nil || p.Len() == 0 {
		return p, false, err
	}
	r.after, r.pos = p.Last, r.pos+int64(p.Len())
	return p, false, nil
}

// After compares the grants with the targets both ways and records the
// outcome in the campaign's row: done only when they are equal.
func (r *campaignRun) After(ctx context.Context) (err error) {
	defer func() { err = r.g.explain(ctx, err) }()
	g := r.g
	counts, err := g.Count(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	r.stats.Counts = counts
	if err := g.setOutcome(context.WithoutCancel(ctx), counts); err != nil {
		return err
	}
	if !counts.Reconciled() {
		return fmt.Errorf("campaign %s: %d of %d targets have no grant and %d grants are not targets: %w; run `syncd reconcile --source %s` to list them (--repair grants the missing ones)",
			g.campaign, counts.Missing, counts.Targets, counts.Extra, ErrNotReconciled, r.c.Name)
	}
	if !complete(counts) {
		return g.duplicateTargets(counts)
	}
	r.log.Info("campaign reconciled", "campaign", g.campaign, "targets", counts.Targets, "granted", counts.Granted, "new_grants", g.written)
	return nil
}
