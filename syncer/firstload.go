package syncer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// FirstLoadOptions tune the first load of an empty copy (see firstLoad).
type FirstLoadOptions struct {
	// Workers is how many chunks are copied at once (0: no first load, the
	// copy is filled by pages as before).
	Workers int
	// ChunkBlocks is the size of a chunk in heap blocks of the source table
	// (8 kB each on a default build): the unit of work, of commit, and of
	// what a crash redoes.
	ChunkBlocks uint32
	// MinBlocks is the smallest source table, in heap blocks, that gets a
	// first load; smaller tables are copied by pages.
	MinBlocks uint32
}

// firstLoadOptions are o.FirstLoad, or source.first_load of the config
// (chunk and table sizes in 8 kB heap blocks).
func firstLoadOptions(o Options) (FirstLoadOptions, error) {
	if o.FirstLoad != nil {
		f := *o.FirstLoad
		if f.ChunkBlocks == 0 {
			f.ChunkBlocks = config.DefaultFirstLoadChunk / blockSize
		}
		return f, nil
	}
	c := o.Config
	fl := c.Source.FirstLoad
	f := FirstLoadOptions{
		Workers:     min(config.MaxFirstLoadWorkers, max(1, runtime.NumCPU())),
		ChunkBlocks: config.DefaultFirstLoadChunk / blockSize,
		MinBlocks:   config.DefaultFirstLoadMinTable / blockSize,
	}
	if fl.Workers != nil {
		f.Workers = *fl.Workers
	}
	if _, set := c.Lines["source.first_load.chunk_size"]; set {
		f.ChunkBlocks = uint32(max(fl.ChunkSize.Bytes/blockSize, 1))
	}
	if _, set := c.Lines["source.first_load.min_table_size"]; set {
		f.MinBlocks = uint32(fl.MinTableSize.Bytes / blockSize)
	}
	return f, nil
}

// blockSize is PostgreSQL's heap page size on a default build, the unit of
// source.first_load's sizes.
const blockSize = 8192

// firstLoad fills an empty copy that has no watermark yet (or resumes such
// a fill that a crash interrupted) faster than pages can: it reads the
// source from one exported snapshot in chunks of heap blocks, several at
// once, each streamed with COPY straight into the copy in one sink
// transaction. A chunk's progress is written to the state file only after
// its sink transaction has committed, and the watermark only when every
// chunk has: the greatest cursor below the run's read bound in the first
// snapshot. It returns where the page loop goes on from (the rows that
// committed since that snapshot); when the run does not qualify (a source
// that is not a source.Snapshotter never does) it returns pos unchanged
// and does nothing. docs/RELIABILITY.md ("First load")
// reasons why a resumed load, read from another snapshot, is still exact.
func firstLoad(ctx context.Context, o Options, src source.Source, dst sink.Sink, lock kind.RunLock, pos source.Position, read bool, log *slog.Logger, res *Result) (source.Position, error) {
	c := o.Config
	snap, ok := src.(source.Snapshotter)
	if !ok || !read || pos.After != nil || pos.AtLeast != "" || c.Sink.Type != config.SinkPostgres || c.Source.DeletedColumn != "" {
		return pos, nil
	}
	opt, err := firstLoadOptions(o)
	if err != nil || opt.Workers < 1 {
		return pos, err
	}
	st, _, err := o.Store.Get(c.Name)
	if err != nil {
		return pos, err
	}
	if st.Cursor != nil || st.From != "" || st.Backfill != nil {
		return pos, nil
	}
	l := &loader{o: o, opt: opt, src: src, log: log, res: res, lock: lock, fl: st.FirstLoad}
	if b, ok := dst.(sink.BinaryWriter); ok && b.WantsBinary() {
		l.binary = true
	}
	if d, ok := dst.(sink.Differ); ok {
		l.differs = d.Differs
	}
	l.target = pgutil.Qualified(sinkTable(c))
	names := make([]string, len(src.Table().Columns))
	for i, col := range src.Table().Columns {
		names[i] = col.Name
	}
	l.cols = pgutil.IdentList("", names)
	// The workers start opens at once: one per chunk left, at most
	// first_load.workers (a new load's chunks planned from the heap size
	// read before its snapshot).
	var left int
	if l.fl == nil {
		blocks, ok, err := l.qualifies(ctx, snap, sink.LockConn(dst))
		if err != nil || !ok {
			return pos, err
		}
		left = len(planChunks(blocks, l.opt.ChunkBlocks, true))
	} else {
		left = notDone(l.fl)
	}
	defer l.close(context.WithoutCancel(ctx))
	if err := l.start(ctx, pos.Before, min(l.opt.Workers, left)); err != nil {
		return pos, err
	}
	if l.fl == nil { // a small table after all
		return pos, nil
	}
	o.phase(PhaseFirstLoad)
	if err := l.run(ctx); err != nil {
		return pos, err
	}
	// Every chunk has committed: the copy holds every row of the first
	// snapshot below its bound, so the watermark may move there.
	fl := l.fl
	var rows int64
	for _, ch := range fl.Chunks {
		rows += ch.Rows
	}
	// The sink's record first: a crash between the two leaves the state
	// file behind it, and the next run resumes from the sink's record.
	if err := recordLoaded(ctx, dst, c, fl.Cursor, rows); err != nil {
		return pos, err
	}
	err = o.Store.Update(c.Name, func(st *watermark.State) error {
		st.Cursor, st.From, st.FirstLoad = fl.Cursor, "", nil
		return nil
	})
	if err != nil {
		return pos, err
	}
	log.Info("first load done", "rows", rows, "chunks", len(fl.Chunks), "workers", len(l.conns), "resumed", fl.Runs > 1,
		"duration", time.Since(l.began).Round(time.Millisecond).String())
	if fl.Cursor == nil {
		return pos, nil
	}
	return source.Position{After: fl.Cursor, Before: pos.Before}, nil
}

