package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// A pattern source names many tables: its source.table has a * in the table
// part (public.*, sales.order_*), source.exclude lists patterns it does not
// take, and its sink.table has a * that each matched table's name replaces.
// The daemon and the CLI match the pattern against the source catalog and
// run each matched table as its own source (ForTable).

// IsPattern reports whether source.table is a pattern of tables.
func (c *Config) IsPattern() bool { return strings.Contains(c.Source.Ident.Name, "*") }

// Match reports whether the pattern source c takes table t: t is in the
// pattern's schema, its name matches, and no source.exclude pattern
// matches it (an exclude without a schema is in the pattern's schema).
func (c *Config) Match(t Table) bool {
	p := c.Source.Ident
	if p.Schema != t.Schema || !Glob(p.Name, t.Name) {
		return false
	}
	return !c.excluded(t) && !c.Tables[t.Name].Exclude
}

// excluded reports whether a source.exclude pattern matches t.
func (c *Config) excluded(t Table) bool {
	for _, x := range c.Source.excludes {
		if x.Schema == t.Schema && Glob(x.Name, t.Name) {
			return true
		}
	}
	return false
}

func excludeTable(e, schema string) Table {
	x, _ := ParseTable(e)
	if parts, err := splitQualified(e); err == nil && len(parts) == 1 {
		x.Schema = schema
	}
	return x
}

// Glob reports whether name matches pattern, where * stands for any run of
// characters (none included) and every other character for itself.
func Glob(pattern, name string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == name
	}
	if !strings.HasPrefix(name, parts[0]) {
		return false
	}
	name = name[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(name, p)
		if i < 0 {
			return false
		}
		name = name[i+len(p):]
	}
	return len(name) >= len(last) && strings.HasSuffix(name, last)
}

// MemberName is the name of the source that pattern source name makes for
// the table called table: NAME.TABLE.
func MemberName(name, table string) string { return name + "." + table }

// SinkFor is the sink table of the pattern source c for table t: sink.table
// with its * replaced by t's name.
func (c *Config) SinkFor(t Table) string { return c.sinkFor(t).String() }

func (c *Config) sinkFor(t Table) Table {
	sink := c.Sink.Ident
	sink.Name = strings.ReplaceAll(sink.Name, "*", t.Name)
	return sink
}

// Named is the source of the pattern source c for table t as far as the
// file goes (its name, source table and sink table, and the settings of
// t's tables entry), for commands that read only the state file; ForTable
// makes the one a run uses, with what the catalog says (the key, the
// cursor's tie-breaker).
func (c *Config) Named(t Table) *Config {
	n := *c
	n.Pattern = c.Name
	n.Name = MemberName(c.Name, t.Name)
	n.Source.Table, n.Source.Ident = t.String(), t
	n.Source.Exclude, n.Source.excludes = nil, nil
	n.Tables = nil
	n.Sink.Ident = c.sinkFor(t)
	n.Sink.Table = n.Sink.Ident.String()
	n.Source.Cursor = slices.Clone(c.Source.Cursor)
	n.Source.Columns = slices.Clone(c.Source.Columns)
	n.Sink.Key = slices.Clone(c.Sink.Key)
	if o, ok := c.Tables[t.Name]; ok {
		n.override(t.Name, o)
	}
	return &n
}

// ForTable returns the source that the pattern source c makes for table t:
// named NAME.TABLE, reading t, writing sink.table with its * replaced by
// t's name, keyed by key when sink.key is not given. Everything else (the
// cursor, the columns, the schedule, the file and its lines) is c's, but
// for what the tables entry of t sets: its errors name the entry's line.
func (c *Config) ForTable(t Table, key []string) (*Config, error) {
	n := c.Named(t)
	if !nameRE.MatchString(n.Name) {
		return nil, fmt.Errorf("its source name %q would not be a valid name (letters, digits, '.', '_' and '-' only, at most 128); exclude it in source.exclude", n.Name)
	}
	if n.Mode == ModeAuto {
		n.Mode = ModeCursor // Expand turns a table without a usable cursor to ModeCompare (AsCompare)
	}
	if len(n.Sink.Key) == 0 {
		if len(key) == 0 {
			return nil, fmt.Errorf("it has no primary key and sink.key is not given; add a primary key, give sink.key, or give it a key under tables (tables: {%s: {key: [...]}})", t.Name)
		}
		n.Sink.Key = slices.Clone(key)
	}
	if len(n.Source.Columns) > 0 {
		for _, col := range n.Sink.Key {
			if !slices.Contains(n.Source.Columns, col) {
				return nil, fmt.Errorf("its key column %q is not listed in source.columns", col)
			}
		}
	}
	return n, nil
}

