package daemon

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgpool"
	"github.com/syncd/syncd/ops"
	syncsource "github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// patternMetrics are the series of pattern sources, labelled by the
// pattern source's name (each table's runs have their own series under
// its own NAME.TABLE).
type patternMetrics struct {
	tables    *prometheus.GaugeVec // by state: synced, skipped
	failed    *prometheus.GaugeVec
	matches   *prometheus.CounterVec // by catalog: unchanged, changed
	described *prometheus.CounterVec
}

func newPatternMetrics(reg prometheus.Registerer) *patternMetrics {
	m := &patternMetrics{
		tables: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_pattern_tables",
			Help: "Tables a pattern source matched at its last match, by state: synced (each runs as source NAME.TABLE) or skipped (cannot be synced; the log says why).",
		}, []string{"source", "state"}),
		failed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_pattern_match_failed",
			Help: "1 when the last match of a pattern source against its catalog failed (its tables keep running as they were), else 0.",
		}, []string{"source"}),
	}
	m.matches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncd_pattern_matches_total",
		Help: "Matches of a pattern source against its catalog that succeeded, by catalog: unchanged (no table described: every table's catalog fingerprint was the last match's) or changed (some tables described again).",
	}, []string{"source", "catalog"})
	m.described = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncd_pattern_tables_described_total",
		Help: "Tables the matches of a pattern source described (read their columns, keys and cursor from the catalog): new tables and tables whose catalog changed since the last match.",
	}, []string{"source"})
	reg.MustRegister(m.tables, m.failed, m.matches, m.described)
	return m
}

// expandTimeout bounds one match of a pattern against its catalog.
const expandTimeout = time.Minute

// pattern is a pattern source (source.table such as public.*): on its
// schedule, at start and at each reload it is matched against the source
// catalog again (Options.Expand), each matched table runs as its own
// source, and a table that no longer matches stops being scheduled.
type pattern struct {
	cfg     *config.Config
	entry   entryID
	members map[string]bool   // names of the sources it made
	skipped map[string]string // table source name -> reason last logged
	// recorded is the skipped list last written to the state file (nil:
	// none written by this process yet).
	recorded []watermark.SkippedTable
	empty    bool // the last match found no table (logged once)
	// cache keeps what the last match found, by table, under the tables'
	// catalog fingerprints: a tick describes only the tables that changed.
	cache *syncsource.MatchCache
	log   *slog.Logger
}

// addPattern schedules a pattern source and matches it now, in the
// background (a slow catalog must not hold up the daemon's start).
func (d *daemon) addPattern(c *config.Config) {
	p := &pattern{cfg: c, members: map[string]bool{}, skipped: map[string]string{}, cache: &syncsource.MatchCache{}, log: d.log.With("source", c.Name)}
	d.pmu.Lock()
	d.patterns[c.Name] = p
	d.pmu.Unlock()
	d.schedulePattern(p)
	if d.begin() {
		go func() {
			defer d.jobDone()
			d.expand(c.Name)
		}()
	}
}

func (d *daemon) schedulePattern(p *pattern) {
	name := p.cfg.Name
	id, err := d.cron.addSpread(p.cfg.Schedule, name+"\x00match", func() {
		if d.begin() {
			defer d.jobDone()
			d.expand(name)
		}
	})
	if err != nil {
		p.log.Error("schedule not usable; new tables of this pattern source are not picked up", "schedule", p.cfg.Schedule, "err", err)
		return
	}
	d.pmu.Lock()
	p.entry = id
	d.pmu.Unlock()
}

// removePattern stops a pattern source and every source it made.
func (d *daemon) removePattern(name string) {
	d.emu.Lock()
	defer d.emu.Unlock()
	d.pmu.Lock()
	p, ok := d.patterns[name]
	delete(d.patterns, name)
	d.pmu.Unlock()
	if !ok {
		return
	}
	d.cron.remove(p.entry)
	d.apply(p, nil)
	d.pm.tables.DeletePartialMatch(prometheus.Labels{"source": name})
	d.pm.failed.DeletePartialMatch(prometheus.Labels{"source": name})
	d.pm.matches.DeletePartialMatch(prometheus.Labels{"source": name})
	d.pm.described.DeletePartialMatch(prometheus.Labels{"source": name})
	d.m.RemovePattern(name)
}

// replacePattern gives a pattern source a changed config and matches it again.
func (d *daemon) replacePattern(c *config.Config) {
	d.pmu.Lock()
	p := d.patterns[c.Name]
	p.cfg = c
	d.pmu.Unlock()
	d.cron.remove(p.entry)
	d.schedulePattern(p)
	d.expand(c.Name)
}

