package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/internal/sourceerr"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// load reads the configs (of the kinds in env.Kinds), registers their
// secrets for scrubbing (the DSNs' passwords, and what each kind says), and
// keeps the sources that --source name selects (all when name is empty):
// a source, a pattern source, or the pattern source of NAME.TABLE.
func load(env *Env, path, name string) ([]*config.Config, error) {
	return loadWith(env, path, name, config.Options{})
}

func loadWith(env *Env, path, name string, o config.Options) ([]*config.Config, error) {
	o.Getenv = env.Getenv
	o.CheckDSN = pgutil.CheckDSN
	o.Sinks = env.Kinds.Sinks()
	cfgs, err := config.LoadWith(path, o)
	if err != nil {
		return nil, err
	}
	for _, c := range cfgs {
		for _, s := range env.Kinds.Secrets(c) {
			env.scrub.add(s)
		}
	}
	if name == "" {
		return cfgs, nil
	}
	var names []string
	for _, c := range cfgs {
		if c.Name == name || c.IsPattern() && strings.HasPrefix(name, c.Name+".") {
			return []*config.Config{c}, nil
		}
		names = append(names, c.Name)
	}
	return nil, fmt.Errorf("--source %q is not in %s (sources: %s): %w", name, path, strings.Join(names, ", "), ErrUsage)
}

// expand replaces each pattern source by a source per table it matches in
// its source catalog and returns them with the tables it skipped. With a
// name of the form NAME.TABLE only that table is kept.
func expand(ctx context.Context, cfgs []*config.Config, name string) ([]*config.Config, []source.Skipped, error) {
	out, skipped, _, err := expandWarn(ctx, cfgs, name)
	return out, skipped, err
}

// expandWarn is expand with the warnings of the pattern sources' tables
// entries (one naming no table of the catalog), each as "NAME: warning: ...".
func expandWarn(ctx context.Context, cfgs []*config.Config, name string) ([]*config.Config, []source.Skipped, []string, error) {
	out, skipped, warnings, _, err := expandDescribed(ctx, cfgs, name)
	return out, skipped, warnings, err
}

// expandDescribed is expandWarn with the members' tables as matching
// described them, by member name (source.Expansion.Tables), so a caller
// that opens each member need not describe its table again.
func expandDescribed(ctx context.Context, cfgs []*config.Config, name string) ([]*config.Config, []source.Skipped, []string, map[string]*source.Table, error) {
	described := map[string]*source.Table{}
	var out []*config.Config
	var skipped []source.Skipped
	var warnings []string
	for _, c := range cfgs {
		if !c.IsPattern() {
			out = append(out, c)
			continue
		}
		var e source.Expansion
		var err error
		table, one := strings.CutPrefix(name, c.Name+".")
		if one {
			// One table of the pattern: the others are not described.
			e, err = source.ExpandTable(ctx, c, table)
		} else {
			e, err = source.ExpandAll(ctx, c)
		}
		if err != nil {
			return nil, nil, nil, nil, &sourceerr.SourceError{Source: c.Name, Err: err}
		}
		members, skip := e.Members, e.Skipped
		maps.Copy(described, e.Tables)
		for _, w := range e.Warnings {
			warnings = append(warnings, c.Name+": warning: "+w)
		}
		if len(members)+len(skip) == 0 && !one {
			// Like a table that does not exist: most likely a mistake.
			return nil, nil, nil, nil, c.Errorf("source.table", "pattern %s matches no table in the source database (or none this role can see, once source.exclude is applied); check the schema and the pattern, which are case-sensitive", c.Source.Table)
		}
		if name == "" || name == c.Name {
			out = append(out, members...)
			skipped = append(skipped, skip...)
			continue
		}
		found := false
		for _, m := range members {
			if m.Name == name {
				out, found = append(out, m), true
			}
		}
		for _, s := range skip {
			if s.Name == name {
				skipped, found = append(skipped, s), true
			}
		}
		if !found {
			return nil, nil, nil, nil, fmt.Errorf("--source %q: pattern source %s (%s) matches no table of that name; `syncd validate --config %s` lists its tables: %w",
				name, c.Name, c.Source.Table, c.File, ErrUsage)
		}
	}
	return out, skipped, warnings, described, nil
}