// sinkTable is sink.table's schema and name.
func sinkTable(c *config.Config) (string, string) {
	t, _ := config.ParseTable(c.Sink.Table)
	return t.Schema, t.Name
}

// loader is one process's share of a first load.
type loader struct {
	o      Options
	opt    FirstLoadOptions
	src    source.Source
	log    *slog.Logger
	res    *Result
	lock   kind.RunLock
	fl     *watermark.FirstLoad
	binary bool   // COPY in binary (every column built in, same type on both sides)
	target string // the copy, qualified
	cols   string // the selected columns, quoted
	where  string // the rows a chunk takes besides its blocks ("" : all)
	tidOK  bool   // the server scans a ctid range (PostgreSQL 14 and later)
	upsert bool   // resumed: rows of another snapshot may be in the copy already
	// differs, when the sink offers it, is the condition that a stored row
	// (alias t) differs from the incoming one: a resumed chunk leaves the
	// rows it holds already as they are (no new row version, no WAL).
	differs func(stored, incoming string) string
	reread  []int // resumed: the chunks done before, to read again for newer row versions
	began   time.Time
	blocks  int64 // the source's heap blocks in this process's snapshot
	rowEst  int64 // the source's estimated rows (pg_class.reltuples; -1: unknown)
	prog    *loadProgress

	conns []loadConn
	mu    sync.Mutex // the lock's connection, OnPage, res
}

// loadConn is one worker's pair of connections.
type loadConn struct {
	src, dst *pgx.Conn
	staged   bool // the upsert's staging table exists
}

// qualifies reports whether a new first load may start: the source is a
// plain table of at least min_table_size and the copy holds no row. It
// also returns the source's heap size in blocks.
func (l *loader) qualifies(ctx context.Context, src source.Snapshotter, sinkConn *pgx.Conn) (blocks int64, ok bool, err error) {
	plain, blocks, err := src.HeapBlocks(ctx)
	if err != nil {
		return 0, false, err
	}
	// A table too small for a first load is copied by pages without
	// opening the load's sessions (start checks again in its snapshot).
	if !plain || sinkConn == nil || blocks < int64(l.opt.MinBlocks) {
		return blocks, false, nil
	}
	var empty bool
	if err := sinkConn.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM "+l.target+")").Scan(&empty); err != nil {
		return 0, false, fmt.Errorf("first load: check whether the copy %s is empty: %w", l.target, err)
	}
	return blocks, empty, nil
}

