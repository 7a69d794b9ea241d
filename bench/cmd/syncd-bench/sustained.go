package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// The sustained-change row: several writer sessions change 5,000 rows a
// second of sustitems (updates that move the cursor, and inserts) while the
// daemon syncs it @every 1s. It measures the lag from commit to visible in
// the copy (for a sample of the rows: every id divisible by sampleMod, read
// back by key), syncd's CPU per 1,000 changed rows (/proc/PID/stat of the
// daemon), and the WAL the sink database wrote per changed row, beside a
// hand-written batch upsert of the same rows in the same batches.
//
// WAL is cluster-wide (other sessions, the writers on the source database
// of the same server), so pg_current_wal_lsn differences would count other
// work. Instead a physical replication slot keeps the window's WAL, and
// pg_walinspect reads its records afterwards: a record counts when one of
// its blocks belongs to the sink database, and so does every record of a
// transaction that wrote one (its commit record). Nothing else writes the
// sink database during a window: syncd's window ends when the daemon has
// stopped, the upsert's starts after that.

const (
	sustainedRate    = 5000 // changed rows per second, all writers
	sustainedWriters = 4
	sampleMod        = 17 // coprime with the writer count: every writer's rows are sampled
	insertShare      = 5  // one row in insertShare is an insert
)

// change is one writer statement: when it committed and the ids it wrote.
type change struct {
	at  time.Time
	ids []int64
}

// version is one sampled row version: its updated_at (µs since the epoch)
// and when the writer saw its commit.
type version struct {
	micros int64
	commit time.Time
}

type sustainState struct {
	mu       sync.Mutex
	changes  []change
	rows     int64
	pending  map[int64][]version // sampled id -> versions not yet seen in the copy
	lags     []time.Duration
	overrun  int // sampled versions overwritten before the copy showed them
	inserted int64
	start    time.Time // when the writers started
	stopped  time.Time // when the writers stopped
}

// behindError is a daemon that did not catch up with the writers.
type behindError struct {
	left int // sampled rows whose last version is not in the copy
	wait time.Duration
}

func (e *behindError) Error() string {
	return fmt.Sprintf("%d sampled rows' last change never reached the copy within %s of the writers' end", e.left, e.wait)
}

// sustainedBehind is the row of a daemon that did not catch up: the lag
// of the versions it showed, and how far behind it was.
func (b *bench) sustainedBehind(t *table, st *sustainState, n int, dur time.Duration, e *behindError, cpu float64, hwm int64, runs string) {
	slices.Sort(st.lags)
	lag := "none seen"
	if len(st.lags) > 0 {
		lag = fmt.Sprintf("p50 %s, p99 %s of those seen", fmtDur(st.lags[len(st.lags)*50/100]), fmtDur(st.lags[min(len(st.lags)-1, len(st.lags)*99/100)]))
	}
	t.add(row{
		name:   fmt.Sprintf("sustained change, %d rows/s (%d writers, 1 in %d an insert) for %s on %s rows, daemon @every 1s", sustainedRate, sustainedWriters, insertShare, dur, fmtRows(n)),
		syncd:  "fell behind",
		limit:  "schedule 1s",
		ratio:  "-",
		target: "p99 <= 2s (schedule + 1s)",
		note: fmt.Sprintf("MISSED: %s; %d rows changed (%.0f rows/s achieved), %d sampled rows (1 in %d) still not in the copy %s after the writers stopped; lag %s; syncd CPU %.1f ms per 1,000 rows (%.1f s in all), peak RSS (VmHWM) %s; %s; the WAL row needs a copy that caught up",
			"the daemon did not keep up", st.rows, float64(st.rows)/st.stopped.Sub(st.start).Seconds(), e.left, sampleMod, e.wait, lag, 1e6*cpu/float64(st.rows), cpu, fmtMB(hwm), runs),
	})
}