// reportSkipped prints one line per skipped table on stderr.
func reportSkipped(env *Env, cmd string, skipped []source.Skipped) {
	for _, s := range skipped {
		fmt.Fprintf(env.Stderr, "syncd %s: %s\n", cmd, oneLine(s.String()))
	}
}

// skippedBy makes a skipped entry of a pattern table whose check failed
// with a config error.
func skippedBy(cfg *config.Config, err error) source.Skipped {
	t := cfg.Source.Ident
	reason, code := err.Error(), source.SkipOther
	var fe *config.FieldError
	if errors.As(err, &fe) {
		reason, code = fe.Key+": "+fe.Msg, source.SkipCode(fe.Key, fe.Msg)
	}
	return source.Skipped{Name: cfg.Name, Table: t, Reason: reason, Code: code}
}

// openStateReadOnly opens an existing state file for reading; a missing one
// is a usage error naming the path.
func openStateReadOnly(path string) (*watermark.Store, error) {
	store, err := watermark.OpenReadOnly(path, 2*time.Second)
	if errors.Is(err, os.ErrNotExist) {
		abs, _ := filepath.Abs(path)
		return nil, fmt.Errorf("no state file at %s: run `syncd run` first, or pass --state (or set SYNCD_STATE) to the state file the runs write: %w", cmp.Or(abs, path), ErrUsage)
	}
	return store, err
}

// storedMembers replaces each pattern source by the tables of it that have
// a state in the store, without asking the source database (or, when none
// has run yet, keeps the pattern source for one "never run" line).
func storedMembers(store *watermark.Store, cfgs []*config.Config) ([]*config.Config, error) {
	var names []string
	var out []*config.Config
	for _, c := range cfgs {
		if !c.IsPattern() {
			out = append(out, c)
			continue
		}
		if names == nil {
			var err error
			if names, err = store.Names(); err != nil {
				return nil, fmt.Errorf("list the sources of %s: %w", store.Path(), err)
			}
			sort.Strings(names)
		}
		p := c.Source.Ident
		before := len(out)
		for _, n := range names {
			table, ok := strings.CutPrefix(n, c.Name+".")
			if !ok || !c.Match(config.Table{Schema: p.Schema, Name: table}) {
				continue
			}
			out = append(out, c.Named(config.Table{Schema: p.Schema, Name: table}))
		}
		if len(out) == before {
			out = append(out, c) // no table has run yet: one "never run" line
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// loadOne loads the one source --source name names: a source, or one
// table of a pattern source (NAME.TABLE), matched against its catalog when
// catalog is set, else by name only.
func loadOne(ctx context.Context, env *Env, path, name string, catalog bool) (*config.Config, error) {
	cfgs, err := load(env, path, name)
	if err != nil {
		return nil, err
	}
	c := cfgs[0]
	if !c.IsPattern() {
		return c, nil
	}
	if name == c.Name {
		return nil, fmt.Errorf("--source %s is a pattern source (%s): name one of its tables, such as %s: %w", name, c.Source.Table, config.MemberName(name, "TABLE"), ErrUsage)
	}
	if !catalog {
		p := c.Source.Ident
		t := config.Table{Schema: p.Schema, Name: strings.TrimPrefix(name, c.Name+".")}
		if !c.Match(t) {
			return nil, fmt.Errorf("--source %s: table %s is not matched by pattern source %s (%s): %w", name, t, c.Name, c.Source.Table, ErrUsage)
		}
		return c.Named(t), nil
	}
	members, skipped, err := expand(ctx, cfgs, name)
	if err != nil {
		return nil, err
	}
	if len(members) == 0 {
		return nil, fmt.Errorf("--source %s: %s", name, skipped[0].Reason)
	}
	return members[0], nil
}