// start opens the connections of workers workers (more if its plan needs
// them), exports the snapshot from the first and imports it in the others,
// and plans the chunks (a new load) or takes the ones left (a resumed
// load). It leaves l.fl nil when the table is too small for a first load.
func (l *loader) start(ctx context.Context, before string, workers int) error {
	c := l.o.Config
	l.began = time.Now()
	// The workers are opened at once (each a source and a sink
	// connection, about 20 ms apiece); the first exports the snapshot the
	// others import below.
	if err := l.openMore(ctx, max(workers, 1)); err != nil {
		return err
	}
	first := &l.conns[0]
	var snap string
	var blocks int64
	var version int
	err := first.src.QueryRow(ctx, "SELECT pg_export_snapshot(), pg_relation_size($1::regclass) / current_setting('block_size')::int8, current_setting('server_version_num')::int, "+
		"(SELECT greatest(reltuples, -1)::int8 FROM pg_class WHERE oid = $1::regclass)",
		pgutil.Qualified(l.src.Table().Ident.Schema, l.src.Table().Ident.Name)).Scan(&snap, &blocks, &version, &l.rowEst)
	if err != nil {
		return fmt.Errorf("first load of %s: export a snapshot: %w", l.src.Table().Ident, err)
	}
	l.tidOK = version >= 140000
	l.blocks = blocks
	table := pgutil.Qualified(l.src.Table().Ident.Schema, l.src.Table().Ident.Name)
	// The first session holds the table and its inheritance children (the
	// planner locks every one it expands) until the load ends, its
	// transaction open: no rewrite commits between reading which heaps the
	// chunks are block ranges of and reading the chunks. (LOCK TABLE would
	// also need the privilege on each child, which reading the parent does
	// not.)
	if _, err := first.src.Exec(ctx, "SELECT 1 FROM "+table+" LIMIT 0"); err != nil {
		return fmt.Errorf("first load of %s: lock the source table: %w", l.src.Table().Ident, err)
	}
	heaps, err := source.Heaps(ctx, first.src, table)
	if err != nil {
		return fmt.Errorf("first load of %s: %w", l.src.Table().Ident, err)
	}
	xmin, xmax, err := snapshotXids(ctx, first.src, version)
	if err != nil {
		return fmt.Errorf("first load of %s: %w", l.src.Table().Ident, err)
	}
	runs := 0
	if l.fl != nil {
		// Rows the crashed process committed may be copied again, from this
		// newer snapshot (and a row may have moved to another chunk since):
		// while the copy holds any row, chunks are upserted. A copy emptied
		// or dropped (and created again by Prepare) since holds none of the
		// chunks done: the load starts again from the beginning.
		var empty bool
		if err := first.dst.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM "+l.target+")").Scan(&empty); err != nil {
			return fmt.Errorf("first load: check whether the copy %s is empty: %w", l.target, err)
		}
		if empty {
			l.log.Warn("the copy is empty while a first load was under way: it starts again", "copy", l.target)
			l.fl = nil
		} else if why := l.changed(heaps, xmax); why != "" {
			// Resuming would read block ranges of another layout: rows
			// moved into the chunks done would never be read. And the copy
			// may hold rows of the old heap the source no longer has (a
			// TRUNCATE, a DELETE before a VACUUM FULL, a table re-created),
			// which no page reads and no repair removes later: the sink's
			// record takes the new heap now. The copy holds nothing but
			// this unfinished load's rows, so it is emptied (durably,
			// before the new load is recorded) and the load starts again
			// from this snapshot.
			l.log.Warn("the first load starts again: "+why+"; the copy, which holds only this unfinished load's rows, is emptied first", "table", l.src.Table().Ident.String(), "copy", l.target,
				"chunks_done_before", len(l.fl.Chunks)-notDone(l.fl))
			if _, err := pgutil.ExecDurable(ctx, first.dst, "DELETE FROM "+l.target); err != nil {
				return fmt.Errorf("first load: empty the copy %s to start the load again: %w", l.target, err)
			}
			runs, l.fl, empty = l.fl.Runs, nil, true
		}
		l.upsert = !empty
	}
	resumed := l.fl != nil
	if resumed {
		before = l.fl.Before
	} else if blocks < int64(l.opt.MinBlocks) {
		// Pages fill the copy; a load given up above is forgotten.
		return l.o.Store.Update(c.Name, func(st *watermark.State) error {
			st.FirstLoad = nil
			return nil
		})
	}
	if l.where, err = l.condition(ctx, first.src, before); err != nil {
		return err
	}
	if resumed {
		l.fl.Runs++
		// Row versions created since the load's first snapshot may lie in
		// the chunks done (an update that keeps the cursor moves a row
		// there from a chunk not done, into space VACUUM freed): those
		// chunks are read again for such versions.
		for i, ch := range l.fl.Chunks {
			if ch.Done {
				l.reread = append(l.reread, i)
			}
		}
	} else {
		fl := &watermark.FirstLoad{Before: before, Started: time.Now().UTC(), Runs: runs + 1, Heaps: heaps, Xmin: xmin}
		if fl.Cursor, err = l.maxCursor(ctx, first.src); err != nil {
			return err
		}
		fl.Chunks = planChunks(blocks, l.opt.ChunkBlocks, l.tidOK)
		l.fl = fl
	}
	fl := l.fl
	if err := l.o.Store.Update(c.Name, func(st *watermark.State) error {
		st.FirstLoad = fl
		return nil
	}); err != nil {
		return err
	}
	todo := notDone(fl) + len(l.reread)
	if more := min(l.opt.Workers, todo) - len(l.conns); more > 0 {
		if err := l.openMore(ctx, more); err != nil {
			return err
		}
	}
	for _, w := range l.conns[1:] {
		if _, err := w.src.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(snap)); err != nil {
			return fmt.Errorf("first load of %s: import the snapshot: %w", l.src.Table().Ident, err)
		}
	}
	l.log.Info("first load", "table", l.src.Table().Ident.String(), "copy", l.target, "chunks", len(fl.Chunks), "chunks_left", notDone(fl),
		"rereads", len(l.reread), "workers", len(l.conns), "resumed", resumed, "binary", l.binary)
	return nil
}