// expand matches the pattern source name against its catalog and applies
// the result. A catalog that cannot be read leaves the tables as they were.
func (d *daemon) expand(name string) {
	d.emu.Lock()
	defer d.emu.Unlock()
	d.pmu.Lock()
	p, ok := d.patterns[name]
	var cfg *config.Config
	if ok {
		cfg = p.cfg
	}
	d.pmu.Unlock()
	if !ok || d.o.Expand == nil {
		return
	}
	d.mu.Lock()
	d.matching[name]++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		if d.matching[name]--; d.matching[name] == 0 {
			delete(d.matching, name)
		}
		d.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(d.stopCtx, expandTimeout)
	// A match writes nothing: the stop interrupts it rather than wait.
	go func() {
		select {
		case <-d.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	// The match borrows a session of the runs' pool: an unchanged catalog
	// costs its fingerprint query and the session's reset, no new session.
	e, err := d.o.Expand(pgpool.With(ctx, d.pool), cfg, p.cache)
	cancel()
	members, skipped := e.Members, e.Skipped
	if err != nil && d.stopped() {
		return
	}
	if err != nil {
		d.pm.failed.WithLabelValues(name).Set(1)
		p.log.Error("pattern source not matched against its catalog; its tables keep running as they were, and the next tick tries again", "table", cfg.Source.Table, "err", err)
		return
	}
	d.pm.failed.WithLabelValues(name).Set(0)
	catalog := "unchanged"
	if e.Described > 0 {
		catalog = "changed"
	}
	d.pm.described.WithLabelValues(name).Add(float64(e.Described))
	d.pm.matches.WithLabelValues(name, catalog).Inc()
	p.log.Debug("pattern source matched against its catalog", "catalog", catalog, "described", e.Described, "tables", len(members)+len(skipped))
	d.pmu.Lock()
	current := d.patterns[name] == p && p.cfg == cfg
	d.pmu.Unlock()
	if !current {
		return // removed or replaced meanwhile
	}
	next := map[string]*config.Config{}
	for _, m := range members {
		next[m.Name] = m
	}
	reasons := map[string]string{}
	for _, s := range skipped {
		reasons[s.Name] = s.String()
	}
	d.mu.Lock()
	for n, m := range next {
		if s, taken := d.sources[n]; taken && s.config().Pattern != name {
			why := "the name is already used by another source; rename one or exclude the table in source.exclude"
			reasons[n] = "source " + n + " skipped: " + why
			skipped = append(skipped, syncsource.Skipped{Name: n, Table: m.Source.Ident, Reason: why, Code: syncsource.SkipNameTaken})
			delete(next, n)
		}
	}
	d.mu.Unlock()
	d.recordSkipped(p, skipped)
	// A table's reason is logged when it first appears or changes, not at
	// every tick; status and validate show it meanwhile.
	for n, r := range reasons {
		if p.skipped[n] != r {
			p.log.Error("a table matched by the pattern cannot be synced and is skipped; fix it or add it to source.exclude", "table_source", n, "reason", r)
		}
	}
	if empty := len(members)+len(skipped) == 0; empty && !p.empty {
		p.log.Warn("pattern source matches no table; check source.table and source.exclude (new tables are picked up at the next tick)", "table", cfg.Source.Table)
	}
	p.empty = len(members)+len(skipped) == 0
	p.skipped = reasons
	d.pm.tables.WithLabelValues(name, "synced").Set(float64(len(next)))
	d.pm.tables.WithLabelValues(name, "skipped").Set(float64(len(reasons)))
	d.apply(p, next)
}

// apply makes the sources of pattern p the ones in next: new ones start,
// changed ones take their new config from their next run, and the ones no
// longer matched stop being scheduled (a run in flight finishes).
func (d *daemon) apply(p *pattern, next map[string]*config.Config) {
	var added, changed, removed []string
	for n := range p.members {
		if _, ok := next[n]; ok {
			continue
		}
		d.mu.Lock()
		s := d.sources[n]
		delete(d.sources, n)
		d.mu.Unlock()
		delete(p.members, n)
		if s != nil {
			s.unschedule()
		}
		removed = append(removed, n)
	}
	for n, c := range next {
		d.mu.Lock()
		s, ok := d.sources[n]
		d.mu.Unlock()
		switch {
		case !ok:
			added = append(added, n)
			p.members[n] = true
			d.add(c)
		case s.update(c):
			changed = append(changed, n)
		}
	}
	if len(added)+len(changed)+len(removed) == 0 {
		return
	}
	sort.Strings(added)
	sort.Strings(changed)
	sort.Strings(removed)
	p.log.Info("pattern source matched", "table", p.cfg.Source.Table, "added", added, "changed", changed, "removed", removed, "tables", len(p.members))
}

// recordSkipped shows the tables a match of pattern p skipped as the
// series syncd_pattern_table_skipped and records them in the state file
// for status (when they changed, or first in this process: a tick that
// finds the same tables writes nothing).
func (d *daemon) recordSkipped(p *pattern, skipped []syncsource.Skipped) {
	name := p.cfg.Name
	list := ops.Skipped(skipped)
	reasons := map[string]string{}
	for _, s := range list {
		reasons[s.Table] = s.Reason
	}
	d.m.PatternSkipped(name, reasons)
	if p.recorded != nil && slices.Equal(p.recorded, list) {
		return
	}
	if err := ops.RecordMatch(d.o.Store, name, time.Now(), list); err != nil {
		p.log.Error("the tables the pattern skips are not recorded in the state file; status may show an older list", "err", err)
		return
	}
	p.recorded = list
}

// patternNames lists the pattern sources, sorted.
func (d *daemon) patternNames() []string {
	d.pmu.Lock()
	defer d.pmu.Unlock()
	out := make([]string, 0, len(d.patterns))
	for n := range d.patterns {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// stopped reports whether the stop has begun.
func (d *daemon) stopped() bool {
	select {
	case <-d.stop:
		return true
	default:
		return false
	}
}
