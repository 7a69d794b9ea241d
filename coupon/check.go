package coupon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
)

// Check validates a coupon source without writing: the where clause parses
// and plans with :as_of bound, an existing grants table fits, and a frozen
// campaign still matches the config. It returns warnings for `syncd
// validate` to print.
func Check(ctx context.Context, c *config.Config, src source.Source) ([]string, error) {
	q, ok := src.(source.Querier)
	if !ok {
		return nil, fmt.Errorf("check campaign %s: its source cannot run the targets query; a coupon campaign reads a PostgreSQL source", c.Name)
	}
	t, err := tablesOf(c)
	if err != nil {
		return nil, err
	}
	// The grants session is opened while the source plans the targets'
	// query: a connection is most of what validating a campaign costs.
	var (
		g    *Grants
		gerr error
		wg   sync.WaitGroup
	)
	wg.Go(func() { g, gerr = Open(ctx, c) })
	plan := &Grants{cfg: c, t: t, keys: src.Table().Cursor}
	sel, bound := plan.selectKeys(src.Table().Ident, pgutil.IdentList("", plan.keyNames()), "", 1)
	var args []any
	if bound {
		args = append(args, time.Now().UTC().Format(time.RFC3339Nano))
	}
	rows, err := q.Query(ctx, "EXPLAIN "+sel, args...)
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	wg.Wait()
	if g != nil {
		defer g.Close(context.WithoutCancel(ctx))
	}
	if err != nil {
		return nil, c.Errorf("source.where", "the targets query does not plan: %v", err)
	}
	if gerr != nil {
		return nil, gerr
	}
	g.keys = src.Table().Cursor
	var warnings []string
	w, err := sink.FsyncWarning(ctx, g.conn, c.Sink.DSN)
	if err != nil {
		return nil, err
	}
	if w != "" {
		warnings = append(warnings, w)
	}
	var exists bool
	if err := g.conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", g.t.grants).Scan(&exists); err != nil {
		return nil, fmt.Errorf("look for grants table %s: %w", g.t.grantsName, err)
	}
	if !exists {
		return append(warnings, fmt.Sprintf("grants table %s does not exist yet; the first run creates it with %s and %s", g.t.grantsName, g.t.chunksName, g.t.campaigns)), nil
	}
	if err := g.checkGrantsTable(ctx); err != nil {
		return nil, err
	}
	camp, ok, err := g.loadKeys(ctx, false)
	if err != nil {
		return nil, err
	}
	if !ok {
		return append(warnings, fmt.Sprintf("campaign %s is not frozen yet; the first run freezes it", g.campaign)), nil
	}
	if err := g.checkUnchanged(camp, src.Table().Ident); err != nil {
		return nil, err
	}
	return warnings, nil
}