// xidHorizon is how many transactions may separate a resumed load from its
// first snapshot: age() compares 32-bit transaction ids, exact within 2^31.
const xidHorizon = 1 << 30

// changed says why a resumed load must not go on from its chunks done (""
// when it may): the source is not the heap they are block ranges of, or
// the load's xmin is too old to tell newer row versions apart. xmax is the
// current snapshot's.
func (l *loader) changed(heaps []watermark.LoadHeap, xmax uint64) string {
	fl, t := l.fl, l.src.Table().Ident
	switch {
	case len(fl.Heaps) == 0 || fl.Xmin == 0:
		return fmt.Sprintf("it was begun by a syncd that did not record which heap of %s it reads", t)
	case fl.Heaps[0].OID != heaps[0].OID:
		return fmt.Sprintf("%s was dropped and created again since it began (OID %d, now %d)", t, fl.Heaps[0].OID, heaps[0].OID)
	case len(fl.Heaps) != len(heaps):
		return fmt.Sprintf("the inheritance children of %s changed since it began (%d heaps, now %d)", t, len(fl.Heaps), len(heaps))
	case xmax > fl.Xmin+xidHorizon:
		return fmt.Sprintf("%d transactions ran on the source since it began, too many to tell which row versions of %s are newer", xmax-fl.Xmin, t)
	}
	for i, h := range heaps {
		was := fl.Heaps[i]
		switch {
		case was.OID != h.OID:
			return fmt.Sprintf("the inheritance children of %s changed since it began", t)
		case was.Filenode != h.Filenode:
			what := t.String()
			if i > 0 {
				what = fmt.Sprintf("the inheritance child (OID %d) of %s", h.OID, t)
			}
			return fmt.Sprintf("%s was rewritten since it began (relfilenode %d, now %d: CLUSTER, VACUUM FULL, pg_repack, a rewriting ALTER TABLE or TRUNCATE), so the chunks done no longer hold what was copied from them",
				what, was.Filenode, h.Filenode)
		}
	}
	return ""
}

