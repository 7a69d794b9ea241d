package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// The fastest plain copy two cores allow: two binary COPY pipes, each over
// one half of the source heap by ctid (a TID range scan), at the same time
// into the same empty sink table. Unordered, like syncd's first load.

// heapPages is the number of 8 kB pages of table t in the source.
func (b *bench) heapPages(ctx context.Context, t string) (int64, error) {
	var n int64
	err := b.src.QueryRow(ctx, "SELECT pg_relation_size($1::regclass) / current_setting('block_size')::bigint", t).Scan(&n)
	return n, err
}

// parallelPipes copies src table t into the empty sink table t by two
// pipes over the two ctid halves of its heap, at once, and returns the
// wall time of both.
func (b *bench) parallelPipes(ctx context.Context, t string) (time.Duration, error) {
	if err := b.emptyCopy(ctx, t); err != nil {
		return 0, err
	}
	pages, err := b.heapPages(ctx, t)
	if err != nil {
		return 0, err
	}
	half := pages/2 + 1
	halves := []string{
		fmt.Sprintf("SELECT %s FROM %s WHERE ctid >= '(0,0)' AND ctid < '(%d,0)'", itemCols, t, half),
		fmt.Sprintf("SELECT %s FROM %s WHERE ctid >= '(%d,0)'", itemCols, t, half),
	}
	start := time.Now()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, q := range halves {
		wg.Go(func() { _, errs[i] = b.pipeCopy(ctx, b.srcDB, q, b.dstDB, t+" ("+itemCols+")") })
	}
	wg.Wait()
	d := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return 0, fmt.Errorf("parallel pipes: %w", err)
		}
	}
	n, err := count(ctx, b.dst, t)
	if err != nil {
		return 0, err
	}
	var want int64
	if err := b.src.QueryRow(ctx, "SELECT count(*) FROM "+t).Scan(&want); err != nil {
		return 0, err
	}
	if n != want {
		return 0, fmt.Errorf("the two ctid halves copied %d rows of %d", n, want)
	}
	return d, nil
}

// parallelRow is the row of the first load beside the two parallel pipes,
// measured in the same rounds as the initial-sync row.
func (b *bench) parallelRow(t *table, syn, par []time.Duration) {
	ss, ps := rate(b.rows, median(syn)), rate(b.rows, median(par))
	per := make([]string, len(syn))
	for i := range syn {
		per[i] = fmt.Sprintf("%.2f", par[i].Seconds()/syn[i].Seconds())
	}
	t.add(row{
		name:   fmt.Sprintf("initial sync, %s rows, beside 2 parallel binary COPY pipes over the ctid halves", fmtRows(b.rows)),
		syncd:  fmt.Sprintf("%s (%s)", fmtRate(ss), fmtDur(median(syn))),
		limit:  fmt.Sprintf("%s (%s)", fmtRate(ps), fmtDur(median(par))),
		ratio:  fmt.Sprintf("%.2f", ss/ps),
		target: ">= 1.00",
		note:   fmt.Sprintf("ratio = syncd's rate / the pipes'; per round %s; runs pipes %s", strings.Join(per, " "), durs(par)),
	})
}

// loadRun is one first load: its wall time and the WAL written and
// checkpoints made while it ran.
type loadRun struct {
	wall      time.Duration
	wal, ckpt int64
}

// load is one first load of a table by syncd and one by the two parallel
// pipes, next to each other.
type load struct {
	syncd, pipes loadRun
	rss          int64 // syncd's peak
}

// measured runs f, a load, and reads the WAL and checkpoints around it.
func (b *bench) measured(ctx context.Context, f func() (time.Duration, error)) (loadRun, error) {
	lsn, ck, err := b.walMark(ctx)
	if err != nil {
		return loadRun{}, err
	}
	var r loadRun
	if r.wall, err = f(); err != nil {
		return r, err
	}
	r.wal, r.ckpt, err = b.walSince(ctx, lsn, ck)
	return r, err
}

