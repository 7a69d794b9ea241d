package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"

	"github.com/syncd/syncd/config"
)

// reload reads the config path again, one file at a time so that a bad
// file costs only its own source: that source keeps its previous config
// and the reason is logged. New sources start, changed ones take their new
// config from their next run, removed ones stop being scheduled (a run in
// flight finishes).
func (d *daemon) reload() {
	files, err := configFiles(d.o.ConfigPath)
	if err != nil {
		d.log.Error("config not reloaded; every source keeps its config", "err", err)
		return
	}
	d.mu.Lock()
	if d.stopping {
		d.mu.Unlock()
		return
	}
	byFile := map[string]*config.Config{}
	for _, s := range d.sources {
		c := s.config()
		byFile[c.File] = c
	}
	d.mu.Unlock()

	next := map[string]*config.Config{} // by name
	var invalid []string
	for _, f := range files {
		c, err := config.LoadFile(f)
		if err == nil {
			if other, dup := next[c.Name]; dup {
				err = c.Errorf("name", "source name %q is already used by %s; give each source a unique name", c.Name, other.File)
			}
		}
		if err != nil {
			invalid = append(invalid, f)
			if prev, ok := byFile[f]; ok {
				if _, taken := next[prev.Name]; !taken {
					next[prev.Name] = prev
				}
				d.log.Error("config file not reloaded: its source keeps its previous config; fix the file and reload again",
					"file", f, "source", prev.Name, "err", err)
			} else {
				d.log.Error("new config file not loaded; fix it and reload again", "file", f, "err", err)
			}
			continue
		}
		if d.o.OnConfig != nil {
			d.o.OnConfig(c)
		}
		next[c.Name] = c
	}

	var added, changed, removed []string
	d.mu.Lock()
	current := make(map[string]*source, len(d.sources))
	for name, s := range d.sources {
		current[name] = s
	}
	var gone []*source
	for name, s := range current {
		if _, ok := next[name]; !ok {
			delete(d.sources, name)
			removed = append(removed, name)
			gone = append(gone, s)
		}
	}
	d.mu.Unlock()
	for _, s := range gone {
		s.unschedule()
	}
	for name, c := range next {
		s, ok := current[name]
		switch {
		case !ok:
			added = append(added, name)
			d.add(c)
		case !sameConfig(s.config(), c):
			changed = append(changed, name)
			s.mu.Lock()
			s.cfg = c
			s.mu.Unlock()
			s.schedule(c)
		}
	}
	sort.Strings(added)
	sort.Strings(changed)
	sort.Strings(removed)
	d.log.Info("config reloaded", "added", added, "changed", changed, "removed", removed, "invalid_files", invalid)
}

// sameConfig reports whether two loads of a source say the same thing.
func sameConfig(a, b *config.Config) bool {
	x, y := *a, *b
	x.Lines, y.Lines = nil, nil
	return reflect.DeepEqual(x, y)
}

// configFiles lists the source files of path as config.Load does.
func configFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	var files []string
	for _, pat := range []string{"*.yaml", "*.yml"} {
		m, err := filepath.Glob(filepath.Join(path, pat))
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", path, err)
		}
		files = append(files, m...)
	}
	sort.Strings(files)
	return files, nil
}