// AsCompare returns the source c (made by ForTable) in compare mode: no
// cursor, no lookback; why says why it is not read by the cursor.
func (c *Config) AsCompare(why string) *Config {
	n := *c
	n.Mode = ModeCompare
	n.CompareWhy = why
	n.Source.Cursor = nil
	n.Source.Lookback = Duration{}
	return &n
}

// override applies the tables entry o of table name to c, a source made
// from a pattern source: each key it sets replaces the pattern's, and the
// pattern's key is then reported at the entry's line.
func (c *Config) override(name string, o TableSettings) {
	lines := make(map[string]int, len(c.Lines))
	for k, v := range c.Lines {
		lines[k] = v
	}
	c.Lines = lines
	entry := "tables." + name
	set := func(key, sub string) {
		if line, ok := lines[entry+"."+sub]; ok {
			lines[key] = line
		}
	}
	if len(o.Cursor) > 0 {
		c.Source.Cursor = slices.Clone(o.Cursor)
		c.CursorNote = "set by " + entry + ".cursor"
		set("source.cursor", "cursor")
	}
	if len(o.Columns) > 0 {
		c.Source.Columns = slices.Clone(o.Columns)
		set("source.columns", "columns")
	}
	if len(o.Key) > 0 {
		c.Sink.Key = slices.Clone(o.Key)
		set("sink.key", "key")
	}
	if o.Where != "" {
		c.Source.Where = o.Where
		set("source.where", "where")
	}
	if o.DeletedColumn != "" {
		c.Source.DeletedColumn = o.DeletedColumn
		set("source.deleted_column", "deleted_column")
	}
	if o.Schedule != "" {
		c.Schedule = o.Schedule
		set("schedule", "schedule")
	}
}

// checkTables checks a pattern source's tables entries against what
// needs no database: each names a table the pattern takes, with good keys.
// An entry for a table the catalog lacks is only a warning (Unmatched).
func (c *Config) checkTables() error {
	if len(c.Tables) == 0 {
		return nil
	}
	if !c.IsPattern() {
		return c.Errorf("tables", "only a pattern source.table (such as public.*) takes tables; give these settings in source and sink")
	}
	names := make([]string, 0, len(c.Tables))
	for name := range c.Tables {
		names = append(names, name)
	}
	slices.Sort(names)
	p := c.Source.Ident
	for _, name := range names {
		o := c.Tables[name]
		entry := "tables." + name
		t := Table{Schema: p.Schema, Name: name}
		if !Glob(p.Name, name) {
			return c.Errorf(entry, "table %s is not matched by source.table %s; name a table the pattern matches (the table's name only, without its schema)", t, c.Source.Table)
		}
		if c.excluded(t) {
			return c.Errorf(entry, "table %s is excluded by source.exclude; remove it from source.exclude or drop this entry", t)
		}
		for _, l := range []struct {
			key  string
			cols []string
		}{{"cursor", o.Cursor}, {"key", o.Key}, {"columns", o.Columns}} {
			if err := c.names(entry+"."+l.key, l.cols); err != nil {
				return err
			}
		}
		if o.Exclude {
			for _, k := range []string{"cursor", "key", "columns", "where", "deleted_column", "schedule"} {
				if _, set := c.Lines[entry+"."+k]; set {
					return c.Errorf(entry+".exclude", "the table is excluded, so its %s is never used; remove one", k)
				}
			}
			continue
		}
		if o.Schedule != "" {
			if _, err := cronParser.Parse(o.Schedule); err != nil {
				return c.Errorf(entry+".schedule", "%q is not a cron schedule (%v); use five fields, @hourly or @every 30s", o.Schedule, err)
			}
		}
		if strings.Contains(o.Where, ":as_of") {
			return c.Errorf(entry+".where", ":as_of is bound only for a coupon_grants sink")
		}
		cursor, columns, deleted := cmpSlice(o.Cursor, c.Source.Cursor), cmpSlice(o.Columns, c.Source.Columns), cmp.Or(o.DeletedColumn, c.Source.DeletedColumn)
		if len(columns) > 0 {
			key := entry + ".columns"
			if _, set := c.Lines[key]; !set {
				key = entry + ".cursor"
			}
			for _, col := range cursor {
				if !slices.Contains(columns, col) {
					return c.Errorf(key, "cursor column %q must be listed in the columns of table %s", col, name)
				}
			}
			if deleted != "" && !slices.Contains(columns, deleted) {
				return c.Errorf(key, "deleted column %q must be listed in the columns of table %s", deleted, name)
			}
		}
	}
	return nil
}

