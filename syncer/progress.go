package syncer

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// DefaultProgressEvery is how often a long run logs its progress.
const DefaultProgressEvery = 10 * time.Second

// Progress is where a run is: what status shows for a running source and
// what the progress line logs.
type Progress struct {
	Started time.Time `json:"started_at"`
	// From says where the run started: "the start", or the watermark (or
	// the resync point) it continues from.
	From string `json:"from"`
	// Rows is the rows read in pages committed so far.
	Rows int64 `json:"rows"`
	// RowsPerSecond is Rows over the time since Started.
	RowsPerSecond float64 `json:"rows_per_second"`
	// Estimate is the planner's estimate of the rows the run had to read
	// when it started (EXPLAIN of the page predicate without its LIMIT);
	// -1 when the planner could not say.
	Estimate int64 `json:"rows_estimate"`
	// Left is Estimate minus Rows (never below 0); -1 when unknown.
	Left int64 `json:"rows_left_estimate"`
	// ETA is Left over RowsPerSecond, in seconds; -1 when unknown.
	ETASeconds float64 `json:"eta_seconds"`
	// Phase is "first load" while a first load copies the copy's chunks
	// ("" while pages are read). Then Rows is the rows of every chunk
	// committed (by earlier processes too), RowsPerSecond this process's
	// rate, Estimate the table's estimated rows (pg_class.reltuples, -1
	// when never counted), and ETASeconds the time the heap blocks left
	// take at the pace of the blocks done so far.
	Phase      string `json:"phase,omitempty"`
	ChunksDone int    `json:"chunks_done,omitempty"`
	Chunks     int    `json:"chunks,omitempty"`
}

// PhaseFirstLoad is Progress.Phase during a first load.
const PhaseFirstLoad = "first load"

// progressEvery is o.ProgressEvery, else $SYNCD_PROGRESS_EVERY (a Go
// duration such as 30s), else DefaultProgressEvery.
func progressEvery(o Options) time.Duration {
	if o.ProgressEvery > 0 {
		return o.ProgressEvery
	}
	if d, err := time.ParseDuration(os.Getenv(EnvProgressEvery)); err == nil && d > 0 {
		return d
	}
	return DefaultProgressEvery
}

// EnvProgressEvery names the variable that sets how often a run and a
// first load log their progress, when Options.ProgressEvery is not set.
const EnvProgressEvery = "SYNCD_PROGRESS_EVERY"

// progress tracks a run's rows and logs them at most every ProgressEvery.
type progress struct {
	log    *slog.Logger
	report func(Progress)
	done   chan struct{}
	wg     sync.WaitGroup
	// src, pos and lvl are what begin needs: the source and the position
	// the run starts from, and the level of "run started".
	src   source.Source
	pos   source.Position
	lvl   slog.Level
	began bool // begin ran (only the run's goroutine reads and sets it)

	mu sync.Mutex
	p  Progress
}

// startProgress starts the progress of a run that reads from pos; its
// "run started" line and first report wait for the estimate of the rows
// ahead, which begin gives once the first page is read.
func startProgress(ctx context.Context, o Options, log *slog.Logger, src source.Source, pos source.Position, st watermark.State) *progress {
	from := "the start"
	switch {
	case st.Cursor != nil:
		from = "watermark " + strings.Join(st.Cursor, ",")
	case st.From != "":
		from = "resync point " + st.From
	}
	pr := &progress{log: log, report: o.OnProgress, done: make(chan struct{}), src: src, pos: pos, lvl: slog.LevelInfo,
		p: Progress{Started: time.Now().UTC(), From: from, Estimate: -1, Left: -1, ETASeconds: -1}}
	if o.QuietIdle && st.Cursor != nil {
		// An incremental run of the daemon: most read nothing. One that
		// reads rows says so in its "run done" (and its progress lines).
		pr.lvl = slog.LevelDebug
	}
	every := progressEvery(o)
	pr.wg.Add(1)
	go func() {
		defer pr.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p := pr.snapshot()
				log.Info("run progress", "rows", p.Rows, "rows_per_second", math.Round(p.RowsPerSecond),
					"rows_left_estimate", p.Left, "eta", etaText(p.ETASeconds))
			case <-pr.done:
				return
			}
		}
	}()
	return pr
}

