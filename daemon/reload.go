package daemon

import (
	"reflect"
	"sort"
	"strings"

	"github.com/syncd/syncd/config"
)

// reload reads the config path again, one file at a time so that a bad
// file costs only its own sources: they keep their previous config and the
// reason is logged. New sources start, changed ones take their new config
// from their next run, removed ones stop being scheduled (a run in flight
// finishes). Pattern sources are matched against their catalogs again.
func (d *daemon) reload() {
	d.mu.Lock()
	stopping := d.stopping
	d.mu.Unlock()
	if stopping {
		return
	}
	d.pmu.Lock()
	prevFiles := d.files
	d.pmu.Unlock()

	// A file that fails keeps its sources' previous configs.
	loads, err := config.LoadEach(d.o.ConfigPath, d.o.Load, func(f string) []*config.Config { return prevFiles[f] })
	if err != nil {
		d.log.Error("config not reloaded; every source keeps its config", "err", err)
		return
	}
	next := map[string]*config.Config{} // by name
	nextFiles := map[string][]*config.Config{}
	var invalid []string
	for _, l := range loads {
		for _, c := range l.Configs {
			next[c.Name] = c
		}
		if len(l.Configs) > 0 {
			nextFiles[l.File] = l.Configs
		}
		if l.Err != nil {
			invalid = append(invalid, l.File)
			if len(prevFiles[l.File]) > 0 {
				var names []string
				for _, c := range l.Configs {
					names = append(names, c.Name)
				}
				d.log.Error("config file not reloaded: its source keeps its previous config; fix the file and reload again",
					"file", l.File, "source", strings.Join(names, ","), "err", l.Err)
			} else {
				d.log.Error("new config file not loaded; fix it and reload again", "file", l.File, "err", l.Err)
			}
			continue
		}
		for _, c := range l.Configs {
			if d.o.OnConfig != nil {
				d.o.OnConfig(c)
			}
		}
	}
	d.pmu.Lock()
	d.files = nextFiles
	d.pmu.Unlock()

	var added, changed, removed []string
	// Plain sources: the ones not made by a pattern.
	d.mu.Lock()
	current := map[string]*source{}
	for name, s := range d.sources {
		if s.config().Pattern == "" {
			current[name] = s
		}
	}
	var gone []*source
	for name, s := range current {
		if c, ok := next[name]; !ok || c.IsPattern() {
			delete(d.sources, name)
			removed = append(removed, name)
			gone = append(gone, s)
		}
	}
	d.mu.Unlock()
	for _, s := range gone {
		s.unschedule()
	}
	// Pattern sources.
	d.pmu.Lock()
	patterns := map[string]*config.Config{}
	for name, p := range d.patterns {
		patterns[name] = p.cfg
	}
	d.pmu.Unlock()
	for name := range patterns {
		if c, ok := next[name]; !ok || !c.IsPattern() {
			removed = append(removed, name)
			d.removePattern(name)
		}
	}
	for name, c := range next {
		if c.IsPattern() {
			prev, ok := patterns[name]
			switch {
			case !ok:
				added = append(added, name)
				d.addPattern(c)
			case !sameConfig(prev, c):
				changed = append(changed, name)
				d.replacePattern(c)
			default:
				d.expand(name) // a reload also picks up new tables
			}
			continue
		}
		s, ok := current[name]
		switch {
		case !ok:
			added = append(added, name)
			d.add(c)
		case s.update(c):
			changed = append(changed, name)
		}
	}
	sort.Strings(added)
	sort.Strings(changed)
	sort.Strings(removed)
	d.log.Info("config reloaded", "added", added, "changed", changed, "removed", removed, "invalid_files", invalid)
}

// sameConfig reports whether two loads of a source say the same thing.
func sameConfig(a, b *config.Config) bool {
	if a == b {
		return true // a pattern's match that found a table unchanged gives back its config
	}
	x, y := *a, *b
	x.Lines, y.Lines = nil, nil
	return reflect.DeepEqual(x, y)
}
