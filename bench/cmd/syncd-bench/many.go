package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgutil"
)

// many measures one daemon with a pattern source of 1,000 small tables
// (20 rows each) at @every 1m: the first start (every copy made), then,
// after one cycle left to settle, one whole idle cycle (every source ran
// once more with nothing new), then one
// cycle after rows changed in 1% of the tables (each changed copy compared
// with its table row by row). A cycle ends when every source's ok-run
// counter in /metrics has moved, so the row takes about five periods and
// no fixed sleep. A measured cycle reads /metrics every 15 s, as a
// Prometheus would (scrapeEvery): each scrape of 1,000 sources' series
// costs the daemon about 0.2 s of CPU, so the 250 ms of the first start
// would make the scrapes, not the runs, the CPU measured. During each
// cycle it samples the syncd sessions per
// database (pg_stat_activity every 100 ms), and it reads the daemon's CPU
// time (/proc/PID/stat), RSS (/proc/PID/status) and its log lines.
//
// The limit is the least work an idle cycle needs: for each table, one
// query for a row after its newest (updated_at, id), sent by hand on one
// session.
func (b *bench) many(ctx context.Context, t *table) error {
	n := max(50, int(1000*b.o.scale))
	period := time.Minute
	if b.o.scale < 0.5 {
		period = 10 * time.Second // a smoke test: the same steps, shorter cycles
	}
	const rowsPer = 20
	fmt.Fprintf(os.Stderr, "syncd-bench: creating %d tables of %d rows ...\n", n, rowsPer)
	if _, err := b.src.Exec(ctx, fmt.Sprintf(`CREATE SCHEMA many;
DO $$ BEGIN FOR i IN 1..%d LOOP
  EXECUTE format('CREATE TABLE many.t%%s (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), v text)', lpad(i::text, 4, '0'));
  EXECUTE format('CREATE INDEX ON many.t%%s (updated_at, id)', lpad(i::text, 4, '0'));
  EXECUTE format('INSERT INTO many.t%%s (id, v) SELECT g, ''v'' || g FROM generate_series(1, %d) g', lpad(i::text, 4, '0'));
END LOOP; END $$`, n, rowsPer)); err != nil {
		return fmt.Errorf("create the %d tables: %w", n, err)
	}
	if err := execAll(ctx, b.src, "VACUUM ANALYZE"); err != nil {
		return err
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("t%04d", i+1)
	}
	every := period.String()
	if period%time.Minute == 0 {
		every = fmt.Sprintf("%dm", period/time.Minute)
	}
	cfg, err := b.writeConfig("many", fmt.Sprintf(`name: many
schedule: "@every %s"
source:
  dsn: %s
  table: many.*
  cursor: [updated_at, id]
sink:
  dsn: %s
  table: many.*
`, every, b.url(b.srcDB), b.url(b.dstDB)))
	if err != nil {
		return err
	}
	limit, err := b.idleChecks(ctx, names)
	if err != nil {
		return err
	}

	d, err := b.startDaemon(ctx, cfg, b.statePath("many"))
	if err != nil {
		return err
	}
	defer d.stop()
	sampler := b.sampleSessions(ctx)
	defer sampler.stop()

	// The first start: every source runs once (the daemon's run at start).
	start := time.Now()
	first, moved, err := d.cycle(ctx, nil, n, 5*time.Minute+time.Duration(n)*time.Second, firstEvery)
	if err == nil && moved < n {
		err = fmt.Errorf("%d of %d copies made in %s (log %s)", moved, n, fmtDur(time.Since(start)), d.log)
	}
	if err != nil {
		return fmt.Errorf("first start: %w", err)
	}
	initial := time.Since(start)
	for _, name := range names {
		if err := sameRows(ctx, b.src, b.dst, "many."+name); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "  first start: %d copies made and equal in %s\n", n, fmtDur(initial))

	// One idle cycle: every source runs once more, or as many as do in two
	// periods and a minute (a daemon that cannot keep up is a figure, not
	// an error: the row says how many ran). It is measured from the end of
	// a first cycle after the start, not measured: the scheduled runs
	// begin one period after the start, so until then the daemon runs
	// nothing and a window from the start would spread its own idle costs
	// (the garbage of the first start, timers) over fewer runs.
	wait := 2*period + time.Minute
	settled, _, err := d.cycle(ctx, first, n, wait, scrapeEvery)
	if err != nil {
		return fmt.Errorf("cycle after the start: %w", err)
	}
	idle, err := d.measure(ctx, sampler, settled, n, wait)
	if err != nil {
		return fmt.Errorf("idle cycle: %w", err)
	}
	if idle.written != 0 {
		return fmt.Errorf("idle cycle: %d rows written with nothing changed", idle.written)
	}
	fmt.Fprintf(os.Stderr, "  idle cycle: %s\n", idle)

	// 1% of the tables change: 2 rows updated, 3 inserted in each.
	changed := max(1, n/100)
	var touched []string
	for i := range changed {
		name := "many." + names[i*(n/changed)]
		touched = append(touched, name)
		if err := execAll(ctx, b.src,
			`UPDATE `+name+` SET v = v || ' changed', updated_at = clock_timestamp() WHERE id IN (3, 17)`,
			fmt.Sprintf(`INSERT INTO %s (id, v) SELECT g, 'new ' || g FROM generate_series(%d, %d) g`, name, rowsPer+1, rowsPer+3)); err != nil {
			return err
		}
	}
	changedAt := time.Now()
	var caught sync.Map // table -> time.Duration from the change
	cctx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { b.watchCopies(cctx, touched, changedAt, &caught) })
	busy, err := d.measure(ctx, sampler, idle.after, n, wait)
	if err == nil {
		// A changed table's run that began before the change ends in the
		// cycle without it: its next run, within a period, brings it.
		deadline := time.Now().Add(period + 30*time.Second)
		for !allCaught(&caught, touched) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	stopWatch()
	wg.Wait()
	if err != nil {
		return fmt.Errorf("cycle after the changes: %w", err)
	}
	var slowest time.Duration
	nCaught := 0
	for _, name := range touched {
		if v, ok := caught.Load(name); ok {
			slowest = max(slowest, v.(time.Duration))
			nCaught++
			if err := sameRows(ctx, b.src, b.dst, name); err != nil { // once more, at the end
				return err
			}
		}
	}
	end, err := d.scrape(ctx)
	if err != nil {
		return err
	}
	busy.written = int64(end.written - idle.after.written)
	if want := int64(nCaught * 5); nCaught == changed && busy.written != want {
		return fmt.Errorf("after the changes: %d rows written, want %d (2 updated and 3 inserted in each of %d tables)", busy.written, want, changed)
	}
	caughtText := fmt.Sprintf("the %d changed copies equal to their tables row by row, the last %s after the change", changed, fmtDur(slowest))
	if nCaught < changed {
		caughtText = fmt.Sprintf("only %d of the %d changed copies equal to their tables (row by row) %s after the change", nCaught, changed, fmtDur(time.Since(changedAt)))
	}
	fmt.Fprintf(os.Stderr, "  cycle after changes: %s; %s\n", busy, caughtText)
	if err := d.stop(); err != nil {
		return err
	}

	title := fmt.Sprintf("%s tables x %d rows, one pattern, one daemon, @every %s", fmtRows(n), rowsPer, every)
	t.add(row{
		name:   "many tables idle: " + title,
		syncd:  idle.figure(n),
		limit:  fmt.Sprintf("%s by hand", fmtDur(limit)),
		ratio:  fmt.Sprintf("%.0f", idle.runSeconds/limit.Seconds()),
		target: fmt.Sprintf("every source run within the %s period; a few ms a run", every),
		note: fmt.Sprintf("%s; first start (%d copies made) %s; limit: one query per table for a row after its newest (updated_at, id), on one session; ratio: run-seconds of the cycle over the limit",
			idle.note(), n, fmtDur(initial)),
	})
	t.add(row{
		name:   fmt.Sprintf("many tables, rows changed in %d of them (1%%): %s", changed, title),
		syncd:  busy.figure(n),
		limit:  fmt.Sprintf("%s by hand", fmtDur(limit)),
		ratio:  fmt.Sprintf("%.0f", busy.runSeconds/limit.Seconds()),
		target: fmt.Sprintf("changed copies equal within the %s period", every),
		note:   fmt.Sprintf("%s; %d rows written; %s", busy.note(), busy.written, caughtText),
	})
	return nil
}