func (b *bench) sustainFor() time.Duration {
	if b.o.sustainFor > 0 {
		return b.o.sustainFor
	}
	return max(5*time.Second, time.Duration(float64(5*time.Minute)*b.o.scale))
}

func (b *bench) sustained(ctx context.Context, t *table) error {
	n := b.o.rows(1_000_000)
	dur := b.sustainFor()
	if err := execAll(ctx, b.src, itemsDDL("sustitems")); err != nil {
		return err
	}
	if err := fill(ctx, b.src, "sustitems", 1, n); err != nil {
		return err
	}
	if err := execAll(ctx, b.src, "CREATE INDEX ON sustitems (updated_at, id)", "VACUUM ANALYZE sustitems"); err != nil {
		return err
	}
	for _, tb := range []string{"sustitems", "sustlim"} {
		if err := execAll(ctx, b.dst, itemsDDL(tb)); err != nil {
			return err
		}
		if _, err := b.pipeCopy(ctx, b.srcDB, "SELECT "+itemCols+" FROM sustitems", b.dstDB, tb+" ("+itemCols+")"); err != nil {
			return err
		}
		if err := execAll(ctx, b.dst, "VACUUM ANALYZE "+tb); err != nil {
			return err
		}
	}
	if err := execAll(ctx, b.dst, "CREATE EXTENSION IF NOT EXISTS pg_walinspect"); err != nil {
		return fmt.Errorf("the WAL per row needs pg_walinspect (PostgreSQL 15 contrib): %w", err)
	}
	var dbOID uint32
	if err := b.dst.QueryRow(ctx, "SELECT oid FROM pg_database WHERE datname = current_database()").Scan(&dbOID); err != nil {
		return err
	}
	slot := "syncd_bench_" + strings.TrimPrefix(b.dstDB, "syncd_bench_dst_")
	if _, err := b.admin.Exec(ctx, "SELECT pg_create_physical_replication_slot($1, true)", slot); err != nil {
		return fmt.Errorf("create a replication slot to keep the window's WAL: %w", err)
	}
	defer func() {
		if _, err := b.admin.Exec(context.WithoutCancel(ctx), "SELECT pg_drop_replication_slot($1)", slot); err != nil {
			fmt.Fprintf(os.Stderr, "syncd-bench: drop replication slot %s: %v; drop it by hand\n", slot, err)
		}
	}()

	cfg, state, err := b.syncedAtEnd(ctx, "sustained", "sustitems", 0)
	if err != nil {
		return err
	}
	restore, err := b.roomyCheckpoints(ctx)
	if err != nil {
		return err
	}
	defer restore()

	// syncd's window.
	if _, err := b.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return err
	}
	lsn0, ckpt0, err := b.walMark(ctx)
	if err != nil {
		return err
	}
	pages0, applied0 := b.catalogCount(ctx, "sustitems")
	d, err := startDaemon(ctx, b.o.syncd, b.env, "run", "--config", cfg, "--state", state)
	if err != nil {
		return err
	}
	defer d.stop()
	cpu0, _ := procTicks(d.pid)
	start := time.Now()
	st := &sustainState{pending: map[int64][]version{}, start: start}
	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	werrs := make([]error, sustainedWriters)
	for w := range sustainedWriters {
		wg.Go(func() { werrs[w] = b.sustainWriter(wctx, ctx, w+1, n, start, st) })
	}
	oerr := b.sustainObserve(ctx, start.Add(dur), st, stopWriters, &wg)
	stopWriters()
	wg.Wait()
	for _, err := range werrs {
		if err != nil {
			return fmt.Errorf("writer: %w", err)
		}
	}
	var behind *behindError
	if errors.As(oerr, &behind) {
		// The daemon fell behind for good: report what was measured.
		cpu1, _ := procTicks(d.pid)
		hwm := vmHWM(d.pid)
		if err := d.stop(); err != nil {
			return err
		}
		b.sustainedBehind(t, st, n, dur, behind, float64(cpu1-cpu0)/clockTicks, hwm, daemonRuns(d.errb.String()))
		return nil
	}
	if oerr != nil {
		return oerr
	}
	written := st.stopped.Sub(start)
	if err := b.caughtUp(ctx, "sustitems", 60*time.Second); err != nil {
		return err
	}
	caught := time.Since(st.stopped)
	cpu1, _ := procTicks(d.pid)
	hwm := vmHWM(d.pid)
	if err := d.stop(); err != nil {
		return err
	}
	lsn1, ckpt1, err := b.walMark(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "  syncd's window: %d rows written in %s (%d inserts), caught up %s after the writers stopped, %d sampled versions seen, daemon CPU %.1f s, VmHWM %s\n",
		st.rows, fmtDur(written), st.inserted, fmtDur(caught), len(st.lags), float64(cpu1-cpu0)/clockTicks, fmtMB(hwm))
	pages1, applied1 := b.catalogCount(ctx, "sustitems")
	runs := daemonRuns(d.errb.String())
	if same, err := sameContent(ctx, b.src, "sustitems", b.dst, "sustitems"); err != nil {
		return err
	} else if !same {
		return fmt.Errorf("the copy differs from the source after the sustained writes")
	}

	// The hand-written upsert's window: the same rows, deduplicated by
	// second as the daemon's 1 s runs read them, at the same pace.
	batches := st.batches(start)
	if _, err := b.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return err
	}
	llsn0, lckpt0, err := b.walMark(ctx)
	if err != nil {
		return err
	}
	lstart := time.Now()
	var batchRows int
	for i, ids := range batches {
		if err := sleepUntil(ctx, lstart.Add(time.Duration(i)*time.Second)); err != nil {
			return err
		}
		if err := b.upsertBatch(ctx, ids); err != nil {
			return err
		}
		batchRows += len(ids)
	}
	llsn1, lckpt1, err := b.walMark(ctx)
	if err != nil {
		return err
	}
	if same, err := sameContent(ctx, b.src, "sustitems", b.dst, "sustlim"); err != nil {
		return err
	} else if !same {
		return fmt.Errorf("the hand-written upsert's copy differs from the source")
	}

	fmt.Fprintf(os.Stderr, "syncd-bench: reading the windows' WAL (%s and %s) ...\n", lsnSpan(lsn0, lsn1), lsnSpan(llsn0, llsn1))
	sw, err := b.walOf(ctx, lsn0, lsn1, dbOID)
	if err != nil {
		return err
	}
	lw, err := b.walOf(ctx, llsn0, llsn1, dbOID)
	if err != nil {
		return err
	}
	if len(st.lags) == 0 {
		return fmt.Errorf("no sampled change became visible in the copy")
	}
	slices.Sort(st.lags)
	p50, p99 := st.lags[len(st.lags)*50/100], st.lags[min(len(st.lags)-1, len(st.lags)*99/100)]
	rows := float64(st.rows)
	achieved := rows / written.Seconds()
	cpu := float64(cpu1-cpu0) / clockTicks
	t.add(row{
		name:   fmt.Sprintf("sustained change, %d rows/s (%d writers, 1 in %d an insert) for %s on %s rows, daemon @every 1s", sustainedRate, sustainedWriters, insertShare, dur, fmtRows(n)),
		syncd:  fmt.Sprintf("p50 %s, p99 %s", fmtDur(p50), fmtDur(p99)),
		limit:  "schedule 1s",
		ratio:  fmt.Sprintf("p99 %.2fs", p99.Seconds()),
		target: "p99 <= 2s (schedule + 1s)",
		note: fmt.Sprintf("achieved %.0f rows/s (%d changed rows, %d inserts); the copy caught up %s after the writers stopped; lag of %d sampled row versions (ids divisible by %d), %d overwritten before a run; syncd CPU %.1f ms per 1,000 rows (%.1f s in all), peak RSS (VmHWM) %s; %s",
			achieved, st.rows, st.inserted, fmtDur(caught), len(st.lags), sampleMod, st.overrun, 1e6*cpu/rows, cpu, fmtMB(hwm), runs),
	})
	t.add(row{
		name:   "sustained change: sink WAL per changed row",
		syncd:  fmt.Sprintf("%.0f B/row", float64(sw.bytes)/rows),
		limit:  fmt.Sprintf("%.0f B/row", float64(lw.bytes)/rows),
		ratio:  fmt.Sprintf("%.2f (%.2f w/o FPI)", float64(sw.bytes)/float64(lw.bytes), float64(sw.bytes-sw.fpi)/float64(max(1, lw.bytes-lw.fpi))),
		target: "<= 1.20",
		note: fmt.Sprintf("limit: INSERT ... ON CONFLICT DO UPDATE of the same rows in the same %d batches (%d rows, deduplicated per second), same pace; syncd applied %d rows in %d pages (its runs coalesce more when a run takes longer than 1s); WAL of the sink database only (pg_walinspect over a replication slot, see sustained.go), both windows from a CHECKPOINT with max_wal_size 64GB and checkpoint_timeout 1h (set for the row, then put back); without full-page images syncd %.0f, upsert %.0f B/row; checkpoints (cluster-wide, any session's) in the windows %d and %d; syncd's WAL by relation: %s; upsert's: %s; syncd's by record type: %s; upsert's: %s",
			len(batches), batchRows, applied1-applied0, pages1-pages0, float64(sw.bytes-sw.fpi)/rows, float64(lw.bytes-lw.fpi)/rows, ckpt1-ckpt0, lckpt1-lckpt0, sw.top, lw.top, sw.kinds, lw.kinds),
	})
	return nil
}

