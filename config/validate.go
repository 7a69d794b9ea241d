package config

import (
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Defaults applied when a key is absent.
const (
	DefaultPageSize = 1000
	// DefaultPageBytes is source.page_bytes when unset: a page of rows of
	// any width holds at most this much (or one row), which bounds the
	// memory of a run to a few times it (docs/HOW-IT-WORKS.md, "Memory").
	DefaultPageBytes = 16 << 20
	// MinPageBytes and MaxPageBytes bound source.page_bytes.
	MinPageBytes = 64 << 10
	MaxPageBytes = 1 << 30
	// DefaultGrantPageSize is the targets one grant page of a coupon
	// campaign grants when sink.grant_page_size is not set: the grants are
	// inserted by one statement on the sink's server (no key travels
	// through syncd, so the size costs no memory), and each page is one
	// durable commit, so pages of tiny grant rows are large.
	DefaultGrantPageSize = 50_000
	DefaultLookback      = 5 * time.Second
	// DefaultFirstLoadChunk and DefaultFirstLoadMinTable are the defaults
	// of source.first_load.chunk_size and min_table_size; a first load
	// runs at most MaxFirstLoadWorkers workers unless first_load.workers
	// says more. A chunk is 64 MB, not less: each chunk ends with the
	// source idle while the sink drains what the sockets buffered (about
	// 100-150 ms at 1M rows on two cores), so 16 MB chunks cost a first
	// load about 1 s of 5 (docs/BENCHMARKS.md, "First-load chunk size").
	DefaultFirstLoadChunk    = 64 << 20
	DefaultFirstLoadMinTable = 16 << 20
	MaxFirstLoadWorkers      = 4
	DefaultSchedule          = "@every 1m"

	DefaultLockTimeout      = 30 * time.Second
	DefaultStatementTimeout = 10 * time.Minute
	DefaultPageTimeout      = 10 * time.Minute
)

// maxTimeout is the largest lock_timeout or statement_timeout PostgreSQL
// takes (INT_MAX milliseconds).
const maxTimeout = 2147483647 * time.Millisecond

// cronParser parses every schedule syncd accepts: five fields, descriptors
// such as @hourly and @every 30s, and an optional CRON_TZ= prefix.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ScheduleParser is the parser of schedule and reconcile.schedule: a
// scheduler that runs the schedules of loaded configs must parse them with it.
func ScheduleParser() cron.ScheduleParser { return cronParser }

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// finish is the pipeline after the strict decode (which expands ${VAR}
// references): defaults for the keys left out, then normalisation (the
// DSNs read from their files, table names parsed into Ident) together with
// every check that needs no database, in the order of the file.
func (c *Config) finish() error {
	c.defaults()
	return c.check()
}

// defaults fills the keys left out or empty. The defaults that depend on
// other keys (sink.key is the last cursor column; a coupon campaign has no
// lookback) are set by check once those keys are known to be good.
func (c *Config) defaults() {
	if c.Schedule == "" {
		c.Schedule = DefaultSchedule
	}
	if c.SchemaChanges == "" {
		c.SchemaChanges = SchemaEvolve
	}
	if c.Mode == "" {
		c.Mode = ModeCursor
	}
	s := &c.Source
	if _, ok := c.Lines["source.lookback"]; !ok && c.Mode != ModeCompare {
		s.Lookback = Duration{DefaultLookback}
	}
	if _, ok := c.Lines["source.page_size"]; !ok && s.PageSize == 0 {
		s.PageSize = DefaultPageSize
	}
	if s.Bound == "" {
		s.Bound = BoundAll
	}
	if c.Sink.Type == "" {
		c.Sink.Type = SinkPostgres
	}
}

// check normalises and checks everything that needs no database; the
// first problem is the error.
func (c *Config) check() error {
	if c.Name == "" {
		return c.Errorf("name", "missing; every source file needs a unique name")
	}
	if !nameRE.MatchString(c.Name) {
		return c.Errorf("name", "%q: use letters, digits, '.', '_' and '-' only (at most 128)", c.Name)
	}
	if _, err := cronParser.Parse(c.Schedule); err != nil {
		return c.Errorf("schedule", "%q is not a cron schedule (%v); use five fields, @hourly or @every 30s", c.Schedule, err)
	}
	if c.Reconcile != nil {
		if err := c.checkReconcile(); err != nil {
			return err
		}
	}
	switch c.SchemaChanges {
	case SchemaEvolve, SchemaFail:
	default:
		return c.Errorf("schema_changes", "%q: use %s or %s", c.SchemaChanges, SchemaEvolve, SchemaFail)
	}
	if err := c.checkMode(); err != nil {
		return err
	}
	if err := c.checkSource(); err != nil {
		return err
	}
	if err := c.checkSink(); err != nil {
		return err
	}
	if err := c.checkPattern(); err != nil {
		return err
	}
	return c.checkTables()
}

func (c *Config) checkSource() error {
	s := &c.Source
	dsn, err := c.secret("source.dsn", s.DSN, "source.dsn_file", s.DSNFile)
	if err != nil {
		return err
	}
	s.DSN = dsn
	if s.Table == "" {
		return c.Errorf("source.table", "missing; name the table to read, for example public.orders")
	}
	t, err := ParseTable(s.Table)
	if err != nil {
		return c.Errorf("source.table", "%v", err)
	}
	s.Ident = t
	if len(s.Cursor) == 0 && c.Mode != ModeCompare {
		return c.Errorf("source.cursor", "missing; list the ordering columns ending with a unique one, for example [updated_at, id]")
	}
	if err := c.names("source.cursor", s.Cursor); err != nil {
		return err
	}
	if err := c.names("source.columns", s.Columns); err != nil {
		return err
	}
	if len(s.Columns) > 0 {
		for _, col := range s.Cursor {
			if !slices.Contains(s.Columns, col) {
				return c.Errorf("source.columns", "cursor column %q must be listed in columns", col)
			}
		}
		if s.DeletedColumn != "" && !slices.Contains(s.Columns, s.DeletedColumn) {
			return c.Errorf("source.deleted_column", "%q must be listed in source.columns", s.DeletedColumn)
		}
	}
	if s.PageSize == 0 {
		return c.Errorf("source.page_size", "must be at least 1")
	}
	if s.PageSize < 1 || s.PageSize > 1_000_000 {
		return c.Errorf("source.page_size", "%d is out of range; use 1 to 1000000", s.PageSize)
	}
	if _, set := c.Lines["source.page_bytes"]; !set {
		s.PageBytes = Size{DefaultPageBytes}
	}
	if s.PageBytes.Bytes < MinPageBytes || s.PageBytes.Bytes > MaxPageBytes {
		return c.Errorf("source.page_bytes", "%s is out of range; use %s to %s, for example 32MB", s.PageBytes, Size{MinPageBytes}, Size{MaxPageBytes})
	}
	switch s.Bound {
	case BoundAll, BoundWriters, BoundOff:
	default:
		return c.Errorf("source.bound", "%q: use %s, %s or %s", s.Bound, BoundAll, BoundWriters, BoundOff)
	}
	return c.checkFirstLoad()
}

// checkMode checks mode against the keys it changes the meaning of: a
// source in compare mode reads no cursor, so it takes neither
// source.cursor nor source.lookback; auto is for pattern sources.
func (c *Config) checkMode() error {
	switch c.Mode {
	case ModeCursor:
	case ModeCompare:
		if len(c.Source.Cursor) > 0 {
			return c.Errorf("source.cursor", "mode: compare reads no cursor (each run compares the whole table); remove source.cursor, or use mode: cursor")
		}
		if _, set := c.Lines["source.lookback"]; set {
			return c.Errorf("source.lookback", "mode: compare reads no cursor, so there is nothing to look back from; remove source.lookback")
		}
		if c.Sink.Type == SinkCouponGrants {
			return c.Errorf("mode", "a coupon_grants sink grants by its frozen target set; remove mode: compare")
		}
	case ModeAuto:
		if !strings.Contains(c.Source.Table, "*") {
			return c.Errorf("mode", "auto is for a pattern source.table (such as public.*): it picks a mode per table; for one table use mode: cursor or mode: compare")
		}
	default:
		return c.Errorf("mode", "%q: use %s, %s or (for a pattern source) %s", c.Mode, ModeCursor, ModeCompare, ModeAuto)
	}
	return nil
}

// checkReconcile checks the daemon's reconcile schedules: the full
// reconcile's, the key check's (a table copy's, not in compare mode), or
// both.
func (c *Config) checkReconcile() error {
	r := c.Reconcile
	if r.Schedule == "" && r.KeysSchedule == "" {
		return c.Errorf("reconcile.schedule", "missing; say when the daemon reconciles, for example \"0 3 * * *\" (or only checks the keys: reconcile.keys_schedule)")
	}
	if _, err := cronParser.Parse(r.Schedule); r.Schedule != "" && err != nil {
		return c.Errorf("reconcile.schedule", "%q is not a cron schedule (%v)", r.Schedule, err)
	}
	if r.KeysSchedule == "" {
		return nil
	}
	if _, err := cronParser.Parse(r.KeysSchedule); err != nil {
		return c.Errorf("reconcile.keys_schedule", "%q is not a cron schedule (%v)", r.KeysSchedule, err)
	}
	switch {
	case c.Sink.Type == SinkCouponGrants:
		return c.Errorf("reconcile.keys_schedule", "the key check is a table copy's; a coupon campaign's reconcile compares targets with grants: remove it")
	case c.Mode == ModeCompare:
		return c.Errorf("reconcile.keys_schedule", "mode: compare: each run compares every row and deletes the copy's extra rows itself; remove it")
	}
	return nil
}

// checkFirstLoad fills and checks source.first_load.
func (c *Config) checkFirstLoad() error {
	f := &c.Source.FirstLoad
	if f.Workers == nil {
		w := min(MaxFirstLoadWorkers, max(1, runtime.NumCPU()))
		f.Workers = &w
	}
	if *f.Workers < 0 || *f.Workers > 64 {
		return c.Errorf("source.first_load.workers", "%d is out of range; use 0 (no first load) to 64", *f.Workers)
	}
	if _, set := c.Lines["source.first_load.chunk_size"]; !set {
		f.ChunkSize = Size{DefaultFirstLoadChunk}
	}
	if f.ChunkSize.Bytes < 8192 {
		return c.Errorf("source.first_load.chunk_size", "%s is below one 8kB page; use for example 16MB", f.ChunkSize)
	}
	if _, set := c.Lines["source.first_load.min_table_size"]; !set {
		f.MinTableSize = Size{DefaultFirstLoadMinTable}
	}
	return nil
}

func (c *Config) checkSink() error {
	k := &c.Sink
	own, registered := c.sinks[k.Type]
	if registered && own.NoDSN {
		for _, key := range []string{"sink.dsn", "sink.dsn_file"} {
			if _, set := c.Lines[key]; set {
				return c.Errorf(key, "a %s sink connects to no database; remove it", k.Type)
			}
		}
	} else {
		dsn, err := c.secret("sink.dsn", k.DSN, "sink.dsn_file", k.DSNFile)
		if err != nil {
			return err
		}
		k.DSN = dsn
	}
	if k.Table == "" {
		return c.Errorf("sink.table", "missing; name the table to write, for example public.orders_copy")
	}
	t, err := ParseTable(k.Table)
	if err != nil {
		return c.Errorf("sink.table", "%v", err)
	}
	k.Ident = t
	if err := c.names("sink.key", k.Key); err != nil {
		return err
	}
	if err := c.finishTimeouts(); err != nil {
		return err
	}
	asOf := strings.Contains(c.Source.Where, ":as_of")
	switch k.Type {
	case SinkPostgres:
		// A pattern source without sink.key is keyed by each matched
		// table's primary key (ForTable).
		// So is a source in compare mode (source.KeyOf, when it opens).
		if len(k.Key) == 0 && !c.IsPattern() && !c.Compare() {
			k.Key = []string{c.Source.Cursor[len(c.Source.Cursor)-1]}
		}
		if len(c.Source.Columns) > 0 {
			for _, col := range k.Key {
				if !slices.Contains(c.Source.Columns, col) {
					return c.Errorf("sink.key", "key column %q must be listed in source.columns", col)
				}
			}
		}
		if k.Campaign != "" {
			return c.Errorf("sink.campaign", "only a coupon_grants sink has a campaign; remove it or set sink.type: coupon_grants")
		}
		if asOf {
			return c.Errorf("source.where", ":as_of is bound only for a coupon_grants sink")
		}
		if _, ok := c.Lines["sink.grant_page_size"]; ok {
			return c.Errorf("sink.grant_page_size", "only a coupon_grants sink has grant pages; remove it (source.page_size sizes a table copy's pages)")
		}
		if k.KeepDeleted && c.Source.DeletedColumn == "" {
			return c.Errorf("sink.keep_deleted", "needs source.deleted_column to know which rows are deleted")
		}
	case SinkCouponGrants:
		if k.Campaign == "" {
			return c.Errorf("sink.campaign", "missing; a coupon_grants sink needs the campaign name")
		}
		if !nameRE.MatchString(k.Campaign) {
			return c.Errorf("sink.campaign", "%q: use letters, digits, '.', '_' and '-' only", k.Campaign)
		}
		if len(k.Key) == 0 {
			k.Key = slices.Clone(c.Source.Cursor)
		}
		if !slices.Equal(k.Key, c.Source.Cursor) {
			return c.Errorf("sink.key", "a coupon_grants sink is keyed by the source cursor %v; remove sink.key or make it equal", c.Source.Cursor)
		}
		if _, ok := c.Lines["source.lookback"]; !ok {
			c.Source.Lookback = Duration{}
		}
		if c.Source.Lookback.Duration != 0 {
			return c.Errorf("source.lookback", "a coupon campaign reads a frozen target set; remove lookback")
		}
		if k.KeepDeleted || c.Source.DeletedColumn != "" {
			return c.Errorf("sink.keep_deleted", "soft deletes do not apply to coupon grants")
		}
		if _, ok := c.Lines["sink.grant_page_size"]; !ok {
			k.GrantPageSize = DefaultGrantPageSize
			// A campaign file written before grant_page_size keeps the
			// page size it asked for.
			if _, set := c.Lines["source.page_size"]; set {
				k.GrantPageSize = c.Source.PageSize
			}
		}
		if k.GrantPageSize < 1 || k.GrantPageSize > 1_000_000 {
			return c.Errorf("sink.grant_page_size", "%d is out of range; use 1 to 1000000", k.GrantPageSize)
		}
	default:
		if !registered {
			return c.Errorf("sink.type", "%q: use %s", k.Type, sinkTypes(c.sinks))
		}
		if len(k.Key) == 0 && !c.IsPattern() && !c.Compare() {
			k.Key = []string{c.Source.Cursor[len(c.Source.Cursor)-1]}
		}
		return c.checkOwnSink(own)
	}
	return nil
}

// finishTimeouts applies the defaults of the sink's timeouts and checks
// them: each is 0 (no limit) or a whole number of milliseconds PostgreSQL
// takes, and a page's deadline leaves room for the lock wait inside it, so
// that a locked copy is reported as locked rather than as a slow page.
func (c *Config) finishTimeouts() error {
	k := &c.Sink
	for _, t := range []struct {
		key string
		d   *Duration
		def time.Duration
	}{
		{"sink.lock_timeout", &k.LockTimeout, DefaultLockTimeout},
		{"sink.statement_timeout", &k.StatementTimeout, DefaultStatementTimeout},
		{"sink.page_timeout", &k.PageTimeout, DefaultPageTimeout},
	} {
		if _, ok := c.Lines[t.key]; !ok {
			t.d.Duration = t.def
		}
		d := t.d.Duration
		switch {
		case d == 0:
		case d < time.Millisecond || d%time.Millisecond != 0:
			return c.Errorf(t.key, "%s: use whole milliseconds (at least 1ms), or 0 for no limit", d)
		case d > maxTimeout:
			return c.Errorf(t.key, "%s is more than PostgreSQL takes (%s); use less, or 0 for no limit", d, maxTimeout)
		}
	}
	if l, p := k.LockTimeout.Duration, k.PageTimeout.Duration; p > 0 && (l == 0 || l >= p) {
		lock := l.String()
		if l == 0 {
			lock = "0 (no limit)"
		}
		key := "sink.lock_timeout"
		if _, ok := c.Lines[key]; !ok {
			key = "sink.page_timeout"
		}
		return c.Errorf(key, "sink.lock_timeout %s is not shorter than sink.page_timeout %s: a page blocked by another session's lock would hit its deadline first, reported as a slow page; make sink.lock_timeout shorter than sink.page_timeout", lock, p)
	}
	return nil
}

// DSNKey is the key a side's ("source" or "sink") connection string was
// given with: SIDE.dsn_file when it was read from a file, else SIDE.dsn.
// Errors about the connection name it, at its line.
func (c *Config) DSNKey(side string) string {
	file := c.Source.DSNFile
	if side == "sink" {
		file = c.Sink.DSNFile
	}
	if file != "" {
		return side + ".dsn_file"
	}
	return side + ".dsn"
}

// checkDSNs runs check (when set) on both connection strings.
func (c *Config) checkDSNs(check func(string) error) error {
	if check == nil || c.noSecrets {
		return nil
	}
	for _, side := range []struct{ name, dsn string }{{"source", c.Source.DSN}, {"sink", c.Sink.DSN}} {
		if side.name == "sink" && c.sinks[c.Sink.Type].NoDSN {
			continue
		}
		if err := check(side.dsn); err != nil {
			return c.ErrorAt(c.DSNKey(side.name), err)
		}
	}
	return nil
}

// secret returns the DSN from the inline key or from the file named by fileKey.
func (c *Config) secret(key, inline, fileKey, file string) (string, error) {
	switch {
	case c.noSecrets:
		return inline, nil
	case inline != "" && file != "":
		return "", c.Errorf(fileKey, "give %s or %s, not both", key, fileKey)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", c.Errorf(fileKey, "read %s: %v", file, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", c.Errorf(fileKey, "%s is empty", file)
		}
		return v, nil
	case inline == "":
		return "", c.Errorf(key, "missing; give a connection string (for example ${SOURCE_DSN}) or %s", fileKey)
	}
	return inline, nil
}