// snapshotXids returns the xmin and xmax of conn's transaction snapshot as
// 64-bit transaction ids.
func snapshotXids(ctx context.Context, conn *pgx.Conn, version int) (xmin, xmax uint64, err error) {
	q := "SELECT pg_snapshot_xmin(s)::text::int8, pg_snapshot_xmax(s)::text::int8 FROM pg_current_snapshot() s"
	if version < 130000 {
		q = "SELECT txid_snapshot_xmin(s), txid_snapshot_xmax(s) FROM txid_current_snapshot() s"
	}
	var lo, hi int64
	if err := conn.QueryRow(ctx, q).Scan(&lo, &hi); err != nil {
		return 0, 0, fmt.Errorf("read the snapshot's transaction ids: %w", err)
	}
	return uint64(lo), uint64(hi), nil
}

// notDone is how many chunks of fl are left.
func notDone(fl *watermark.FirstLoad) int {
	n := 0
	for _, ch := range fl.Chunks {
		if !ch.Done {
			n++
		}
	}
	return n
}

// openMore adds n workers, opened at once; on an error the ones opened
// are kept in l.conns, so close closes them.
func (l *loader) openMore(ctx context.Context, n int) error {
	ws := make([]loadConn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range ws {
		wg.Go(func() { ws[i], errs[i] = l.open(ctx) })
	}
	wg.Wait()
	for _, w := range ws {
		if w.src != nil {
			l.conns = append(l.conns, w)
		}
	}
	return errors.Join(errs...)
}

// open opens a worker: a source connection in a read-only repeatable-read
// transaction (no snapshot taken yet) and a sink connection.
func (l *loader) open(ctx context.Context) (loadConn, error) {
	c := l.o.Config
	s, err := pgutil.ConnectBulk(ctx, c.Source.DSN, "source")
	if err != nil {
		return loadConn{}, err
	}
	if _, err := s.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		s.Close(context.WithoutCancel(ctx))
		return loadConn{}, fmt.Errorf("first load of %s: begin the snapshot: %w", l.src.Table().Ident, err)
	}
	d, err := sink.Connect(ctx, c) // sink.lock_timeout and statement_timeout
	if err != nil {
		s.Close(context.WithoutCancel(ctx))
		return loadConn{}, err
	}
	return loadConn{src: s, dst: d}, nil
}

func (l *loader) close(ctx context.Context) {
	for _, w := range l.conns {
		w.src.Close(ctx)
		w.dst.Close(ctx)
	}
}

// condition is the WHERE of every chunk besides its blocks: source.where,
// no NULL cursor column and the first cursor column below the bound (the
// rows a cursor page could read; the others are the outside pass's and
// later runs').
func (l *loader) condition(ctx context.Context, conn *pgx.Conn, before string) (string, error) {
	var conds []string
	if w := strings.TrimSpace(l.o.Config.Source.Where); w != "" {
		conds = append(conds, "("+w+")")
	}
	for _, col := range l.src.Table().Cursor {
		conds = append(conds, pgutil.Ident(col.Name)+" IS NOT NULL")
	}
	if before != "" {
		var lit string
		if err := conn.QueryRow(ctx, "SELECT quote_literal($1::text)", before).Scan(&lit); err != nil {
			return "", fmt.Errorf("first load of %s: quote the read bound: %w", l.src.Table().Ident, err)
		}
		first := l.src.Table().Cursor[0]
		conds = append(conds, pgutil.Ident(first.Name)+" < "+lit+"::"+first.Type)
	}
	return strings.Join(conds, " AND "), nil
}

