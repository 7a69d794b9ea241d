package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
)

func cmdValidate(ctx context.Context, env *Env, args []string) error {
	fs := flagSet(env, "validate")
	var c common
	c.register(fs, false)
	name := fs.String("source", "", "only this source")
	if err := parse(env, fs, args, &c); err != nil {
		return err
	}
	cfgs, err := load(env, c.config, *name)
	if err != nil {
		return err
	}
	for _, cfg := range cfgs {
		if err := validateOne(ctx, env, cfg); err != nil {
			return err
		}
	}
	return nil
}

// validateOne checks one source against its databases without writing.
func validateOne(ctx context.Context, env *Env, cfg *config.Config) error {
	src, err := source.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer src.Close(context.WithoutCancel(ctx))
	var warnings []string
	if err := src.CheckNulls(ctx); err != nil {
		warnings = append(warnings, err.Error())
	}
	plan, err := src.CheckPlan(ctx)
	if err != nil {
		return err
	}
	if plan.Sorts {
		warnings = append(warnings, fmt.Sprintf("the page query sorts the whole table on every page (plan: %s); create an index on (%s) and ANALYZE %s",
			strings.Join(plan.Nodes, " > "), strings.Join(cfg.Source.Cursor, ", "), src.Table.Ident))
	}
	if cfg.Sink.Type == config.SinkPostgres {
		dst, err := sink.OpenPostgres(ctx, cfg)
		if err != nil {
			return err
		}
		defer dst.Close(context.WithoutCancel(ctx))
		exists, err := dst.Check(ctx, src.Table.Columns)
		if err != nil {
			return err
		}
		if !exists {
			warnings = append(warnings, fmt.Sprintf("sink table %s does not exist yet; the first run creates it", cfg.Sink.Table))
		}
	}
	for _, w := range warnings {
		fmt.Fprintf(env.Stdout, "%s: warning: %s\n", cfg.Name, w)
	}
	fmt.Fprintf(env.Stdout, "%s: ok (%s, %d columns, cursor %s, %d warnings)\n", cfg.Name, src.Table.Ident, len(src.Table.Columns), strings.Join(cfg.Source.Cursor, ", "), len(warnings))
	return nil
}