func fmtSec(s float64) string { return strconv.FormatFloat(s, 'f', 1, 64) }

// idleChecks is the limit: one query per table for the first row after
// its newest (updated_at, id), as an idle run needs, on one session.
func (b *bench) idleChecks(ctx context.Context, names []string) (time.Duration, error) {
	conn, err := pgx.Connect(ctx, b.url(b.srcDB))
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	type mark struct {
		at time.Time
		id int64
	}
	marks := make([]mark, len(names))
	for i, name := range names {
		if err := conn.QueryRow(ctx, `SELECT updated_at, id FROM many.`+name+` ORDER BY updated_at DESC, id DESC LIMIT 1`).Scan(&marks[i].at, &marks[i].id); err != nil {
			return 0, err
		}
	}
	var walls []time.Duration
	for range b.o.runs {
		start := time.Now()
		for i, name := range names {
			var id int64
			err := conn.QueryRow(ctx, `SELECT id FROM many.`+name+` WHERE (updated_at, id) > ($1, $2) ORDER BY updated_at, id LIMIT 1`, marks[i].at, marks[i].id).Scan(&id)
			if err != pgx.ErrNoRows {
				return 0, fmt.Errorf("idle check of many.%s: %v (want no row)", name, err)
			}
		}
		walls = append(walls, time.Since(start))
	}
	return median(walls), nil
}