// maxCursor is the greatest cursor of the rows the load copies, as text
// exactly as the server prints it (nil: there are none).
func (l *loader) maxCursor(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	cur := l.src.Table().Cursor
	names := make([]string, len(cur))
	desc := make([]string, len(cur))
	for i, col := range cur {
		names[i] = col.Name
		desc[i] = pgutil.Ident(col.Name) + " DESC"
	}
	q := "SELECT " + pgutil.IdentList("", names) + " FROM " + pgutil.Qualified(l.src.Table().Ident.Schema, l.src.Table().Ident.Name)
	if l.where != "" {
		q += " WHERE " + l.where
	}
	q += " ORDER BY " + strings.Join(desc, ", ") + " LIMIT 1"
	rr := conn.PgConn().ExecParams(ctx, q, nil, nil, nil, nil)
	var last []string
	for rr.NextRow() {
		for _, v := range rr.Values() {
			last = append(last, string(v))
		}
	}
	if _, err := rr.Close(); err != nil {
		return nil, fmt.Errorf("first load of %s: read the greatest cursor: %w", l.src.Table().Ident, err)
	}
	return last, nil
}

// planChunks splits blocks heap blocks into ranges of size blocks; the
// last range is open, so rows a resumed load finds past the first
// snapshot's end are copied too. Without ctid range scans there is one.
func planChunks(blocks int64, size uint32, tidOK bool) []watermark.LoadChunk {
	if !tidOK || blocks <= int64(size) {
		return []watermark.LoadChunk{{}}
	}
	var chunks []watermark.LoadChunk
	for from := int64(0); from < blocks; from += int64(size) {
		chunks = append(chunks, watermark.LoadChunk{From: uint32(from), To: uint32(from + int64(size))})
	}
	chunks[len(chunks)-1].To = 0
	return chunks
}

// job is a chunk to copy, or (reread) a chunk done by an earlier process
// to read again for the row versions created since the load began.
type job struct {
	i      int
	reread bool
}