// begin logs "run started" with where the run starts and the rows it will
// read, and reports the progress, once: called with the run's first page
// (rows, and last when it is the run's last page), before any other
// statement on the source's session, or with rows -1 when the run reads
// no page (nothing to read: rows 0; a failure or a stop before the first
// page: rows -1, unknown).
//
// A run whose first page is its last reads exactly that page's rows: the
// estimate is that count, and the planner is not asked (an idle run of
// the daemon is spared the round trip). Otherwise the planner's estimate
// of the rows from the start position (EXPLAIN of the page query without
// its limit) is read now, on the session the next page is read on.
func (pr *progress) begin(ctx context.Context, rows int64, last bool) {
	if pr == nil || pr.began {
		return
	}
	pr.began = true
	est := rows
	if !last && rows >= 0 {
		var err error
		if est, err = estimateRows(ctx, pr.src, pr.pos); err != nil {
			pr.log.Debug("no row estimate for the progress line", "err", err)
			est = -1
		}
	}
	pr.mu.Lock()
	pr.p.Estimate, pr.p.Left = est, est
	from := pr.p.From
	pr.mu.Unlock()
	pr.log.Log(ctx, pr.lvl, "run started", "from", from, "rows_estimate", est)
	if pr.report != nil {
		pr.report(pr.snapshot())
	}
}

// add counts rows of a committed page.
func (pr *progress) add(rows int64) {
	pr.mu.Lock()
	pr.p.Rows += rows
	pr.mu.Unlock()
	if pr.report != nil {
		pr.report(pr.snapshot())
	}
}

func (pr *progress) snapshot() Progress {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	p := pr.p
	if s := time.Since(p.Started).Seconds(); s > 0 {
		p.RowsPerSecond = float64(p.Rows) / s
	}
	p.Left, p.ETASeconds = -1, -1
	if p.Estimate >= 0 {
		p.Left = max(p.Estimate-p.Rows, 0)
		if p.RowsPerSecond > 0 {
			p.ETASeconds = math.Round(float64(p.Left) / p.RowsPerSecond)
		}
	}
	return p
}

// stop ends the progress line; a run that read no page says it started
// (begin) now, before its end is logged.
func (pr *progress) stop() {
	pr.begin(context.Background(), -1, true)
	close(pr.done)
	pr.wg.Wait()
}

// loadProgress tracks a first load's chunks and logs them at most every
// ProgressEvery ("first load progress").
type loadProgress struct {
	report func(Progress)
	done   chan struct{}
	wg     sync.WaitGroup

	mu         sync.Mutex
	p          Progress
	rowsNow    int64 // rows this process committed
	blocks     int64 // heap blocks this process has to read (re-reads included)
	blocksDone int64 // of which read and committed
}

// startLoadProgress starts the first load's progress line: chunks done of
// chunks, rows committed, rows per second and the ETA.
func startLoadProgress(o Options, log *slog.Logger, chunks, chunksDone int, rows, estimate, blocks int64) *loadProgress {
	lp := &loadProgress{report: o.OnProgress, done: make(chan struct{}), blocks: max(blocks, 1),
		p: Progress{Started: time.Now().UTC(), From: "the start", Phase: PhaseFirstLoad, Chunks: chunks, ChunksDone: chunksDone,
			Rows: rows, Estimate: estimate, Left: -1, ETASeconds: -1}}
	if lp.report != nil {
		lp.report(lp.snapshot())
	}
	every := progressEvery(o)
	lp.wg.Add(1)
	go func() {
		defer lp.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p := lp.snapshot()
				log.Info("first load progress", "chunks_done", p.ChunksDone, "chunks", p.Chunks, "rows", p.Rows,
					"rows_per_second", math.Round(p.RowsPerSecond), "rows_estimate", p.Estimate, "eta", etaText(p.ETASeconds))
			case <-lp.done:
				return
			}
		}
	}()
	return lp
}

// add counts a committed chunk (or re-read, chunk false) of blocks heap
// blocks that wrote rows.
func (lp *loadProgress) add(chunk bool, rows, blocks int64) {
	lp.mu.Lock()
	if chunk {
		lp.p.ChunksDone++
	}
	lp.p.Rows += rows
	lp.rowsNow += rows
	lp.blocksDone += blocks
	lp.mu.Unlock()
	if lp.report != nil {
		lp.report(lp.snapshot())
	}
}

func (lp *loadProgress) snapshot() Progress {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	p := lp.p
	s := time.Since(p.Started).Seconds()
	if s > 0 {
		p.RowsPerSecond = float64(lp.rowsNow) / s
	}
	if p.Estimate >= 0 {
		p.Left = max(p.Estimate-p.Rows, 0)
	}
	if lp.blocksDone > 0 && s > 0 {
		left := max(lp.blocks-lp.blocksDone, 0)
		p.ETASeconds = math.Round(s * float64(left) / float64(lp.blocksDone))
	}
	return p
}

func (lp *loadProgress) stop() {
	close(lp.done)
	lp.wg.Wait()
}

func etaText(sec float64) string {
	if sec < 0 {
		return "unknown"
	}
	return (time.Duration(sec) * time.Second).String()
}

// estimateRows asks the source how many rows the run will read from pos
// (Counter; -1 and an error when it cannot say).
func estimateRows(ctx context.Context, src source.Source, pos source.Position) (int64, error) {
	c, ok := src.(source.Counter)
	if !ok {
		return -1, errors.New("the source does not estimate rows")
	}
	return c.EstimateRows(ctx, pos)
}
