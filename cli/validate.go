package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/syncd/syncd/internal/sourceerr"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/page"
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
	cfgs, skipped, warnings, described, err := expandDescribed(ctx, raw, *name)
	if err != nil {
		return err
	}
	printExpansion(env, raw, cfgs, skipped, warnings)
	if err := oneWriter(env.Kinds, cfgs); err != nil {
		return err
	}
	results := checkAll(ctx, env.Kinds, cfgs, described, c.state)
	for i, cfg := range cfgs {
		warnings, table, record, err := results[i].warnings, results[i].table, results[i].record, results[i].err
		if errors.Is(err, config.ErrInvalid) && cfg.Pattern != "" && !errors.Is(err, catalog.ErrSecondWriter) {
			skipped = append(skipped, skippedBy(cfg, err))
			fmt.Fprintf(env.Stdout, "%s: skipped: %s\n", cfg.Name, oneLine(skippedBy(cfg, err).Reason))
			continue
		}
		if err != nil {
			if errors.Is(err, config.ErrInvalid) {
				return err
			}
			return sourceerr.Name(cfg.Name, source.Explain(cfg, err))
		}
		if err := checkStoredIdentity(env.Kinds, cfg, c.state); err != nil {
			return err
		}
		for _, w := range warnings {
			fmt.Fprintf(env.Stdout, "%s: warning: %s\n", cfg.Name, w)
		}
		if record != "" {
			fmt.Fprintf(env.Stdout, "%s: %s\n", cfg.Name, record)
		}
		if cfg.Compare() {
			why := ""
			if cfg.CompareWhy != "" {
				why = "no usable cursor (" + strings.TrimSuffix(cfg.CompareWhy, ".") + "); "
			}
			fmt.Fprintf(env.Stdout, "%s: ok (%s, %d columns, compare mode: %seach run compares the whole table by key %s and repairs the differences, %d warnings)\n",
				cfg.Name, table.Ident, len(table.Columns), why, strings.Join(cfg.Sink.Key, ", "), len(warnings))
			continue
		}
		fmt.Fprintf(env.Stdout, "%s: ok (%s, %d columns, cursor %s, %d warnings)\n", cfg.Name, table.Ident, len(table.Columns), strings.Join(cfg.Source.Cursor, ", "), len(warnings))
	}
	if len(skipped) > 0 {
		return fmt.Errorf("%d tables matched by a pattern source would be skipped (listed above): fix them or add them to source.exclude", len(skipped))
	}
	return nil
}

// validateWorkers is how many sources validate checks at once: each check
// is a few dozen round trips, so a pattern source of hundreds of tables is
// checked in a fraction of the time one at a time takes. Each worker keeps
// one session per database (sessions), so at most this many sessions are
// open on each database whatever the number of tables.
const validateWorkers = 4

// validateCountWithin is how long validate counts a table's rows outside
// the cursor's reach before it takes the planner's estimate instead: a
// schema of hundreds of tables is not scanned whole.
const validateCountWithin = 2 * time.Second

type checked struct {
	warnings []string
	table    *source.Table
	record   string
	err      error
}