// cmpSlice is a when it has items, else b.
func cmpSlice(a, b []string) []string {
	if len(a) > 0 {
		return a
	}
	return b
}

// Unmatched lists the tables entries of the pattern source c that name no
// table of tables (the pattern's matches in the catalog, excluded ones
// included), each with its file and line: a misspelt name is otherwise
// silently unused.
func (c *Config) Unmatched(tables []string) []string {
	var out []string
	for name := range c.Tables {
		if !slices.Contains(tables, name) {
			out = append(out, fmt.Sprintf("%s:%d: tables.%s: no table %s in the source database; check the name (a table created later takes these settings)",
				c.File, c.Lines["tables."+name], name, Table{Schema: c.Source.Ident.Schema, Name: name}))
		}
	}
	slices.Sort(out)
	return out
}

// checkPattern checks source.table, source.exclude and sink.table for
// patterns: a * only in the table part, in sink.table only with a pattern
// source.table, and then exactly one.
func (c *Config) checkPattern() error {
	src := c.Source.Ident
	if strings.Contains(src.Schema, "*") {
		return c.Errorf("source.table", "%q: a pattern matches tables of one schema; write schema.pattern, for example public.*", c.Source.Table)
	}
	pattern := strings.Contains(src.Name, "*")
	if len(c.Source.Exclude) > 0 && !pattern {
		return c.Errorf("source.exclude", "only a pattern source.table (such as public.*) takes exclude; remove it or make source.table a pattern")
	}
	for i, e := range c.Source.Exclude {
		key := fmt.Sprintf("source.exclude[%d]", i)
		x, err := ParseTable(e)
		if err != nil {
			return c.Errorf(key, "%v", err)
		}
		if strings.Contains(x.Schema, "*") {
			return c.Errorf(key, "%q: the schema part cannot be a pattern", e)
		}
		c.Source.excludes = append(c.Source.excludes, excludeTable(e, src.Schema))
	}
	sink := c.Sink.Ident
	if strings.Contains(sink.Schema, "*") {
		return c.Errorf("sink.table", "%q: the schema part cannot contain *", c.Sink.Table)
	}
	stars := strings.Count(sink.Name, "*")
	switch {
	case stars > 0 && !pattern:
		return c.Errorf("sink.table", "%q has a * but source.table %q is one table; make source.table a pattern (such as public.*) or name one sink table", c.Sink.Table, c.Source.Table)
	case pattern && stars != 1:
		return c.Errorf("sink.table", "%q: a pattern source.table writes each table to its own copy; put one * where the table's name goes, for example copy.* or public.*_copy", c.Sink.Table)
	case pattern && c.Sink.Type == SinkCouponGrants:
		return c.Errorf("source.table", "a coupon_grants sink reads one table; name it instead of a pattern")
	}
	return nil
}