// sameRows compares one table of the source with its copy row by row (the
// rows as text, in id order).
func sameRows(ctx context.Context, src, dst *pgx.Conn, table string) error {
	q := `SELECT count(*), coalesce(string_agg(x::text, E'\n' ORDER BY id), '') FROM (SELECT id, updated_at, v FROM ` + table + `) x`
	var n1, n2 int64
	var a, b string
	if err := src.QueryRow(ctx, q).Scan(&n1, &a); err != nil {
		return err
	}
	if err := dst.QueryRow(ctx, q).Scan(&n2, &b); err != nil {
		return fmt.Errorf("the copy %s: %w", table, err)
	}
	if a != b {
		return fmt.Errorf("the copy of %s differs from it: %d rows against %d", table, n2, n1)
	}
	return nil
}

func allCaught(caught *sync.Map, tables []string) bool {
	for _, name := range tables {
		if _, ok := caught.Load(name); !ok {
			return false
		}
	}
	return true
}

// watchCopies records, for each table, how long after at its copy was
// first equal to it (polled every 100 ms on sessions of its own).
func (b *bench) watchCopies(ctx context.Context, tables []string, at time.Time, caught *sync.Map) {
	src, err := pgx.Connect(ctx, b.url(b.srcDB))
	if err != nil {
		return
	}
	defer src.Close(context.WithoutCancel(ctx))
	dst, err := pgx.Connect(ctx, b.url(b.dstDB))
	if err != nil {
		return
	}
	defer dst.Close(context.WithoutCancel(ctx))
	left := len(tables)
	for left > 0 && ctx.Err() == nil {
		for _, name := range tables {
			if _, ok := caught.Load(name); ok {
				continue
			}
			if sameRows(ctx, src, dst, name) == nil {
				caught.Store(name, time.Since(at))
				left--
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// sessions samples the syncd sessions per database every 100 ms and keeps
// the peak of each since the last take.
type sessions struct {
	mu       sync.Mutex
	src, dst int
	err      error
	stop     func()
}

func (b *bench) sampleSessions(ctx context.Context) *sessions {
	s := &sessions{}
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	s.stop = func() { cancel(); wg.Wait() }
	wg.Go(func() {
		conn, err := pgx.Connect(sctx, b.o.adminURL)
		if err != nil {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			return
		}
		defer conn.Close(context.WithoutCancel(sctx))
		for sctx.Err() == nil {
			var src, dst int
			err := conn.QueryRow(sctx, `SELECT count(*) FILTER (WHERE datname = $2), count(*) FILTER (WHERE datname = $3)
FROM pg_stat_activity WHERE application_name = $1`, pgutil.AppName, b.srcDB, b.dstDB).Scan(&src, &dst)
			s.mu.Lock()
			if err != nil && sctx.Err() == nil {
				s.err = err
			}
			s.src, s.dst = max(s.src, src), max(s.dst, dst)
			s.mu.Unlock()
			select {
			case <-sctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	return s
}

// take returns the peaks since the last take and starts new ones.
func (s *sessions) take() (src, dst int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src, dst, err = s.src, s.dst, s.err
	s.src, s.dst = 0, 0
	return src, dst, err
}

// daemonProc is a syncd daemon started by the benchmark, its admin address
// and its log file.
type daemonProc struct {
	cmd  *exec.Cmd
	addr string
	log  string
	done chan error
	once sync.Once
	err  error
}

func (b *bench) startDaemon(ctx context.Context, cfg, state string) (*daemonProc, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	d := &daemonProc{addr: addr, log: filepath.Join(b.dir, "many.log"), done: make(chan error, 1)}
	f, err := os.Create(d.log)
	if err != nil {
		return nil, err
	}
	d.cmd = exec.CommandContext(ctx, b.o.syncd, "run", "--config", cfg, "--state", state, "--listen", addr, "--log-format", "json")
	d.cmd.Env = append(os.Environ(), b.env...)
	d.cmd.Stdout, d.cmd.Stderr = f, f
	if err := d.cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() {
		err := d.cmd.Wait()
		f.Close()
		d.done <- err
	}()
	return d, nil
}

// stop ends the daemon with SIGTERM (SIGKILL after 60 s).
func (d *daemonProc) stop() error {
	d.once.Do(func() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-d.done:
			if err != nil {
				d.err = fmt.Errorf("daemon: %w (log %s)", err, d.log)
			}
		case <-time.After(60 * time.Second):
			d.cmd.Process.Kill()
			<-d.done
			d.err = fmt.Errorf("the daemon did not stop within 60s of SIGTERM (log %s)", d.log)
		}
	})
	return d.err
}

// scrape reads the daemon's per-source ok-run counters, the sum of its run
// durations and the rows it wrote.
type scrape struct {
	ok         map[string]float64
	failed     float64
	runSeconds float64
	written    float64
}

func (d *daemonProc) scrape(ctx context.Context) (scrape, error) {
	s := scrape{ok: map[string]float64{}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.addr+"/metrics", nil)
	if err != nil {
		return s, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		name, labels, _ := strings.Cut(line[:sp], "{")
		switch name {
		case "syncd_runs_total":
			src := label(labels, "source")
			switch label(labels, "outcome") {
			case "ok":
				s.ok[src] = v
			case "failed":
				s.failed += v
			}
		case "syncd_run_duration_seconds_sum":
			s.runSeconds += v
		case "syncd_rows_written_total":
			s.written += v
		}
	}
	return s, sc.Err()
}

func label(labels, name string) string {
	_, v, ok := strings.Cut(labels, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, `"`)
	return v
}

// How often a cycle reads /metrics: often on the first start, whose
// figure is its wall time; every scrapeEvery in a measured cycle, whose
// figure is the daemon's CPU (a scrape of 1,000 sources costs it ~0.2 s).
const (
	firstEvery  = 250 * time.Millisecond
	scrapeEvery = 15 * time.Second
)

// cycle waits until n sources each have more ok runs than in from (nil:
// at least one), or until timeout, reading /metrics every every, and
// returns the counters then and how many sources moved. A failed run or a
// daemon that exits ends the wait with an error.
func (d *daemonProc) cycle(ctx context.Context, from *scrape, n int, timeout, every time.Duration) (*scrape, int, error) {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case err := <-d.done:
			d.done <- err
			return nil, 0, fmt.Errorf("the daemon exited: %v (log %s)", err, d.log)
		default:
		}
		s, err := d.scrape(ctx)
		if err == nil {
			if from != nil && s.failed > from.failed || from == nil && s.failed > 0 {
				return nil, 0, fmt.Errorf("%.0f runs failed (log %s)", s.failed, d.log)
			}
			moved := 0
			for src, v := range s.ok {
				if from == nil && v > 0 || from != nil && v > from.ok[src] {
					moved++
				}
			}
			if moved >= n || time.Now().After(deadline) {
				return &s, moved, nil
			}
		} else if time.Now().After(deadline) {
			return nil, 0, err
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(min(every, max(time.Until(deadline), time.Millisecond))):
		}
	}
}

// cycleStats is what one cycle cost the daemon.
type cycleStats struct {
	wall               time.Duration
	sources            int // that ran at least once in the window
	runs               int
	runSeconds         float64
	written            int64
	srcPeak, dstPeak   int
	rss, cpu           int64 // bytes; CPU in clock ticks
	logLines           int
	after              *scrape
	perMinute, perHour float64 // CPU seconds a minute, log lines an hour
}

// cpuPerRun is the daemon's CPU over the window divided by the runs in it.
func (c cycleStats) cpuPerRun() time.Duration {
	if c.runs == 0 {
		return 0
	}
	return time.Duration(float64(c.cpu) / clockTicks / float64(c.runs) * float64(time.Second))
}

func (c cycleStats) perRun() time.Duration {
	if c.runs == 0 {
		return 0
	}
	return time.Duration(c.runSeconds / float64(c.runs) * float64(time.Second))
}

// figure is the row's syncd column: the cycle's run time, or how far it
// got when not every source ran.
func (c cycleStats) figure(n int) string {
	if c.sources < n {
		return fmt.Sprintf("cycle not done: %d of %d sources ran in %s", c.sources, n, fmtDur(c.wall))
	}
	return fmt.Sprintf("cycle %s run-s (%s/run)", fmtSec(c.runSeconds), fmtDur(c.perRun()))
}

func (c cycleStats) note() string {
	return fmt.Sprintf("%d runs of %d sources in %s (%s run-s); peak syncd sessions %d on the source database, %d on the sink's; RSS %s; CPU %.2f s/min, %.1f ms a run (/metrics read every %s); %.0f log lines/h (%d lines in the %s window, JSON at info)",
		c.runs, c.sources, fmtDur(c.wall), fmtSec(c.runSeconds), c.srcPeak, c.dstPeak, fmtMB(c.rss), c.perMinute, c.cpuPerRun().Seconds()*1000, scrapeEvery, c.perHour, c.logLines, fmtDur(c.wall))
}

func (c cycleStats) String() string {
	return fmt.Sprintf("%.1f run-s (%s/run), %s", c.runSeconds, fmtDur(c.perRun()), c.note())
}

// measure waits for one cycle after from (every source ran once more, or
// wait passed) and returns what it cost: the daemon's CPU and log lines
// over the window, the peak sessions, the RSS at its end.
func (d *daemonProc) measure(ctx context.Context, sampler *sessions, from *scrape, n int, wait time.Duration) (cycleStats, error) {
	pid := d.cmd.Process.Pid
	cpu0, err := cpuTicks(pid)
	if err != nil {
		return cycleStats{}, err
	}
	lines0, err := countLines(d.log)
	if err != nil {
		return cycleStats{}, err
	}
	if _, _, err := sampler.take(); err != nil {
		return cycleStats{}, err
	}
	start := time.Now()
	after, moved, err := d.cycle(ctx, from, n, wait, scrapeEvery)
	if err != nil {
		return cycleStats{}, err
	}
	c := cycleStats{wall: time.Since(start), after: after, sources: moved}
	cpu1, err := cpuTicks(pid)
	if err != nil {
		return c, err
	}
	lines1, err := countLines(d.log)
	if err != nil {
		return c, err
	}
	c.srcPeak, c.dstPeak, err = sampler.take()
	if err != nil {
		return c, err
	}
	if c.rss, err = rss(pid); err != nil {
		return c, err
	}
	for src, v := range after.ok {
		c.runs += int(v - from.ok[src])
	}
	c.runSeconds = after.runSeconds - from.runSeconds
	c.written = int64(after.written - from.written)
	c.cpu = cpu1 - cpu0
	c.logLines = lines1 - lines0
	c.perMinute = float64(c.cpu) / clockTicks / c.wall.Minutes()
	c.perHour = float64(c.logLines) / c.wall.Hours()
	return c, nil
}

// cpuTicks is the process's user plus system CPU time in clock ticks.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name in parentheses: state is field 3,
	// utime 14 and stime 15.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return u + s, nil
}

// rss is the process's resident set size (VmRSS).
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	buf := make([]byte, 1<<16)
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
