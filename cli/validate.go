package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/coupon"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

func cmdValidate(ctx context.Context, env *Env, args []string) error {
	fs := flagSet(env, "validate")
	var c common
	c.register(fs, true)
	name := fs.String("source", "", "only this source")
	if err := parse(env, fs, args, &c); err != nil {
		return err
	}
	raw, err := load(env, c.config, *name)
	if err != nil {
		return err
	}
	cfgs, skipped, err := expand(ctx, raw, *name)
	if err != nil {
		return err
	}
	printExpansion(env, raw, cfgs, skipped)
	for _, cfg := range cfgs {
		warnings, table, err := check(ctx, cfg, true)
		if errors.Is(err, config.ErrInvalid) && cfg.Pattern != "" {
			skipped = append(skipped, skippedBy(cfg, err))
			fmt.Fprintf(env.Stdout, "%s: skipped: %s\n", cfg.Name, oneLine(skippedBy(cfg, err).Reason))
			continue
		}
		if err != nil {
			if errors.Is(err, config.ErrInvalid) {
				return err
			}
			return fmt.Errorf("source %s: %w", cfg.Name, source.Explain(cfg, err))
		}
		if err := checkStoredIdentity(cfg, c.state); err != nil {
			return err
		}
		for _, w := range warnings {
			fmt.Fprintf(env.Stdout, "%s: warning: %s\n", cfg.Name, w)
		}
		fmt.Fprintf(env.Stdout, "%s: ok (%s, %d columns, cursor %s, %d warnings)\n", cfg.Name, table.Ident, len(table.Columns), strings.Join(cfg.Source.Cursor, ", "), len(warnings))
	}
	if len(skipped) > 0 {
		return fmt.Errorf("%d tables matched by a pattern source would be skipped (listed above): fix them or add them to source.exclude", len(skipped))
	}
	return nil
}

// printExpansion lists, for each pattern source, the tables it matched and
// the ones it skips.
func printExpansion(env *Env, raw, cfgs []*config.Config, skipped []source.Skipped) {
	for _, p := range raw {
		if !p.IsPattern() {
			continue
		}
		var names []string
		for _, c := range cfgs {
			if c.Pattern == p.Name {
				names = append(names, c.Name)
			}
		}
		fmt.Fprintf(env.Stdout, "%s: pattern %s matches %d tables to sync: %s\n", p.Name, p.Source.Table, len(names), strings.Join(names, ", "))
		for _, s := range skipped {
			if strings.HasPrefix(s.Name, p.Name+".") {
				fmt.Fprintf(env.Stdout, "%s: skipped: %s\n", s.Name, oneLine(s.Reason))
			}
		}
	}
}

// check verifies one source against its databases without writing
// anything: the table, columns, cursor and tie-breaker in the source, and
// the copy's columns and key in the sink. With plan it also explains the
// page query. Config problems come back as config errors (exit 2).
func check(ctx context.Context, cfg *config.Config, plan bool) (warnings []string, table *source.Table, err error) {
	src, err := source.Open(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	defer src.Close(context.WithoutCancel(ctx))
	if cfg.Sink.Type == config.SinkCouponGrants {
		// A campaign reads its frozen targets, not pages of the source:
		// check its where clause, grants table and frozen campaign instead.
		warnings, err := coupon.Check(ctx, cfg, src)
		if err != nil {
			return nil, nil, err
		}
		return warnings, src.Table, nil
	}
	if plan {
		out, err := src.CountOutside(ctx)
		if err != nil {
			return nil, nil, err
		}
		warnings = append(warnings, out.Warnings(src)...)
		bound, err := src.Bound(ctx)
		if err != nil {
			return nil, nil, err
		}
		if w := bound.Warning(cfg.Source.Lookback.Duration); w != "" {
			warnings = append(warnings, w)
		}
		pc, err := src.CheckPlan(ctx)
		if err != nil {
			return nil, nil, err
		}
		if pc.Sorts {
			warnings = append(warnings, fmt.Sprintf("the page query sorts the whole table on every page (plan: %s); create an index on (%s) and ANALYZE %s",
				strings.Join(pc.Nodes, " > "), strings.Join(cfg.Source.Cursor, ", "), src.Table.Ident))
		}
	}
	if cfg.Sink.Type == config.SinkPostgres {
		dst, err := sink.OpenPostgres(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		defer dst.Close(context.WithoutCancel(ctx))
		dst.UseSourceSchema(src.Table.Types, src.Table.Checks)
		check := dst.Check
		if plan {
			check = dst.Validate
		}
		exists, err := check(ctx, src.Table.Columns)
		if err != nil {
			return nil, nil, err
		}
		if !exists && plan {
			warnings = append(warnings, fmt.Sprintf("sink table %s does not exist yet; the first run creates it", cfg.Sink.Table))
		}
		if plan {
			w, err := sink.FsyncWarning(ctx, dst.Conn(), cfg.Sink.DSN)
			if err != nil {
				return nil, nil, err
			}
			if w != "" {
				warnings = append(warnings, w)
			}
		}
	}
	return warnings, src.Table, nil
}

// checkStoredIdentity refuses a config whose watermark in the state file
// (when there is one) was computed for other settings: the next run would
// refuse it too.
func checkStoredIdentity(cfg *config.Config, state string) error {
	st, _, err := watermark.ReadState(state, cfg.Name, 2*time.Second)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return syncer.CheckIdentity(cfg, st, state)
}