func (c *Config) names(key string, cols []string) error {
	seen := map[string]bool{}
	for _, col := range cols {
		if col == "" {
			return c.Errorf(key, "empty column name")
		}
		if seen[col] {
			return c.Errorf(key, "column %q listed twice", col)
		}
		seen[col] = true
	}
	return nil
}

// Table is a schema-qualified table name, exact as in the catalog.
type Table struct {
	Schema string
	Name   string
}

// String renders the name as written in a config: schema.name, quoting a part
// only when it contains a dot or a double quote.
func (t Table) String() string {
	return quoteIfNeeded(t.Schema) + "." + quoteIfNeeded(t.Name)
}

func quoteIfNeeded(s string) string {
	if strings.ContainsAny(s, `."`) {
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	}
	return s
}

// ParseTable splits "schema.name" (schema defaults to public). Names are
// taken exactly, case and all; a part with a dot is written in double quotes
// with "" for a quote inside.
func ParseTable(s string) (Table, error) {
	parts, err := splitQualified(s)
	if err != nil {
		return Table{}, err
	}
	switch len(parts) {
	case 1:
		return Table{Schema: "public", Name: parts[0]}, nil
	case 2:
		return Table{Schema: parts[0], Name: parts[1]}, nil
	}
	return Table{}, fmt.Errorf("%q: write schema.table (quote a part that contains a dot)", s)
}

func splitQualified(s string) ([]string, error) {
	var parts []string
	for {
		var part string
		if strings.HasPrefix(s, `"`) {
			var b strings.Builder
			i := 1
			for {
				if i >= len(s) {
					return nil, fmt.Errorf("%q: unterminated double quote", s)
				}
				if s[i] == '"' {
					if i+1 < len(s) && s[i+1] == '"' {
						b.WriteByte('"')
						i += 2
						continue
					}
					i++
					break
				}
				b.WriteByte(s[i])
				i++
			}
			part, s = b.String(), s[i:]
			if s != "" && s[0] != '.' {
				return nil, fmt.Errorf("%q: unexpected text after a quoted name", s)
			}
		} else {
			i := strings.IndexByte(s, '.')
			if i < 0 {
				i = len(s)
			}
			part, s = s[:i], s[i:]
		}
		if part == "" {
			return nil, fmt.Errorf("empty name in table %q", s)
		}
		parts = append(parts, part)
		if s == "" {
			return parts, nil
		}
		s = s[1:]
	}
}
