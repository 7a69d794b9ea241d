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
	"golang.org/x/sync/errgroup"
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
	// Both sides at once, each on its own session: under load every round
	// trip waits for a core, and a reconcile of identical tables is little
	// else besides its checksum pass. The source's error comes first, as
	// when they were opened in turn, and a failed source does not wait for
	// the copy's server.
	var opened *source.Reader
	var srcErr, dstErr error
	dstCtx, cancelDst := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		dst, dstErr = sink.OpenPostgres(dstCtx, cfg)
	}()
	if opened, srcErr = source.Open(ctx, cfg); srcErr != nil {
		cancelDst()
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
	// A source role that row-level security filters compares, and repairs
	// the copy to, only the rows its policies show it: said once.
	opened.WarnRowSecurity(ctx, log)
	var src pgSource = opened
	dstTable := cfg.Sink.Ident
	var guard keyGuard
	var cov *coverage
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var err error
		if guard, err = readKeyGuard(gctx, dst.Conn(), dstTable, cfg.Sink.Key); err != nil || !guard.exists {
			return err
		}
		// A copy whose key identifies every row is checked and repaired
		// like a page is written; any other copy is compared whatever its
		// constraints (that is how reconcile finds what they let in) and
		// repaired by key.
		safe = guard.identifies() && guard.arbiter
		if !safe {
			dst.PrepareReplace(src.Table().Columns)
			return nil
		}
		if _, err := dst.Check(gctx, src.Table().Columns); err != nil {
			return err
		}
		dst.Trust() // checked just now: Prepare need not check again
		return dst.Prepare(gctx, src.Table().Columns)
	})
	var srcGuard keyGuard
	g.Go(func() (err error) {
		if cov, err = newCoverage(gctx, cfg, src, st, o.WholeTable); err != nil {
			return err
		}
		srcGuard, err = readKeyGuard(gctx, src, src.Table().Ident, cfg.Sink.Key)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, nil, false, closeAll, err
	}
	if !guard.exists {
		return nil, nil, false, closeAll, fmt.Errorf("sink table %s of source %s: %w; run `syncd run --once --source %s` first", cfg.Sink.Table, cfg.Name, ErrNoCopy, cfg.Name)
	}
	if len(st.Cursor) > 0 && len(st.Cursor) != len(src.Table().Cursor) {
		return nil, nil, false, closeAll, &sourceerr.ResyncNeeded{Source: cfg.Name,
			Reason: fmt.Sprintf("the stored watermark of %s has %d cursor values but source.cursor has %d columns; the cursor changed: ", cfg.Name, len(st.Cursor), len(src.Table().Cursor))}
	}
	c, err = newComparer(ctx, cfg, src, dst, cov, o, log)
	if err != nil {
		return nil, nil, false, closeAll, err
	}
	c.src.guard, c.dst.guard = srcGuard, guard
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
	// Each side is described, and its session prepared, on its own
	// goroutine.
	hashes := make([]string, 2)
	g, gctx := errgroup.WithContext(ctx)
	for i, sd := range []*side{c.src, c.dst} {
		g.Go(func() error {
			cols, err := describe(gctx, sd.conn, sd.table, names)
			if err != nil {
				return fmt.Errorf("reconcile %s: %w", cfg.Name, err)
			}
			sd.cols = cols
			// JIT compiles the long row expression, with inlining and
			// optimization at these costs, in every parallel worker:
			// seconds of compilation for functions (text output,
			// hashing) that it does not speed up.
			if _, err := sd.conn.Exec(gctx, "SET jit = off"); err != nil {
				return fmt.Errorf("reconcile %s: set jit off on the %s: %w", cfg.Name, sd.role, err)
			}
			hashes[i] = probe(gctx, sd.conn)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
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
	hash, name := pickHash(hashes[0], hashes[1])
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
	ends := make([][2]*int64, 2)
	g, gctx := errgroup.WithContext(ctx)
	for i, sd := range []*side{c.src, c.dst} {
		k := ident(sd.keys[0].Name)
		g.Go(func() error {
			if err := sd.conn.QueryRow(gctx, "SELECT min("+k+")::int8, max("+k+")::int8 FROM "+sd.qualified()).Scan(&ends[i][0], &ends[i][1]); err != nil {
				return fmt.Errorf("key range of %s %s: %w", sd.role, sd.table, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return segment{}, false, err
	}
	for _, e := range ends {
		mn, mx := e[0], e[1]
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
	n := make([]float64, 2)
	g, gctx := errgroup.WithContext(ctx)
	for i, sd := range []*side{c.src, c.dst} {
		g.Go(func() error {
			if err := sd.conn.QueryRow(gctx, "SELECT coalesce(max(reltuples), 0)::float8 FROM pg_class WHERE oid = to_regclass($1)", sd.qualified()).Scan(&n[i]); err != nil {
				return fmt.Errorf("estimate rows of %s %s: %w", sd.role, sd.table, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return max(int64(n[0]), int64(n[1]), int64(c.leaf)*16), nil
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
