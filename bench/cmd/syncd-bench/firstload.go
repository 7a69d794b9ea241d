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

// lastInitial is the initial-sync row's syncd median, for the growth row.
var lastInitial struct {
	rows int
	wall time.Duration
	rss  int64
}

// growth measures the first load at 10M rows against 1M: syncd's time per
// row at each size (10M once, 1M from the initial-sync row when it ran, else
// once here), the two parallel pipes at 10M for scale, and syncd's peak RSS.
func (b *bench) growth(ctx context.Context, t *table) error {
	if err := b.ensureItems(ctx); err != nil {
		return err
	}
	small, smallRSS := lastInitial.wall, lastInitial.rss
	if lastInitial.rows != b.rows || small == 0 {
		r, err := b.firstLoad(ctx, "items", "growth-small")
		if err != nil {
			return err
		}
		small, smallRSS = r.wall, r.maxRSS
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
	// The checkpoints and WAL of each 10M window say how much of the
	// growth is the server's (a load that outgrows max_wal_size checkpoints
	// while it runs; the 1M loads do not). Each window holds the CHECKPOINT
	// that emptyCopy makes before the load, left out of the count.
	lsn0, ck0, err := b.walMark(ctx)
	if err != nil {
		return err
	}
	pipes, err := b.parallelPipes(ctx, "items_big")
	if err != nil {
		return err
	}
	pipesWAL, pipesCk, err := b.walSince(ctx, lsn0, ck0)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "  %d rows: pipes %s\n", big, fmtDur(pipes))
	if lsn0, ck0, err = b.walMark(ctx); err != nil {
		return err
	}
	r, err := b.firstLoad(ctx, "items_big", "growth-big")
	if err != nil {
		return err
	}
	syncdWAL, syncdCk, err := b.walSince(ctx, lsn0, ck0)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "  %d rows: syncd %s (peak RSS %s)\n", big, fmtDur(r.wall), fmtMB(r.maxRSS))
	same, err := sameContent(ctx, b.src, "items_big", b.dst, "items_big")
	if err != nil {
		return err
	}
	if !same {
		return fmt.Errorf("the copy of items_big differs from the source after the first load")
	}
	perSmall := small.Seconds() / float64(b.rows)
	perBig := r.wall.Seconds() / float64(big)
	t.add(row{
		name:   fmt.Sprintf("initial sync, %s vs %s rows (%s heap), time per row", fmtRows(big), fmtRows(b.rows), fmtMB(heap)),
		syncd:  fmt.Sprintf("%s vs %s (%.2f vs %.2f µs/row)", fmtDur(r.wall), fmtDur(small), perBig*1e6, perSmall*1e6),
		limit:  fmt.Sprintf("growth 1.00; pipes %s", fmtDur(pipes)),
		ratio:  fmt.Sprintf("%.2f", perBig/perSmall),
		target: "<= 1.10, RSS < 100 MB",
		note: fmt.Sprintf("ratio = time per row at %s over at %s; syncd peak RSS (VmHWM) %s at %s rows, %s at %s; 2 parallel pipes at %s: %s, syncd / pipes %.2f; checkpoints (cluster-wide) while the pipes and syncd loaded %s rows, beyond the one each load starts from: %d and %d; WAL %s and %s",
			fmtRows(big), fmtRows(b.rows), fmtMB(r.maxRSS), fmtRows(big), fmtMB(smallRSS), fmtRows(b.rows), fmtRows(big), fmtRate(rate(big, pipes)), r.wall.Seconds()/pipes.Seconds(),
			fmtRows(big), max(pipesCk-1, 0), max(syncdCk-1, 0), fmtMB(pipesWAL), fmtMB(syncdWAL)),
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