// checkAll checks every source (check with plan), a few at a time, and
// returns the results in the order of cfgs. The tables of described (by
// source name: a pattern's, as matching described them) are not described
// again.
func checkAll(ctx context.Context, kinds *kind.Registry, cfgs []*config.Config, described map[string]*source.Table, state string) []checked {
	out := make([]checked, len(cfgs))
	// What the copies' sink databases say about all of them, read once,
	// and the trial creations of copies of one shape, run once.
	shared := sink.NewShared(cfgs)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(validateWorkers, len(cfgs)) {
		wg.Go(func() {
			// Each worker keeps one session per database for the sources
			// it checks: sessions do not grow with the tables of a pattern.
			sess := &sessions{conns: map[string]*pgx.Conn{}, described: described, shared: shared}
			defer sess.close(ctx)
			for i := range next {
				r := &out[i]
				r.warnings, r.table, r.err = checkOn(ctx, kinds, sess, cfgs[i], true, state, &r.record)
				if r.err != nil {
					// A failed check may leave its session in any state:
					// the next one starts on fresh sessions.
					sess.close(ctx)
				}
			}
		})
	}
	for i := range cfgs {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// printExpansion lists, for each pattern source, the tables it matched,
// each table's cursor when it is not source.cursor as written, the ones it
// skips, and the warnings about its tables entries.
func printExpansion(env *Env, raw, cfgs []*config.Config, skipped []source.Skipped, warnings []string) {
	for _, p := range raw {
		if !p.IsPattern() {
			continue
		}
		var names []string
		for _, c := range cfgs {
			if c.Pattern == p.Name {
				n := c.Name
				if c.Compare() {
					n += " (compare mode)"
				}
				names = append(names, n)
			}
		}
		fmt.Fprintf(env.Stdout, "%s: pattern %s matches %d tables to sync: %s\n", p.Name, p.Source.Table, len(names), strings.Join(names, ", "))
		for _, c := range cfgs {
			if c.Pattern == p.Name && c.CursorNote != "" {
				fmt.Fprintf(env.Stdout, "%s: cursor %s (%s)\n", c.Name, strings.Join(c.Source.Cursor, ", "), c.CursorNote)
			}
		}
		for _, w := range warnings {
			if strings.HasPrefix(w, p.Name+": ") {
				fmt.Fprintln(env.Stdout, w)
			}
		}
		for _, s := range skipped {
			if strings.HasPrefix(s.Name, p.Name+".") {
				hint := ""
				if p.Mode == config.ModeCursor && (s.Code == source.SkipNoCursorColumn || s.Code == source.SkipCursorNotUsable) {
					hint = " (or set mode: auto to sync it in compare mode, docs/PATTERNS.md)"
				}
				fmt.Fprintf(env.Stdout, "%s: skipped: %s%s\n", s.Name, oneLine(s.Reason), hint)
			}
		}
	}
}

// checkedSource is what validate checks of a source: its table and bound,
// the rows outside the cursor's reach, the cursor index and the writers'
// time zone, and the table's catalog identity (sinkRecord).
type checkedSource interface {
	source.Source
	source.OutsideReader
	source.Checker
	source.Querier
	// CountOutsideWithin is CountOutside bounded in time, then estimated.
	CountOutsideWithin(ctx context.Context, within time.Duration) (source.Outside, error)
}

// sessions are the sessions a validate worker keeps, by role and DSN. A
// worker opens a copy's sink session while its source session is opened,
// so the map is shared by two goroutines (each with its own role's key).
type sessions struct {
	mu    sync.Mutex
	conns map[string]*pgx.Conn
	// described are tables already described, by source name (read only).
	described map[string]*source.Table
	// shared is what the sink databases said about all the copies
	// validate checks (nil: each copy asks on its own).
	shared *sink.Shared
}

// get returns the worker's session to dsn for role ("source" or "sink"),
// opened by connect the first time.
func (s *sessions) get(ctx context.Context, role, dsn string, connect func() (*pgx.Conn, error)) (*pgx.Conn, error) {
	key := role + " " + dsn
	s.mu.Lock()
	c, ok := s.conns[key]
	s.mu.Unlock()
	if ok && !c.IsClosed() {
		return c, nil
	}
	c, err := connect()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.conns[key] = c
	s.mu.Unlock()
	return c, nil
}

// sharedOf is s's Shared for a copy checked on the worker's sink session
// (onSession), else nil.
func (s *sessions) sharedOf(onSession bool) *sink.Shared {
	if s == nil || !onSession {
		return nil
	}
	return s.shared
}

func (s *sessions) close(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, c := range s.conns {
		c.Close(context.WithoutCancel(ctx))
		delete(s.conns, k)
	}
}

// check verifies one source against its databases without writing
// anything: the table, columns, cursor and tie-breaker in the source, what
// the sink's kind checks (Kind.Check), and for a sink with a catalog the
// copy's columns and key in its database. With plan it also explains the
// page query. Config problems come back as config errors (exit 2), a copy
// that the sink's catalog says another source writes included; record,
// when set, gets the sink's record of the copy beside the state file's.
func check(ctx context.Context, kinds *kind.Registry, cfg *config.Config, plan bool, state string, record *string) (warnings []string, table *source.Table, err error) {
	return checkOn(ctx, kinds, nil, cfg, plan, state, record)
}

// checkOn is check on the sessions of sess (nil: sessions of its own,
// closed at the end).
func checkOn(ctx context.Context, kinds *kind.Registry, sess *sessions, cfg *config.Config, plan bool, state string, record *string) (warnings []string, table *source.Table, err error) {
	// A table copy's sink session is opened while the source's is: each
	// is a connection and a few catalog reads. A source error comes first.
	k, kerr := kinds.Of(cfg)
	if kerr == nil && !k.FollowsSchema && cfg.SchemaChanges == config.SchemaFail {
		return nil, nil, cfg.Errorf("schema_changes", "a %s sink does not follow the source's schema (it writes the columns each page has), so fail cannot stop a run at a change; remove schema_changes: fail", cfg.Sink.Type)
	}
	if kerr == nil && k.Reconcile == nil && cfg.Reconcile != nil {
		return nil, nil, cfg.Errorf("reconcile", "a %s sink has no reconcile, so the daemon could never run this schedule; remove reconcile:", cfg.Sink.Type)
	}
	var (
		dst  *sink.Postgres
		derr error
		wg   sync.WaitGroup
	)
	shared := kerr == nil && sess != nil && k.Type == "postgres"
	// The copy in a database with syncd's catalog is checked there; a sink
	// of another kind is checked by its own Check. On a worker's sessions
	// the copy's *sink.Postgres is made on the worker's sink session.
	openSink := func() {
		if shared {
			var conn *pgx.Conn
			conn, derr = sess.get(ctx, "sink", cfg.Sink.DSN, func() (*pgx.Conn, error) { return sink.Connect(ctx, cfg) })
			if derr == nil {
				dst = sink.OnConn(conn, cfg)
			}
			return
		}
		var s sink.Sink
		if s, derr = k.OpenSink(ctx, cfg); derr == nil {
			var ok bool
			if dst, ok = s.(*sink.Postgres); !ok {
				derr = fmt.Errorf("sink type %s declares a catalog, but its sink is a %T, not a PostgreSQL copy", k.Type, s)
				_ = s.Close(ctx)
			}
		}
	}
	tableCheck := kerr == nil && k.OpenSink != nil && k.Catalog
	openSource := func() (*source.Reader, error) {
		if sess == nil {
			return source.Open(ctx, cfg)
		}
		conn, err := sess.get(ctx, "source", cfg.Source.DSN, func() (*pgx.Conn, error) {
			c, err := pgutil.Connect(ctx, cfg.Source.DSN, "source")
			return c, pgutil.Locate(cfg, err)
		})
		if err != nil {
			return nil, err
		}
		if t := sess.described[cfg.Name]; t != nil {
			return source.OpenDescribed(conn, cfg, t.Clone()), nil
		}
		return source.OpenOn(ctx, conn, cfg)
	}
	compare := cfg.Compare()
	if tableCheck && !compare {
		wg.Go(openSink)
	}
	if kerr == nil && k.OpenPlan != nil && sess == nil {
		// A campaign's check opens its grants session once the source is
		// open: dialed now, it is ready by then (a connection is about a
		// third of a campaign's check).
		sink.PrimeSession(ctx, cfg)
	}
	opened, err := openSource()
	wg.Wait()
	if err == nil && tableCheck && compare {
		// In compare mode the source settles sink.key (its primary key
		// when the file gives none) before the sink is opened with it.
		openSink()
	}
	if dst != nil && !shared {
		defer dst.Close(context.WithoutCancel(ctx))
	}
	if err != nil {
		return nil, nil, err
	}
	var src checkedSource = opened
	if sess == nil {
		defer src.Close(context.WithoutCancel(ctx))
	}
	if kerr != nil {
		return nil, nil, kerr
	}
	if k.Check != nil && k.OpenPlan != nil {
		// A campaign reads its frozen targets, not pages of the source:
		// check its where clause, grants table and frozen campaign instead.
		warnings, err := k.Check(ctx, cfg, src)
		if err != nil {
			return nil, nil, err
		}
		return warnings, src.Table(), nil
	}
	if plan && !compare { // what a cursor run reads: nothing of it in compare mode
		// Exact when an index answers it (or the table is small); the
		// planner's estimate, said so, when counting takes longer.
		out, err := src.CountOutsideWithin(ctx, validateCountWithin)
		if err != nil {
			return nil, nil, err
		}
		warnings = append(warnings, out.Warnings(src.Table())...)
		bound, err := src.Bound(ctx)
		if err != nil {
			return nil, nil, err
		}
		if w := bound.Warning(cfg.Source.Lookback.Duration); w != "" {
			warnings = append(warnings, w)
		}
		// A sequence set back below the stored watermark: the next run
		// would refuse it (an unreadable state file is reported below).
		if st, _, err := watermark.ReadState(state, cfg.Name, 2*time.Second); err == nil {
			if err := syncer.CheckSequence(cfg, src.Table(), st, bound); err != nil {
				return nil, nil, err
			}
		}
		lt, err := src.LocalTimeWarning(ctx)
		if err != nil {
			return nil, nil, err
		}
		if lt != "" {
			warnings = append(warnings, lt)
		}
		iw, err := src.IndexWarning(ctx)
		if err != nil {
			return nil, nil, err
		}
		if iw != "" {
			warnings = append(warnings, iw)
		}
	}
	if plan { // a table copy, by cursor or in compare mode
		rw, err := src.RowSecurityWarning(ctx)
		if err != nil {
			return nil, nil, err
		}
		if rw != "" {
			warnings = append(warnings, rw)
		}
	}
	if k.Check != nil { // a table copy of a kind with checks of its own
		w, err := k.Check(ctx, cfg, src)
		if err != nil {
			return nil, nil, err
		}
		warnings = append(warnings, w...)
	}
	if tableCheck { // a table copy: the copy's columns, key and constraints
		if derr != nil {
			return nil, nil, derr
		}
		dst.UseSourceSchema(src.Table().Types, src.Table().Checks)
		sh := sess.sharedOf(shared)
		// A copy whose name nothing held when validate looked has no
		// columns to compare (schemaNotes reads none).
		cols, notes := src.Table().Columns, []string(nil)
		if sh == nil || !sh.Free(ctx, dst) {
			if cols, notes, err = schemaNotes(ctx, cfg, src.Table(), dst, state, plan); err != nil {
				return nil, nil, err
			}
		}
		warnings = append(warnings, notes...)
		check := dst.Check
		if plan {
			check = dst.Validate
			if sh != nil {
				check = func(ctx context.Context, cols []page.Column) (bool, error) { return dst.ValidateShared(ctx, cols, sh) }
			}
		}
		exists, err := check(ctx, cols)
		if err != nil {
			return nil, nil, err
		}
		if !exists && plan {
			warnings = append(warnings, fmt.Sprintf("sink table %s does not exist yet; the first run creates it", cfg.Sink.Table))
		}
		// Without a syncd catalog in the sink no copy has a record there.
		rec := ""
		if sh == nil || !sh.NoCatalog(ctx, dst) {
			if rec, err = sinkRecord(ctx, cfg, src, dst, state); err != nil {
				return nil, nil, err
			}
		}
		if record != nil {
			*record = rec
		}
		if plan {
			fsync := sink.FsyncWarning
			if sh != nil {
				fsync = sh.FsyncWarning
			}
			w, err := fsync(ctx, dst.Conn(), cfg.Sink.DSN)
			if err != nil {
				return nil, nil, err
			}
			if w != "" {
				warnings = append(warnings, w)
			}
		}
	}
	return warnings, src.Table(), nil
}

// checkStoredIdentity refuses a config whose watermark in the state file
// (when there is one) was computed for other settings: the next run would
// refuse it too.
func checkStoredIdentity(kinds *kind.Registry, cfg *config.Config, state string) error {
	k, err := kinds.Of(cfg)
	if err != nil {
		return err
	}
	st, _, err := watermark.ReadState(state, cfg.Name, 2*time.Second)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return syncer.CheckIdentity(k, cfg, st, state)
}

// schemaNotes says how the copy differs from the source's columns (README
// "Schema changes"): a copy column the source no longer has, and a column
// the next run adds (under schema_changes: evolve; refused under fail),
// which is left out of the columns returned for dst.Check.
//
// A column counts as added only once syncd has followed this copy (the
// state file records the source's columns): a hand-made copy that lacks a
// source column from the start is refused by dst.Check, as before any run.
func schemaNotes(ctx context.Context, cfg *config.Config, t *source.Table, dst *sink.Postgres, state string, plan bool) ([]page.Column, []string, error) {
	have, err := dst.Columns(ctx)
	if err != nil || len(have) == 0 {
		return t.Columns, nil, err
	}
	st, _, rerr := watermark.ReadState(state, cfg.Name, 2*time.Second)
	if st.Schema == nil && (rerr == nil || errors.Is(rerr, os.ErrNotExist)) {
		// No schema in the state file (lost, or new): the run follows the
		// source from the columns the sink's record knows the copy follows.
		rec, found, err := catalog.Read(ctx, dst.Conn(), cfg.Sink.Ident.String())
		if err != nil {
			return nil, nil, err
		}
		if found && rec.SourceName == cfg.Name {
			st.Schema = syncer.RecordedSchema(rec.Source.Columns)
		}
	}
	followed := st.Schema != nil || (rerr != nil && !errors.Is(rerr, os.ErrNotExist))
	// What the next run does about the columns the last run saw (by
	// attnum): a column it widens or replaces is not a problem of the
	// copy under evolve, and one it refuses is one.
	var planned []syncer.PlannedChange
	if st.Schema != nil {
		nums, err := dst.ColumnNums(ctx)
		if err != nil {
			return nil, nil, err
		}
		planned = syncer.PlanSchema(cfg, st, t, dst.Qualified(), have, nums)
	}
	var notes, changes, refused []string
	follows := map[string]bool{}
	for _, ch := range planned {
		switch {
		case ch.Refuse != "":
			refused = append(refused, ch.Refuse)
			follows[ch.Column] = true
		case ch.ByHand:
			notes = append(notes, ch.Say)
		case ch.Alters && ch.Kind != syncer.ChangeColumnAdded || ch.Alters && ch.Fills && have[ch.Column] != "":
			// Widened, or dropped and added again: the next run changes
			// the copy's column.
			follows[ch.Column] = true
			changes = append(changes, ch.Say)
			notes = append(notes, ch.Say+": the next run follows it in the copy (schema_changes: evolve)")
		}
	}
	// Domains and enums the copy's columns use, which the next run
	// changes as the source changed them (or stops at).
	domains, err := dst.DomainChanges(ctx)
	if err != nil {
		return nil, nil, err
	}
	enums, err := dst.EnumChanges(ctx)
	if err != nil {
		return nil, nil, err
	}
	domains = append(enums, domains...)
	for _, d := range domains {
		if d.Refuse != "" {
			refused = append(refused, d.Refuse)
			continue
		}
		fix := strings.Join(d.Stmts, "; ")
		changes = append(changes, fmt.Sprintf("%s (run `%s` on the sink)", d.Say, fix))
		notes = append(notes, fmt.Sprintf("%s: the next run runs `%s` (schema_changes: evolve)", d.Say, fix))
	}
	var cols []page.Column
	names := map[string]bool{}
	for _, col := range t.Columns {
		names[col.Name] = true
		if follows[col.Name] {
			continue
		}
		if _, ok := have[col.Name]; !ok && followed {
			changes = append(changes, fmt.Sprintf("column %q (%s) of the source is not in the copy %s", col.Name, col.Type, cfg.Sink.Table))
			notes = append(notes, changes[len(changes)-1]+": the next run adds it and backfills it (schema_changes: evolve)")
			continue
		}
		cols = append(cols, col)
	}
	// validate refuses it as a config problem; a run leaves it to the
	// source's own run, which stops that source alone (exit 1, recorded as
	// failed) while the others go on.
	if len(refused) > 0 && plan {
		return nil, nil, cfg.Errorf("sink.table", "source %s: the next run stops: %s", cfg.Name, strings.Join(refused, "; "))
	}
	if len(changes) > 0 && cfg.SchemaChanges == config.SchemaFail && plan {
		return nil, nil, cfg.Errorf("schema_changes", "source %s: %s; the copy is not changed because schema_changes is fail: change the copy by hand, or set schema_changes: evolve for syncd to follow",
			cfg.Name, strings.Join(changes, "; "))
	}
	if len(cfg.Source.Columns) == 0 {
		var extra []string
		for n := range have {
			if !names[n] {
				extra = append(extra, fmt.Sprintf("%q", n))
			}
		}
		slices.Sort(extra)
		for _, n := range extra {
			notes = append(notes, fmt.Sprintf("column %s of the copy %s is not in the source %s (dropped there?): the copy keeps it: new rows get NULL there, updated rows keep their last value", n, cfg.Sink.Table, cfg.Source.Table))
		}
	}
	return cols, notes, nil
}
