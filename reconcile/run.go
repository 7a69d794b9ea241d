package reconcile

import (
	"context"
	"errors"
	"fmt"
	"github.com/syncd/syncd/internal/sourceerr"
	"log/slog"
	"math/big"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// DefaultLeafRows is the largest differing segment whose rows are fetched
// instead of split again.
const DefaultLeafRows = 128

// Options configure one reconcile.
type Options struct {
	// Repair writes the source's values over every difference found, then
	// compares again.
	Repair bool
	Logger *slog.Logger
	// LeafRows overrides DefaultLeafRows (tests).
	LeafRows int
	// WholeTable compares every row in source.where, whatever the
	// watermark (none is read): the run of a source in compare mode,
	// which has no cursor.
	WholeTable bool
	// BeforeRecheck, when set, is called with each batch of differing
	// keys before they are read again (tests: writes in between).
	BeforeRecheck func(keys [][]string)
}

// StateReader reads a source's watermark; *watermark.Store is one.
type StateReader interface {
	Get(name string) (watermark.State, bool, error)
}

// Watermark is a StateReader of one state read beforehand (so that the
// state file need not stay open while reconcile runs).
type Watermark struct {
	State watermark.State
	Found bool
}

// StateRecorder is a StateReader that can also change a stored state;
// given one, Run records the time of a clean reconcile in it
// (watermark.State.LastCleanReconcile). *watermark.Store is one.
type StateRecorder interface {
	StateReader
	Update(name string, fn func(st *watermark.State) error) error
}

// Get returns the held state, whatever the name.
func (w Watermark) Get(string) (watermark.State, bool, error) { return w.State, w.Found, nil }

// ErrNoCopy is wrapped when the sink table does not exist yet.
var ErrNoCopy = errors.New("the copy does not exist yet")

// Run compares the rows of cfg's source with its copy (a postgres sink;
// package kind routes every other kind of sink to its own reconcile):
// the rows up to the watermark that states holds for it (nil states: none),
// the rows with a NULL cursor and the rows stamped ahead of the source's
// clock, and counts the rows it could not judge. With o.Repair it repairs
// the differences and compares again (Report.After).
func Run(ctx context.Context, cfg *config.Config, states StateReader, o Options) (*Report, error) {
	started := time.Now()
	// A source in compare mode has no cursor: it is compared whole.
	o.WholeTable = o.WholeTable || cfg.Compare()
	c, dst, safe, closeAll, err := open(ctx, cfg, states, o)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	log := c.log
	rep := newReport(cfg.Name)
	c.rep = rep
	if o.Repair {
		count := func(r sink.RepairResult, err error) error {
			rep.Repair.Inserted += r.Inserted
			rep.Repair.Updated += r.Updated
			rep.Repair.Deleted += r.Deleted
			return err
		}
		c.replace = func(ctx context.Context, fixes []sink.Fix) error { return count(dst.ReplaceKeys(ctx, fixes)) }
		c.repair = c.replace
		if safe {
			c.repair = func(ctx context.Context, fixes []sink.Fix) error { return count(dst.Repair(ctx, fixes)) }
		}
		rep.Repair = &RepairCounts{}
	}
	if err := c.run(ctx); err != nil {
		return nil, err
	}
	if o.Repair && !rep.Equal() {
		rep.Repaired = true
		c.repair, c.replace = nil, nil
		c.rep = newReport(cfg.Name)
		if err := c.run(ctx); err != nil {
			return nil, fmt.Errorf("verify the repair: %w", err)
		}
		rep.After = c.rep
		rep.After.DurationMS = time.Since(started).Milliseconds()
	}
	rep.DurationMS = time.Since(started).Milliseconds()
	if rep.Clean() {
		rep.CleanAt = started.UTC()
	}
	if rec, ok := states.(StateRecorder); ok {
		if err := Record(rec, cfg.Name, started, rep); err != nil {
			return nil, err
		}
	}
	log.Info("reconcile done", "missing", rep.Missing, "extra", rep.Extra, "changed", rep.Changed,
		"duplicate", rep.Duplicate, "null_key", rep.NullKey, "not_covered", rep.NotCoveredRows(),
		"rows_compared", rep.RowsCompared, "rows_fetched", rep.RowsFetched, "plan", rep.Plan, "skipped_unsynced", rep.SkippedUnsynced,
		"duration", time.Since(started).Round(time.Millisecond).String())
	return rep, nil
}

// begin is the logger of cfg's reconcile and the watermark states hold for
// it (none for a whole-table compare, or without states).
func begin(cfg *config.Config, states StateReader, o Options) (*slog.Logger, watermark.State, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	var st watermark.State
	if states != nil && !o.WholeTable {
		var err error
		if st, _, err = states.Get(cfg.Name); err != nil {
			return nil, st, err
		}
	}
	return log.With("source", cfg.Name), st, nil
}

// open opens both sides of cfg's reconcile at the watermark states hold: the source,
// the copy (checked and prepared for repair when its key identifies every
// row: safe), the coverage and the comparer, with each side's key guard.
// closeAll closes both connections.
func open(ctx context.Context, cfg *config.Config, states StateReader, o Options) (c *comparer, dst *sink.Postgres, safe bool, closeAll func(), err error) {
	closeAll = func() {}
	log, st, err := begin(cfg, states, o)
	if err != nil {
		return nil, nil, false, closeAll, err
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	// Both sides at once: each costs a connection and its round trips.
	// The source's error comes first, as when they were opened in turn.
	var opened *source.Reader
	var guard keyGuard
	var srcErr, dstErr error
	dstCtx, cancelDst := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if dst, dstErr = sink.OpenPostgres(dstCtx, cfg); dstErr == nil {
			guard, dstErr = readKeyGuard(dstCtx, dst.Conn(), cfg.Sink.Ident, cfg.Sink.Key)
		}
	}()
	if opened, srcErr = source.Open(ctx, cfg); srcErr != nil {
		cancelDst() // no use for the copy: do not wait for its server
	}
	<-done
	closeAll = func() {
		cancelDst()
		if dst != nil {
			dst.Close(context.WithoutCancel(ctx))
		}
		if opened != nil {
			opened.Close(context.WithoutCancel(ctx))
		}
	}
	if err = srcErr; err == nil {
		err = dstErr
	}
	if err != nil {
		return nil, nil, false, closeAll, err
	}
	var src pgSource = opened
	if !guard.exists {
		return nil, nil, false, closeAll, fmt.Errorf("sink table %s of source %s: %w; run `syncd run --once --source %s` first", cfg.Sink.Table, cfg.Name, ErrNoCopy, cfg.Name)
	}
	// A copy whose key identifies every row is checked and repaired like a
	// page is written; any other copy is compared whatever its constraints
	// (that is how reconcile finds what they let in) and repaired by key.
	safe = guard.identifies() && guard.arbiter
	if safe {
		if _, err := dst.Check(ctx, src.Table().Columns); err != nil {
			return nil, nil, false, closeAll, err
		}
		dst.Trust() // checked just now: Prepare need not check again
		if err := dst.Prepare(ctx, src.Table().Columns); err != nil {
			return nil, nil, false, closeAll, err
		}
	} else {
		dst.PrepareReplace(src.Table().Columns)
	}
	if len(st.Cursor) > 0 && len(st.Cursor) != len(src.Table().Cursor) {
		return nil, nil, false, closeAll, &sourceerr.ResyncNeeded{Source: cfg.Name,
			Reason: fmt.Sprintf("the stored watermark of %s has %d cursor values but source.cursor has %d columns; the cursor changed: ", cfg.Name, len(st.Cursor), len(src.Table().Cursor))}
	}
	cov, err := newCoverage(ctx, cfg, src, st, o.WholeTable)
	if err != nil {
		return nil, nil, false, closeAll, err
	}
	c, err = newComparer(ctx, cfg, src, dst, cov, o, log)
	if err != nil {
		return nil, nil, false, closeAll, err
	}
	if c.src.guard, err = readKeyGuard(ctx, src, src.Table().Ident, cfg.Sink.Key); err != nil {
		return nil, nil, false, closeAll, err
	}
	c.dst.guard = guard
	for _, sd := range []*side{c.src, c.dst} {
		if !sd.guard.notNull {
			sd.scope = and(sd.scope, "NOT ("+sd.nullKey()+")")
		}
	}
	return c, dst, safe, closeAll, nil
}

// Record stores the outcome of a reconcile of source name begun at started
// in its state: what it found (LastReconcile) and, when it proved the copy
// equal, when (LastCleanReconcile). An older outcome never replaces a newer
// one.
func Record(rec StateRecorder, name string, started time.Time, rep *Report) error {
	final := rep.Final()
	res := &watermark.ReconcileResult{At: started.UTC(), Repaired: rep.Repaired,
		Differences: nonZero(final.Differences()), NotCovered: nonZero(final.NotCovered)}
	err := rec.Update(name, func(st *watermark.State) error {
		if st.LastReconcile == nil || started.After(st.LastReconcile.At) {
			st.LastReconcile = res
		}
		if rep.Clean() && started.After(st.LastCleanReconcile) {
			st.LastCleanReconcile = started.UTC()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reconcile of %s done but its outcome could not be recorded in the state file: %w", name, err)
	}
	return nil
}

func newReport(name string) *Report {
	return &Report{Source: name, Keys: KeyLists{Missing: []string{}, Extra: []string{}, Changed: []string{}, Duplicate: []string{}, NullKey: []string{}},
		NotCovered: map[string]int64{}}
}

// pgSource is what reconcile needs of a source: its table, and its
// PostgreSQL session, on which it hashes and reads the source's rows as
// it does the copy's.
type pgSource interface {
	source.Source
	source.Session
}

// newComparer describes both tables and picks the line.
func newComparer(ctx context.Context, cfg *config.Config, src pgSource, dst *sink.Postgres, cov *coverage, o Options, log *slog.Logger) (*comparer, error) {
	names := make([]string, len(src.Table().Columns))
	for i, col := range src.Table().Columns {
		names[i] = col.Name
	}
	c := &comparer{leaf: o.LeafRows, log: log, cov: cov}
	if c.leaf <= 0 {
		c.leaf = DefaultLeafRows
	}
	for _, k := range cfg.Sink.Key {
		for i, n := range names {
			if n == k {
				c.keyIdx = append(c.keyIdx, i)
			}
		}
	}
	dstTable := cfg.Sink.Ident
	c.src = &side{role: "source", conn: src, table: src.Table().Ident, scope: cov.scope, synced: cov.compared(), where: cov.where}
	c.dst = &side{role: "copy", conn: dst.Conn(), table: dstTable}
	for _, sd := range []*side{c.src, c.dst} {
		cols, err := describe(ctx, sd.conn, sd.table, names)
		if err != nil {
			return nil, fmt.Errorf("reconcile %s: %w", cfg.Name, err)
		}
		sd.cols = cols
	}
	loosen(c.src.cols, c.dst.cols)
	for _, sd := range []*side{c.src, c.dst} {
		for _, i := range c.keyIdx {
			sd.keys = append(sd.keys, sd.cols[i])
		}
	}
	intKey := len(c.keyIdx) == 1
	for _, sd := range []*side{c.src, c.dst} {
		switch sd.keys[0].Base {
		case "int2", "int4", "int8":
		default:
			intKey = false
		}
	}
	c.src.intKey, c.dst.intKey = intKey, intKey
	// JIT compiles the long row expression, with inlining and optimization
	// at these costs, in every parallel worker: seconds of compilation for
	// functions (text output, hashing) that it does not speed up.
	for _, sd := range []*side{c.src, c.dst} {
		if _, err := sd.conn.Exec(ctx, "SET jit = off"); err != nil {
			return nil, fmt.Errorf("reconcile %s: set jit off on the %s: %w", cfg.Name, sd.role, err)
		}
	}
	hash, name := pickHash(ctx, c.src.conn, c.dst.conn)
	c.src.hash, c.dst.hash = hash, hash
	log.Debug("row hash", "function", name)
	return c, nil
}

// run makes one complete comparison into c.rep: the rows the key cannot
// identify, then the whole line, then the counts of what was compared by
// class and of what could not be. Without a watermark only an empty source
// is compared: every row of a non-empty one is counted as not covered.
func (c *comparer) run(ctx context.Context) error {
	c.rep.Boundary = c.cov.boundary
	c.level = 0
	c.skip = map[string]bool{}
	defer c.rep.sortKeys()
	if c.cov.noWatermark {
		c.rep.NoWatermark = true
		n, err := c.countUnsynced(ctx)
		if err != nil || n > 0 {
			c.rep.NotCovered[ReasonNoWatermark] = n
			c.log.Info("reconcile compared nothing: no watermark yet, no row is synced", "rows", n)
			return err
		}
	}
	if err := c.keyChecks(ctx); err != nil {
		return err
	}
	if err := c.bisectAll(ctx); err != nil {
		return err
	}
	return c.countCoverage(ctx)
}

// bisectAll compares the whole line once: by checksum levels, or, when a
// sample finds the differences dense, by streaming it at once.
func (c *comparer) bisectAll(ctx context.Context) error {
	top, ok, err := c.top(ctx)
	if err != nil || !ok {
		return err
	}
	c.hashesRead.Store(0)
	defer func() { c.rep.HashesRead = c.hashesRead.Load() }()
	dense, err := c.sample(ctx, top)
	if err != nil {
		return err
	}
	if dense {
		// A checksum level would differ nearly everywhere: stream the
		// whole line once instead of checksumming it and then streaming it.
		c.rep.Plan = PlanStream
		return c.stream(ctx, []segment{top}, true)
	}
	c.rep.Plan = PlanChecksums
	return c.bisect(ctx, []segment{top})
}

// top is the first segment: the keys' range for an integer key, the whole
// hash line otherwise; ok is false when both tables are empty.
func (c *comparer) top(ctx context.Context) (segment, bool, error) {
	est, err := c.estimate(ctx)
	if err != nil {
		return segment{}, false, err
	}
	c.tableRows = est
	if !c.src.intKey {
		return wholeLine(est), true, nil
	}
	var lo, hi *big.Int
	for _, sd := range []*side{c.src, c.dst} {
		k := ident(sd.keys[0].Name)
		var mn, mx *int64
		if err := sd.conn.QueryRow(ctx, "SELECT min("+k+")::int8, max("+k+")::int8 FROM "+sd.qualified()).Scan(&mn, &mx); err != nil {
			return segment{}, false, fmt.Errorf("key range of %s %s: %w", sd.role, sd.table, err)
		}
		if mn == nil {
			continue
		}
		if lo == nil || big.NewInt(*mn).Cmp(lo) < 0 {
			lo = big.NewInt(*mn)
		}
		if hi == nil || big.NewInt(*mx).Cmp(hi) > 0 {
			hi = big.NewInt(*mx)
		}
	}
	if lo == nil {
		return segment{}, false, nil
	}
	return segment{lo: lo, hi: hi, n: est}, true, nil
}

// estimate is the planner's row count of the larger table, which sets the
// first fanout (the split adapts to the real counts after that).
func (c *comparer) estimate(ctx context.Context) (int64, error) {
	var est int64
	for _, sd := range []*side{c.src, c.dst} {
		var n float64
		if err := sd.conn.QueryRow(ctx, "SELECT coalesce(max(reltuples), 0)::float8 FROM pg_class WHERE oid = to_regclass($1)", sd.qualified()).Scan(&n); err != nil {
			return 0, fmt.Errorf("estimate rows of %s %s: %w", sd.role, sd.table, err)
		}
		est = max(est, int64(n))
	}
	return max(est, int64(c.leaf)*16), nil
}

// nonZero keeps the counts that are not zero (nil when none is).
func nonZero(m map[string]int64) map[string]int64 {
	var out map[string]int64
	for k, v := range m {
		if v != 0 {
			if out == nil {
				out = map[string]int64{}
			}
			out[k] = v
		}
	}
	return out
}