// syncedAtEnd writes the config of source name (table in both databases,
// already copied by hand; pageSize 0 for the default) and points its
// watermark past the newest row, so the daemon starts with nothing to do.
func (b *bench) syncedAtEnd(ctx context.Context, name, table string, pageSize int) (cfg, state string, err error) {
	if cfg, err = b.itemsConfig(name, table, table, pageSize, ""); err != nil {
		return "", "", err
	}
	state = b.statePath(name)
	var from string
	if err := b.src.QueryRow(ctx, `SELECT to_char((max(updated_at) + interval '1 microsecond') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') FROM `+table).Scan(&from); err != nil {
		return "", "", err
	}
	if _, err := b.syncd(ctx, "resync", "--config", cfg, "--state", state, "--source", name, "--from", from); err != nil {
		return "", "", err
	}
	return cfg, state, nil
}

// sustainWriter is writer w (1-based): every 20 ms it writes the rows due
// at its share of sustainedRate, at most 250 at a time, in one statement:
// updates of random ids of its own (id ≡ w mod writers, so writers never
// wait for each other's row locks) and inserts of new ids of its own.
func (b *bench) sustainWriter(ctx, connCtx context.Context, w, n int, start time.Time, st *sustainState) error {
	conn, err := pgx.Connect(connCtx, b.url(b.srcDB))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(connCtx))
	const q = `WITH u AS (
  UPDATE sustitems SET updated_at = clock_timestamp(), price = price + 1 WHERE id = ANY($1::bigint[])
  RETURNING id, (extract(epoch FROM updated_at) * 1000000)::bigint AS micros
), i AS (
  INSERT INTO sustitems (` + itemCols + `)
  SELECT g, clock_timestamp(), s.name, s.price, s.tags, s.attrs FROM unnest($2::bigint[]) g JOIN sustitems s ON s.id = 1 + g % $3
  RETURNING id, (extract(epoch FROM updated_at) * 1000000)::bigint AS micros
)
SELECT id, micros, false FROM u UNION ALL SELECT id, micros, true FROM i`
	per := float64(sustainedRate) / sustainedWriters
	rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
	next := int64(n + w) // the next id this writer inserts
	var done int64
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		due := int64(per*time.Since(start).Seconds()) - done
		if due <= 0 {
			continue
		}
		batch := min(due, 250)
		ins := batch / insertShare
		if rng.IntN(insertShare) < int(batch%insertShare) {
			ins++
		}
		upd := make([]int64, 0, batch-ins)
		for range batch - ins {
			upd = append(upd, int64(w)+int64(sustainedWriters)*rng.Int64N(int64((n-w)/sustainedWriters+1)))
		}
		news := make([]int64, ins)
		for i := range news {
			news[i] = next
			next += sustainedWriters
		}
		// The statement is not cancelled by ctx: a write stopped half way
		// would leave a committed change unrecorded.
		rows, err := conn.Query(connCtx, q, upd, news, n)
		if err != nil {
			return err
		}
		var ids []int64
		var vs []version
		var nIns int64
		var id, micros int64
		var isIns bool
		_, err = pgx.ForEachRow(rows, []any{&id, &micros, &isIns}, func() error {
			ids = append(ids, id)
			vs = append(vs, version{micros: micros})
			if isIns {
				nIns++
			}
			return nil
		})
		if err != nil {
			return err
		}
		at := time.Now()
		done += int64(len(ids))
		st.mu.Lock()
		st.changes = append(st.changes, change{at: at, ids: ids})
		st.rows += int64(len(ids))
		st.inserted += nIns
		for i, id := range ids {
			if id%sampleMod == 0 {
				vs[i].commit = at
				st.pending[id] = append(st.pending[id], vs[i])
			}
		}
		st.mu.Unlock()
	}
}

