package coupon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/reconcile"
)

// Reconcile compares the grants of cfg's campaign with its frozen targets
// and reports, in the shape of the table reconcile, the targets without a
// grant (Missing) and the grants that are not targets (Extra). With repair
// it grants the missing targets (ON CONFLICT DO NOTHING, so a grant made
// meanwhile is kept); extra grants are reported, never revoked, because a
// coupon may already be in use: revoking is a decision for people (see
// docs/COUPONS.md). The counts and keys describe what was found before the
// repair.
func Reconcile(ctx context.Context, cfg *config.Config, repair bool) (*reconcile.Report, error) {
	started := time.Now()
	g, err := Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer g.Close(context.WithoutCancel(ctx))
	camp, ok, err := g.loadKeys(ctx, true)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("campaign %s has not been frozen yet (no row in %s); run `syncd run --once --source %s` first", g.campaign, g.t.campaigns, cfg.Name)
	}
	counts, err := g.Count(ctx)
	if err != nil {
		return nil, err
	}
	rep := &reconcile.Report{Source: cfg.Name, Missing: counts.Missing, Extra: counts.Extra, RowsCompared: counts.Targets + counts.Granted}
	if rep.Keys.Missing, err = g.keyList(ctx, g.missingFrom(), "t", reconcile.MaxKeys); err != nil {
		return nil, err
	}
	if rep.Keys.Extra, err = g.keyList(ctx, g.extraFrom(), "g", reconcile.MaxKeys); err != nil {
		return nil, err
	}
	rep.Keys.Changed = []string{}
	rep.RowsFetched = int64(len(rep.Keys.Missing) + len(rep.Keys.Extra))
	after := counts
	if repair && counts.Missing > 0 {
		if err := g.grantMissing(ctx); err != nil {
			return nil, err
		}
		rep.Repaired = true
		if after, err = g.Count(ctx); err != nil {
			return nil, err
		}
	}
	if camp.Status != StatusGranting || after.Reconciled() || rep.Repaired {
		// A run still granting records its own outcome when it ends.
		if err := g.setOutcome(ctx, after); err != nil {
			return nil, err
		}
	}
	if after.Reconciled() && !complete(after) {
		return nil, g.duplicateTargets(after)
	}
	rep.DurationMS = time.Since(started).Milliseconds()
	return rep, nil
}

// loadKeys reads the campaign row and the key columns' types from the grants
// table, which is all a reconcile needs (the source is not read). With
// write, it also makes sure the campaign's targets are in chunks (see
// ensureChunks).
func (g *Grants) loadKeys(ctx context.Context, write bool) (Campaign, bool, error) {
	var exists bool
	if err := g.conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL", g.t.campaigns, g.t.grants).Scan(&exists); err != nil {
		return Campaign{}, false, fmt.Errorf("look for the tables of campaign %s: %w", g.campaign, err)
	}
	if !exists {
		return Campaign{}, false, nil
	}
	camp, ok, err := g.Load(ctx)
	if err != nil || !ok {
		return camp, ok, err
	}
	var cols []page.Column
	for _, name := range camp.KeyColumns {
		var typ string
		err := g.conn.QueryRow(ctx, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped", g.t.grants, name).Scan(&typ)
		if errors.Is(err, pgx.ErrNoRows) {
			return Campaign{}, false, fmt.Errorf("grants table %s has no key column %q; it was changed by hand", g.t.grantsName, name)
		}
		if err != nil {
			return Campaign{}, false, fmt.Errorf("describe %s: %w", g.t.grantsName, err)
		}
		cols = append(cols, page.Column{Name: name, Type: typ})
	}
	g.keys = cols
	g.keyIdx = make([]int, len(cols))
	for i := range cols {
		g.keyIdx[i] = i
	}
	g.build()
	if !write {
		return camp, true, nil
	}
	// A campaign frozen before chunks has its targets copied into them
	// (the chunks table is created first when this syncd never ran).
	if err := g.ensureTables(ctx); err != nil {
		return Campaign{}, false, err
	}
	return camp, true, g.ensureChunks(ctx, camp)
}

// grantMissing grants every target that has no grant, in one statement,
// after it locks the campaign's row as a grant page does: a run's page in
// flight commits first, and the repair then skips its keys.
func (g *Grants) grantMissing(ctx context.Context) error {
	q := "INSERT INTO " + g.t.grants + " (campaign_id, " + pgutil.IdentList("", g.keyNames()) + ", granted_at) SELECT $1, " + pgutil.IdentList("t.", g.keyNames()) +
		", now() FROM " + g.missingFrom() + " ON CONFLICT DO NOTHING"
	err := pgx.BeginFunc(ctx, g.conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, g.lockSQL, g.campaign); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, q, g.campaign); err != nil {
			return err
		}
		return pgutil.Durable(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("grant the missing targets of campaign %s: %w", g.campaign, err)
	}
	return nil
}