// run re-reads the chunks done before and copies the chunks not done, one
// per worker at a time, until all are done, one fails, or Stop says to
// stop (chunks in flight still commit).
func (l *loader) run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var rows, todo int64
	for i, ch := range l.fl.Chunks {
		if ch.Done {
			rows += ch.Rows
		} else {
			todo += l.span(i)
		}
	}
	for _, i := range l.reread {
		todo += l.span(i)
	}
	l.prog = startLoadProgress(l.o, l.log, len(l.fl.Chunks), len(l.fl.Chunks)-notDone(l.fl), rows, l.rowEst, todo)
	defer l.prog.stop()
	next := make(chan job)
	go func() {
		defer close(next)
		jobs := make([]job, 0, len(l.fl.Chunks))
		for _, i := range l.reread {
			jobs = append(jobs, job{i: i, reread: true})
		}
		for i, ch := range l.fl.Chunks {
			if !ch.Done {
				jobs = append(jobs, job{i: i})
			}
		}
		for _, j := range jobs {
			select {
			case next <- j:
			case <-ctx.Done():
				return
			case <-l.o.Stop:
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range l.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				if err := l.chunk(ctx, &l.conns[w], j); err != nil {
					// A lock timeout names the copy and who holds it.
					cancel(sink.Explain(ctx, l.conns[w].dst, l.o.Config, []string{l.o.Config.Sink.Ident.String()}, err))
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	for _, ch := range l.fl.Chunks {
		if !ch.Done {
			l.res.Stopped = true
			return ErrStopped
		}
	}
	return nil
}

// chunk copies chunk j.i in one sink transaction and then records it; a
// re-read copies only the chunk's row versions created by a transaction
// at or past the load's first snapshot's xmin (every other visible version
// was in the same block then, and visible, so the chunk copied it), and
// records nothing.
func (l *loader) chunk(ctx context.Context, w *loadConn, j job) error {
	i := j.i
	ch := l.fl.Chunks[i]
	conds := l.where
	if j.reread {
		// age() counts back from the same transaction id for both sides: a
		// version is newer when it is younger than the load's xmin (exact
		// while fewer than 2^31 transactions separate them, see changed; a
		// frozen version of a permanent id is infinitely old, and one whose
		// 32-bit id wrapped at worst is copied again).
		conds = join(fmt.Sprintf("age(xmin) <= age('%d'::xid)", uint32(l.fl.Xmin)), conds)
	}
	if ch.From > 0 || ch.To > 0 {
		r := fmt.Sprintf("ctid >= '(%d,0)'::tid", ch.From)
		if ch.To > 0 {
			r += fmt.Sprintf(" AND ctid < '(%d,0)'::tid", ch.To)
		}
		conds = join(r, conds)
	}
	format := ""
	if l.binary {
		format = " (FORMAT binary)"
	}
	q := "SELECT " + l.cols + " FROM " + pgutil.Qualified(l.src.Table().Ident.Schema, l.src.Table().Ident.Name)
	if conds != "" {
		q += " WHERE " + conds
	}
	out := "COPY (" + q + ") TO STDOUT" + format
	l.mu.Lock()
	err := checkLock(ctx, l.lock)
	l.mu.Unlock()
	if err != nil {
		return err
	}
	var rows int64
	err = pgx.BeginFunc(ctx, w.dst, func(tx pgx.Tx) error {
		into := "COPY " + l.target + " (" + l.cols + ") FROM STDIN" + format
		if l.upsert {
			if err := l.stage(ctx, tx, w); err != nil {
				return err
			}
			into = "COPY pg_temp.syncd_first_load (" + l.cols + ") FROM STDIN" + format
		}
		n, err := pipe(ctx, w.src, out, tx.Conn(), into)
		if err != nil {
			if j.reread {
				return fmt.Errorf("re-read chunk %d (blocks %d to %s) of %s into %s: %w", i, ch.From, blockEnd(ch.To), l.src.Table().Ident, l.target, err)
			}
			return fmt.Errorf("copy chunk %d (blocks %d to %s) of %s into %s: %w", i, ch.From, blockEnd(ch.To), l.src.Table().Ident, l.target, err)
		}
		rows = n
		if l.upsert {
			// rows stays what the chunk read: a row the copy holds
			// already is not written again.
			if err = l.upsertStaged(ctx, tx); err != nil {
				return err
			}
		}
		// The chunk commits on the worker's session, not on the lock's: a
		// lock lost meanwhile (its session terminated) lets another
		// process run the source, so the chunk rolls back instead.
		l.mu.Lock()
		err = verifyLock(ctx, l.lock)
		l.mu.Unlock()
		if err != nil {
			return err
		}
		return pgutil.Durable(ctx, tx)
	})
	if err != nil {
		return err
	}
	if j.reread {
		return l.counted(rows, i, ch)
	}
	if err := l.o.Test.AfterChunk.Fire(ctx, i); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fl.Chunks[i].Done, l.fl.Chunks[i].Rows = true, rows
	fl := *l.fl
	fl.Chunks = append([]watermark.LoadChunk(nil), l.fl.Chunks...)
	err = l.o.Store.Update(l.o.Config.Name, func(st *watermark.State) error {
		st.FirstLoad = &fl
		st.TotalRows += rows
		st.TotalRead += rows
		st.TotalWritten += rows
		return nil
	})
	if err != nil {
		return err
	}
	l.prog.add(true, rows, l.span(i))
	l.res.Pages++
	l.res.Rows += rows
	l.res.Written += rows
	if l.o.OnPage != nil {
		l.o.OnPage(PageStats{Rows: rows, Written: rows})
	}
	l.log.Debug("first load chunk committed", "chunk", i, "blocks_from", ch.From, "blocks_to", blockEnd(ch.To), "rows", rows)
	return nil
}

// counted counts the rows a committed re-read of chunk i wrote.
func (l *loader) counted(rows int64, i int, ch watermark.LoadChunk) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rows > 0 {
		err := l.o.Store.Update(l.o.Config.Name, func(st *watermark.State) error {
			st.TotalRead += rows
			st.TotalWritten += rows
			return nil
		})
		if err != nil {
			return err
		}
	}
	l.prog.add(false, rows, l.span(i))
	l.res.Rows += rows
	l.res.Written += rows
	if l.o.OnPage != nil {
		l.o.OnPage(PageStats{Rows: rows, Written: rows})
	}
	l.log.Debug("first load chunk re-read", "chunk", i, "blocks_from", ch.From, "blocks_to", blockEnd(ch.To), "rows", rows)
	return nil
}

// span is how many heap blocks of this process's snapshot chunk i covers
// (at least 1): the unit of the first load's ETA.
func (l *loader) span(i int) int64 {
	ch := l.fl.Chunks[i]
	end := int64(ch.To)
	if ch.To == 0 {
		end = l.blocks
	}
	return max(end-int64(ch.From), 1)
}

func blockEnd(to uint32) string {
	if to == 0 {
		return "end"
	}
	return strconv.FormatUint(uint64(to), 10)
}

func join(a, b string) string {
	if b == "" {
		return a
	}
	return a + " AND " + b
}

// stage empties (creating it the first time) the worker's staging table,
// shaped like the copy's selected columns.
func (l *loader) stage(ctx context.Context, tx pgx.Tx, w *loadConn) error {
	q := "TRUNCATE pg_temp.syncd_first_load"
	if !w.staged {
		q = "CREATE TEMP TABLE syncd_first_load AS SELECT " + l.cols + " FROM " + l.target + " LIMIT 0"
	}
	if _, err := tx.Exec(ctx, q); err != nil {
		return fmt.Errorf("first load: staging table for %s: %w", l.target, err)
	}
	w.staged = true
	return nil
}

// upsertStaged writes the staged rows into the copy; a row already there
// (copied from an older snapshot before the crash) takes the staged values,
// which are at least as new, unless it holds them already.
func (l *loader) upsertStaged(ctx context.Context, tx pgx.Tx) error {
	key := l.o.Config.Sink.Key
	keys := map[string]bool{}
	for _, k := range key {
		keys[k] = true
	}
	var set []string
	for _, col := range l.src.Table().Columns {
		if !keys[col.Name] {
			set = append(set, pgutil.Ident(col.Name)+" = EXCLUDED."+pgutil.Ident(col.Name))
		}
	}
	action := "DO NOTHING"
	if len(set) > 0 {
		action = "DO UPDATE SET " + strings.Join(set, ", ")
		// A row the copy holds with the same values (committed by the
		// process that crashed, or re-read because its version is younger
		// than the load's first snapshot's xmin, which another session's
		// open transaction can hold back) is left as it is.
		if l.differs != nil {
			if cond := l.differs("t.", "EXCLUDED."); cond != "" {
				action += " WHERE " + cond
			}
		}
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+l.target+" AS t ("+l.cols+") SELECT "+l.cols+" FROM pg_temp.syncd_first_load ON CONFLICT ("+
		pgutil.IdentList("", key)+") "+action)
	if err != nil {
		return fmt.Errorf("first load: upsert a resumed chunk into %s: %w", l.target, err)
	}
	return nil
}

// pipe streams COPY out of src into COPY in on dst and returns the rows
// written. Only a pipe's buffer is held in memory.
func pipe(ctx context.Context, src *pgx.Conn, out string, dst *pgx.Conn, in string) (int64, error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		// CopyTo writes one row per Write; through an unbuffered pipe each
		// would become its own CopyData message to the sink and its own
		// hand-over between the goroutines. Buffered, the sink gets 64 kB
		// messages.
		bw := bufio.NewWriterSize(pw, 256<<10)
		_, err := src.PgConn().CopyTo(ctx, bw, out)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err) // nil: EOF
		done <- err
	}()
	tag, err := dst.PgConn().CopyFrom(ctx, pr, in)
	pr.CloseWithError(errors.New("the sink stopped reading"))
	rerr := <-done
	if err != nil {
		return 0, fmt.Errorf("write: %w", err)
	}
	if rerr != nil {
		return 0, fmt.Errorf("read: %w", rerr)
	}
	return tag.RowsAffected(), nil
}

// quoteLiteral quotes s as an SQL string literal (standard strings).
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