// loadPair loads table t by the two pipes and by syncd, in that order or
// the other (syncdLast false), each into the emptied copy.
func (b *bench) loadPair(ctx context.Context, t string, syncdLast bool) (load, error) {
	var l load
	pipes := func() (time.Duration, error) { return b.parallelPipes(ctx, t) }
	syncd := func() (time.Duration, error) {
		r, err := b.firstLoad(ctx, t, "growth-"+t)
		l.rss = r.maxRSS
		return r.wall, err
	}
	type step struct {
		into *loadRun
		run  func() (time.Duration, error)
	}
	order := []step{{&l.syncd, syncd}, {&l.pipes, pipes}}
	if syncdLast {
		order[0], order[1] = order[1], order[0]
	}
	for _, s := range order {
		r, err := b.measured(ctx, s.run)
		if err != nil {
			return l, err
		}
		*s.into = r
	}
	fmt.Fprintf(os.Stderr, "  %s: pipes %s, syncd %s (peak RSS %s)\n", t, fmtDur(l.pipes.wall), fmtDur(l.syncd.wall), fmtMB(l.rss))
	return l, nil
}

// growth measures how the first load grows from 1M rows to 10M: syncd's
// time per row at each size, beside the same for the two parallel pipes,
// all in one window. The machine's own speed drifts by up to 2x within an
// hour (1M rows took the pipes 2.4 s in one full run and 4.5 s in the one
// before it), and a 10M load outgrows the page cache's dirty limits and
// max_wal_size where a 1M one does not; so each size is loaded twice, as
// 1M, 10M, 10M, 1M with the order of syncd and the pipes mirrored (pipes
// first, then syncd first), which takes a steady drift out of both means,
// and the target is syncd's growth over the pipes' growth: what syncd adds
// to the machine's own. The raw growth is printed beside it.
func (b *bench) growth(ctx context.Context, t *table) error {
	if err := b.ensureItems(ctx); err != nil {
		return err
	}
	big := b.o.rows(10_000_000)
	fmt.Fprintf(os.Stderr, "syncd-bench: generating %d rows for the growth row ...\n", big)
	if err := execAll(ctx, b.src, itemsDDL("items_big")); err != nil {
		return err
	}
	defer b.src.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS items_big")
	defer b.dst.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS items_big")
	if err := fill(ctx, b.src, "items_big", 1, big); err != nil {
		return err
	}
	if err := execAll(ctx, b.src, "CREATE INDEX ON items_big (updated_at, id)", "VACUUM ANALYZE items_big"); err != nil {
		return err
	}
	if err := execAll(ctx, b.dst, itemsDDL("items_big")); err != nil {
		return err
	}
	var heap int64
	if err := b.src.QueryRow(ctx, "SELECT pg_relation_size('items_big')").Scan(&heap); err != nil {
		return err
	}
	var loads [4]load
	for i, step := range []struct {
		table     string
		syncdLast bool
	}{{"items", true}, {"items_big", true}, {"items_big", false}, {"items", false}} {
		l, err := b.loadPair(ctx, step.table, step.syncdLast)
		if err != nil {
			return err
		}
		loads[i] = l
		if i == 1 {
			// syncd's first copy of items_big is checked before the
			// pipes' second load replaces it.
			same, err := sameContent(ctx, b.src, "items_big", b.dst, "items_big")
			if err != nil {
				return err
			}
			if !same {
				return fmt.Errorf("the copy of items_big differs from the source after syncd's first load")
			}
		}
	}
	mean := func(x, y loadRun) time.Duration { return (x.wall + y.wall) / 2 }
	small, smallPipes := mean(loads[0].syncd, loads[3].syncd), mean(loads[0].pipes, loads[3].pipes)
	large, largePipes := mean(loads[1].syncd, loads[2].syncd), mean(loads[1].pipes, loads[2].pipes)
	perSmall, perLarge := small.Seconds()/float64(b.rows), large.Seconds()/float64(big)
	growth := perLarge / perSmall
	pipesGrowth := (largePipes.Seconds() / float64(big)) / (smallPipes.Seconds() / float64(b.rows))
	rss := max(loads[1].rss, loads[2].rss)
	walls := func(x, y loadRun) string { return durs([]time.Duration{x.wall, y.wall}) }
	t.add(row{
		name:   fmt.Sprintf("initial sync, %s vs %s rows (%s heap), time per row, beside the 2 parallel pipes", fmtRows(big), fmtRows(b.rows), fmtMB(heap)),
		syncd:  fmt.Sprintf("%s vs %s (%.2f vs %.2f µs/row, x%.2f)", fmtDur(large), fmtDur(small), perLarge*1e6, perSmall*1e6, growth),
		limit:  fmt.Sprintf("pipes %s vs %s (x%.2f)", fmtDur(largePipes), fmtDur(smallPipes), pipesGrowth),
		ratio:  fmt.Sprintf("%.2f", growth/pipesGrowth),
		target: "<= 1.10, RSS < 100 MB",
		note: fmt.Sprintf("ratio = syncd's growth in time per row from %s to %s over the pipes' in the same window (loads %s, %s, %s, %s; the pipes first, then syncd first); syncd's own growth x%.2f; syncd / pipes %.2f at %s, %.2f at %s; runs syncd %s at %s, %s at %s; pipes %s, %s; syncd peak RSS (VmHWM) %s at %s rows, %s at %s; checkpoints (cluster-wide) while the pipes and syncd loaded %s rows, beyond the one each load starts from: %d and %d; WAL %s and %s",
			fmtRows(b.rows), fmtRows(big), fmtRows(b.rows), fmtRows(big), fmtRows(big), fmtRows(b.rows), growth, large.Seconds()/largePipes.Seconds(), fmtRows(big), small.Seconds()/smallPipes.Seconds(), fmtRows(b.rows),
			walls(loads[1].syncd, loads[2].syncd), fmtRows(big), walls(loads[0].syncd, loads[3].syncd), fmtRows(b.rows),
			walls(loads[1].pipes, loads[2].pipes), walls(loads[0].pipes, loads[3].pipes),
			fmtMB(rss), fmtRows(big), fmtMB(max(loads[0].rss, loads[3].rss)), fmtRows(b.rows),
			fmtRows(big), max(loads[1].pipes.ckpt-1, 0), max(loads[1].syncd.ckpt-1, 0), fmtMB(loads[1].pipes.wal), fmtMB(loads[1].syncd.wal)),
	})
	return nil
}