// sustainObserve reads the sampled rows with pending versions back from
// the copy by key every 50 ms until end, stops the writers, and goes on
// until every sampled row's last version is in the copy (at most as long
// as the writers ran, and at least 60 s).
func (b *bench) sustainObserve(ctx context.Context, end time.Time, st *sustainState, stopWriters func(), wg *sync.WaitGroup) error {
	var stopped, reported time.Time
	// A daemon that fell behind (a busy machine) gets as long to catch up
	// as the writers ran: its lag is then the backlog's, and it is shown.
	wait := max(60*time.Second, time.Until(end))
	for {
		st.mu.Lock()
		ids := make([]int64, 0, len(st.pending))
		for id := range st.pending {
			ids = append(ids, id)
		}
		st.mu.Unlock()
		got := map[int64]int64{}
		if len(ids) > 0 {
			rows, err := b.dst.Query(ctx, "SELECT id, (extract(epoch FROM updated_at) * 1000000)::bigint FROM sustitems WHERE id = ANY($1)", ids)
			if err != nil {
				return err
			}
			var id, micros int64
			if _, err := pgx.ForEachRow(rows, []any{&id, &micros}, func() error { got[id] = micros; return nil }); err != nil {
				return err
			}
		}
		now := time.Now()
		st.mu.Lock()
		for id, cm := range got {
			vs := st.pending[id]
			keep := vs[:0]
			for _, v := range vs {
				switch {
				case v.micros == cm:
					st.lags = append(st.lags, now.Sub(v.commit))
				case v.micros < cm:
					st.overrun++
				default:
					keep = append(keep, v)
				}
			}
			if len(keep) == 0 {
				delete(st.pending, id)
			} else {
				st.pending[id] = keep
			}
		}
		left := len(st.pending)
		st.mu.Unlock()
		switch {
		case stopped.IsZero() && now.After(end):
			stopWriters()
			wg.Wait()
			stopped = time.Now()
			st.mu.Lock()
			st.stopped = stopped
			st.mu.Unlock()
		case !stopped.IsZero() && left == 0:
			return nil
		case !stopped.IsZero() && now.Sub(stopped) > wait:
			return &behindError{left: left, wait: wait}
		case !stopped.IsZero() && now.Sub(reported) > 10*time.Second:
			reported = now
			fmt.Fprintf(os.Stderr, "  writers stopped %s ago, %d sampled rows not yet in the copy\n", now.Sub(stopped).Round(time.Second), left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// caughtUp waits until the copy of table t has as many rows and the same
// newest updated_at as the source.
func (b *bench) caughtUp(ctx context.Context, t string, limit time.Duration) error {
	q := "SELECT count(*)::text || '/' || coalesce(max(updated_at)::text, '') FROM " + t
	deadline := time.Now().Add(limit)
	for {
		var s, c string
		if err := b.src.QueryRow(ctx, q).Scan(&s); err != nil {
			return err
		}
		if err := b.dst.QueryRow(ctx, q).Scan(&c); err != nil {
			return err
		}
		if s == c {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the copy of %s did not catch up within %s: source %s, copy %s", t, limit, s, c)
		}
		if err := sleepUntil(ctx, time.Now().Add(100*time.Millisecond)); err != nil {
			return err
		}
	}
}

// batches are the ids written in each second since start, each id once.
func (st *sustainState) batches(start time.Time) [][]int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out [][]int64
	var seen map[int64]bool
	for _, c := range st.changes {
		i := int(c.at.Sub(start) / time.Second)
		for len(out) <= i {
			out = append(out, nil)
			seen = map[int64]bool{}
		}
		for _, id := range c.ids {
			if !seen[id] {
				seen[id] = true
				out[i] = append(out[i], id)
			}
		}
	}
	return out
}

// upsertBatch is the hand-written upsert of one batch: the rows' current
// values read from the source, then one INSERT ... ON CONFLICT DO UPDATE
// into sustlim (in statements of at most 10,000 rows).
func (b *bench) upsertBatch(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	rows, err := b.src.Query(ctx, "SELECT id, updated_at::text, name, price::text, tags::text, attrs::text FROM sustitems WHERE id = ANY($1)", ids)
	if err != nil {
		return err
	}
	var args []any
	var id int64
	var ts, price, tags, attrs string
	var name *string
	if _, err := pgx.ForEachRow(rows, []any{&id, &ts, &name, &price, &tags, &attrs}, func() error {
		args = append(args, id, ts, name, price, tags, attrs)
		return nil
	}); err != nil {
		return err
	}
	const cols = 6
	for lo := 0; lo < len(args); lo += 10_000 * cols {
		part := args[lo:min(len(args), lo+10_000*cols)]
		var sb strings.Builder
		sb.WriteString("INSERT INTO sustlim AS t (" + itemCols + ") VALUES ")
		for r := 0; r < len(part)/cols; r++ {
			if r > 0 {
				sb.WriteString(", ")
			}
			p := r*cols + 1
			fmt.Fprintf(&sb, "($%d::bigint, $%d::text::timestamptz, $%d::text, $%d::text::numeric, $%d::text::text[], $%d::text::jsonb)", p, p+1, p+2, p+3, p+4, p+5)
		}
		sb.WriteString(" ON CONFLICT (id) DO UPDATE SET updated_at = EXCLUDED.updated_at, name = EXCLUDED.name, price = EXCLUDED.price, tags = EXCLUDED.tags, attrs = EXCLUDED.attrs")
		if _, err := b.dst.Exec(ctx, sb.String(), part...); err != nil {
			return fmt.Errorf("hand-written upsert: %w", err)
		}
	}
	return nil
}

// daemonRuns sums up the daemon's "run done" lines (JSON log): how many
// runs, the rows they read and wrote, and their durations.
func daemonRuns(log string) string {
	var n, read, written int64
	var ds []time.Duration
	for _, line := range strings.Split(log, "\n") {
		var r struct {
			Msg      string `json:"msg"`
			Rows     int64  `json:"rows"`
			Written  int64  `json:"written"`
			Duration string `json:"duration"`
		}
		if json.Unmarshal([]byte(line), &r) != nil || r.Msg != "run done" {
			continue
		}
		n++
		read += r.Rows
		written += r.Written
		if d, err := time.ParseDuration(r.Duration); err == nil {
			ds = append(ds, d)
		}
	}
	if n == 0 || len(ds) == 0 {
		return "no \"run done\" in the daemon's log"
	}
	slices.Sort(ds)
	return fmt.Sprintf("daemon: %d runs logged, rows read %d, written %d, run duration p50 %s, p99 %s, max %s",
		n, read, written, fmtDur(ds[len(ds)/2]), fmtDur(ds[min(len(ds)-1, len(ds)*99/100)]), fmtDur(ds[len(ds)-1]))
}

// catalogCount is the pages and rows the syncd catalog recorded for the
// copy of table (0, 0 when it has none).
func (b *bench) catalogCount(ctx context.Context, table string) (pages, rows int64) {
	_ = b.dst.QueryRow(ctx, "SELECT coalesce(sum(pages), 0), coalesce(sum(rows), 0) FROM syncd.copies WHERE copy_table LIKE '%.' || $1", table).Scan(&pages, &rows)
	return pages, rows
}

// roomyCheckpoints sets max_wal_size and checkpoint_timeout so large
// that neither WAL window checkpoints by itself, and returns what puts
// them back. Without it the windows are not alike: syncd's runs while the
// writers fill the same cluster's WAL (in production the source is
// another server), so max_wal_size forces a checkpoint every few seconds
// there and not in the upsert's window, and after each checkpoint the
// first change of every page logs the page whole. With it, each window
// starts at a CHECKPOINT and logs each page it touches whole once.
// Checkpoints other sessions request (CREATE DATABASE) still fall where
// they fall: the row counts them.
func (b *bench) roomyCheckpoints(ctx context.Context) (func(), error) {
	settings := [][2]string{{"max_wal_size", "64GB"}, {"checkpoint_timeout", "1h"}}
	var undo []string
	for _, kv := range settings {
		var setting, unit, file string
		if err := b.admin.QueryRow(ctx, "SELECT setting, coalesce(unit, ''), coalesce(sourcefile, '') FROM pg_settings WHERE name = $1", kv[0]).Scan(&setting, &unit, &file); err != nil {
			return nil, fmt.Errorf("read %s: %w", kv[0], err)
		}
		if strings.HasSuffix(file, "postgresql.auto.conf") {
			// The value pg_settings gives is in the setting's unit ("MB", "s"); a
			// multiplier unit ("8kB") is none here.
			undo = append(undo, fmt.Sprintf("ALTER SYSTEM SET %s = '%s%s'", kv[0], setting, unit))
		} else {
			undo = append(undo, "ALTER SYSTEM RESET "+kv[0])
		}
		if _, err := b.admin.Exec(ctx, fmt.Sprintf("ALTER SYSTEM SET %s = '%s'", kv[0], kv[1])); err != nil {
			return nil, fmt.Errorf("set %s for the WAL windows: %w", kv[0], err)
		}
	}
	if _, err := b.admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return nil, err
	}
	return func() {
		ctx := context.WithoutCancel(ctx)
		for _, q := range append(undo, "SELECT pg_reload_conf()") {
			if _, err := b.admin.Exec(ctx, q); err != nil {
				fmt.Fprintf(os.Stderr, "syncd-bench: %s: %v; put max_wal_size and checkpoint_timeout back by hand\n", q, err)
			}
		}
	}, nil
}

// walMark is the server's current WAL position and its checkpoint count.
func (b *bench) walMark(ctx context.Context) (string, int64, error) {
	var lsn string
	var ckpt int64
	err := b.admin.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text, checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter").Scan(&lsn, &ckpt)
	return lsn, ckpt, err
}

// walSince is the WAL written and the checkpoints made since walMark
// returned lsn and ckpt.
func (b *bench) walSince(ctx context.Context, lsn string, ckpt int64) (int64, int64, error) {
	now, nowCkpt, err := b.walMark(ctx)
	if err != nil {
		return 0, 0, err
	}
	var bytes int64
	err = b.admin.QueryRow(ctx, "SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint", now, lsn).Scan(&bytes)
	return bytes, nowCkpt - ckpt, err
}

func lsnSpan(a, b string) string { return a + ".." + b }

// walBytes is the WAL of one database in one window.
type walBytes struct {
	bytes, fpi, records int64
	top                 string // the biggest relations, "name bytes (fpi)"
	kinds               string // the biggest record types, "rm/type bytes (fpi)"
}

// walOf sums the WAL records between two positions that belong to the
// sink database (oid db): a block of one of its relations, or the
// transaction of one that does (its commit record).
func (b *bench) walOf(ctx context.Context, from, to string, db uint32) (walBytes, error) {
	const q = `WITH r AS (
  SELECT xid::text::bigint AS x, record_length AS len, fpi_length AS fpi, resource_manager AS rm, record_type AS rt,
    substring(block_ref FROM 'rel \d+/(\d+)/\d+')::oid AS db, substring(block_ref FROM 'rel \d+/\d+/(\d+)')::oid AS node
  FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
), ours AS (
  SELECT * FROM r WHERE db = $3 OR (x <> 0 AND x IN (SELECT x FROM r WHERE db = $3))
), by AS (
  SELECT coalesce(pg_filenode_relation(0, node)::regclass::text, CASE WHEN node IS NULL THEN rm ELSE 'filenode ' || node END) AS rel,
    sum(len) AS len, sum(fpi) AS fpi
  FROM ours GROUP BY 1
), kind AS (
  SELECT rm || '/' || rt AS k, sum(len) AS len, sum(fpi) AS fpi, count(*) AS n FROM ours GROUP BY 1
)
SELECT (SELECT coalesce(sum(len), 0) FROM ours), (SELECT coalesce(sum(fpi), 0) FROM ours), (SELECT count(*) FROM ours),
  coalesce((SELECT string_agg(rel || ' ' || pg_size_pretty(len) || ' (FPI ' || pg_size_pretty(fpi) || ')', ', ' ORDER BY len DESC)
    FROM (SELECT * FROM by ORDER BY len DESC LIMIT 6) t), ''),
  coalesce((SELECT string_agg(k || ' ' || n || ' records ' || pg_size_pretty(len) || ' (FPI ' || pg_size_pretty(fpi) || ')', ', ' ORDER BY len DESC)
    FROM (SELECT * FROM kind ORDER BY len DESC LIMIT 8) t), '')`
	var w walBytes
	err := b.dst.QueryRow(ctx, q, from, to, db).Scan(&w.bytes, &w.fpi, &w.records, &w.top, &w.kinds)
	if err != nil {
		return w, fmt.Errorf("read the WAL from %s to %s with pg_walinspect: %w", from, to, err)
	}
	return w, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// daemon is a running `syncd run`.
type daemon struct {
	pid  int
	cmd  *exec.Cmd
	done chan error
	errb *strings.Builder
	once sync.Once
	err  error
}

// startDaemon starts syncd with args and waits 2 s to see that it stays
// up.
func startDaemon(ctx context.Context, path string, env []string, args ...string) (*daemon, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), env...)
	d := &daemon{cmd: cmd, done: make(chan error, 1), errb: &strings.Builder{}}
	cmd.Stderr = d.errb
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d.pid = cmd.Process.Pid
	go func() { d.done <- cmd.Wait() }()
	select {
	case err := <-d.done:
		return nil, fmt.Errorf("the daemon did not start: %v: %s", err, strings.TrimSpace(d.errb.String()))
	case <-time.After(2 * time.Second):
	}
	return d, nil
}

// stop sends SIGTERM and waits (at most 30 s) for the daemon to exit.
func (d *daemon) stop() error {
	d.once.Do(func() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-d.done:
			if err != nil {
				d.err = fmt.Errorf("daemon: %w: %s", err, strings.TrimSpace(d.errb.String()))
			}
		case <-time.After(30 * time.Second):
			d.cmd.Process.Kill()
			<-d.done
			d.err = fmt.Errorf("the daemon did not stop within 30s of SIGTERM")
		}
	})
	return d.err
}