// firstLoad is one `run --once` of syncd's default configuration into the
// empty sink table t, with its peak RSS read from /proc.
func (b *bench) firstLoad(ctx context.Context, t, name string) (syncdResult, error) {
	cfg, err := b.itemsConfig(name, t, t, 0, "")
	if err != nil {
		return syncdResult{}, err
	}
	state := b.statePath(name)
	os.Remove(state)
	if err := b.emptyCopy(ctx, t); err != nil {
		return syncdResult{}, err
	}
	r, err := b.syncdHWM(ctx, "run", "--once", "--config", cfg, "--state", state)
	if err != nil {
		return r, err
	}
	n, err := count(ctx, b.dst, t)
	if err != nil {
		return r, err
	}
	var want int64
	if err := b.src.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{t}.Sanitize()).Scan(&want); err != nil {
		return r, err
	}
	if n != want {
		return r, fmt.Errorf("the copy of %s has %d rows after a first load of %d", t, n, want)
	}
	return r, nil
}

// syncdHWM runs syncd like bench.syncd and reads its peak RSS as the
// kernel keeps it, VmHWM in /proc/PID/status, every 100 ms while it runs
// (and the wait4 figure at its exit, the same counter; the larger wins).
func (b *bench) syncdHWM(ctx context.Context, args ...string) (syncdResult, error) {
	cmd := exec.CommandContext(ctx, b.o.syncd, args...)
	cmd.Env = append(os.Environ(), b.env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return syncdResult{}, err
	}
	var hwm int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if v := vmHWM(cmd.Process.Pid); v > hwm {
				hwm = v
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	err := cmd.Wait()
	close(stop)
	wg.Wait()
	r := syncdResult{wall: time.Since(start), stdout: out.Bytes(), maxRSS: hwm}
	if cmd.ProcessState != nil {
		r.exit = cmd.ProcessState.ExitCode()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			r.maxRSS = max(r.maxRSS, ru.Maxrss*1024)
		}
	}
	if err != nil {
		return r, fmt.Errorf("syncd %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return r, nil
}

// vmHWM is the peak resident set of process pid in bytes (0 when it is
// gone).
func vmHWM(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
