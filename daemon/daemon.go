// Package daemon owns syncd's long-running mode: one cron scheduler that
// starts each source's run on its own schedule (skipping a tick while the
// previous run of that source is still going) and its scheduled reconcile,
// retries of transient faults with backoff, config reload between runs, the
// graceful stop (no new page, the page in flight commits, its watermark is
// written) and the HTTP admin server with health, readiness, metrics,
// status and resync. Status, resync and reconcile are package ops's, as
// for the command line.
//
// Signals are the caller's business: it closes Options.Stop on the first
// SIGTERM/SIGINT, cancels the context on the second, and sends on
// Options.Reload for each SIGHUP.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgpool"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/internal/retry"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/metrics"
	syncsource "github.com/syncd/syncd/source"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// Defaults.
const (
	DefaultListen          = "127.0.0.1:7391"
	DefaultShutdownTimeout = 30 * time.Second
)

// ErrShutdownTimeout is returned when the runs in flight did not end within
// Options.ShutdownTimeout.
var ErrShutdownTimeout = errors.New("shutdown timed out")

// ErrListen is returned when the address given with Listen (not the
// optional default) cannot be bound: a usage error.
var ErrListen = errors.New("admin address cannot be bound")

// ErrForced is returned when Run's context was cancelled (a second signal)
// before the runs in flight ended.
var ErrForced = errors.New("stop forced by a second signal")

// Options configure a daemon.
type Options struct {
	// ConfigPath is the source file or folder; a reload reads it again.
	ConfigPath string
	// Configs are the sources loaded at start (strictly: the caller refuses
	// to start on a bad file).
	Configs []*config.Config
	// Load are the options a reload loads ConfigPath with (those the
	// caller loaded Configs with).
	Load config.Options
	// Kinds are the kinds of sink the daemon's sources may have (cli's
	// DefaultKinds); nil: the table copy only. The daemon hands them to
	// every run, reconcile and resync.
	Kinds   *kind.Registry
	Store   *watermark.Store
	Logger  *slog.Logger
	Version string

	// Listen is the admin HTTP address; "" serves no HTTP.
	Listen string
	// ListenOptional is set when Listen is the default rather than asked
	// for: when another process already has that address, the daemon runs
	// without HTTP and says so, instead of refusing to start.
	ListenOptional bool
	// OnListen, when set, is called with the address actually bound.
	OnListen func(addr string)
	// Socket, when set, is the path of the admin Unix socket (SocketPath of
	// the state file); the daemon also writes its identity secret beside
	// the state file (IdentityPath) for clients to verify it.
	Socket string
	// AdminToken enables POST /resync and is the bearer token it requires.
	AdminToken string
	// ShutdownTimeout bounds the wait for runs in flight after Stop.
	ShutdownTimeout time.Duration
	// MaxConcurrentRuns is the budget of jobs (syncs and scheduled
	// reconciles) that run at once; the others due wait in turn (0:
	// DefaultMaxConcurrentRuns).
	MaxConcurrentRuns int
	// SummaryEvery is how often the daemon logs its summary of the runs
	// (0: DefaultSummaryEvery).
	SummaryEvery time.Duration

	// Stop is closed for a graceful stop; cancelling Run's context forces one.
	Stop <-chan struct{}
	// Reload receives a value for each reload request (SIGHUP).
	Reload <-chan struct{}

	// OnConfig is called for every config read by a reload (the CLI
	// registers its DSN passwords for scrubbing).
	OnConfig func(*config.Config)
	// Expand, when set, matches a pattern source (config.IsPattern) against
	// its catalog and returns a source per table that can be synced, and
	// the tables it skips (source.Expand). The daemon calls it at start, on
	// the pattern source's schedule (so new tables are picked up without a
	// restart) and at each reload, with the pattern's cache (a tick that
	// finds the catalog unchanged describes no table) and its session pool
	// in ctx; without it pattern sources do not run.
	Expand func(ctx context.Context, c *config.Config, cache *syncsource.MatchCache) (syncsource.Expansion, error)

	// Backoff paces the retries of transient faults.
	Backoff retry.Backoff
	// Registry holds the metrics; nil makes a new one with the Go runtime
	// and process collectors.
	Registry *prometheus.Registry
	// Clock is the time schedules fire by; nil is the system clock.
	Clock Clock
	// Test, zero in production, is every run's syncer.Options.Test: a test
	// acts at moments inside the daemon's runs with it (holds a run while
	// a tick comes).
	Test syncer.TestSignals
}

type daemon struct {
	o       Options
	log     *slog.Logger
	m       *metrics.Metrics
	reg     *prometheus.Registry
	cron    *scheduler
	budget  *budget
	pool    *pgpool.Pool // the runs' source and sink sessions, shared by every source
	sum     *summary
	ctx     context.Context // cancelled only to force an exit
	stopCtx context.Context // cancelled at the graceful stop as well
	stop    chan struct{}   // closed at the graceful stop
	secret  []byte          // the identity secret (identity.go)

	mu       sync.Mutex
	wg       sync.WaitGroup
	stopping bool
	sources  map[string]*source
	matching map[string]int // pattern sources being matched against their catalogs
	// ended receives (without blocking) when a job counted in wg ends,
	// so that a stop says what it still waits for.
	ended chan struct{}

	pmu      sync.Mutex          // guards patterns and files
	emu      sync.Mutex          // one pattern match applied at a time
	patterns map[string]*pattern // pattern sources by name
	pm       *patternMetrics
	files    map[string][]*config.Config
}

// Run runs the daemon until Stop is closed (a graceful stop: it returns nil
// once every run in flight has committed its page) or ctx is cancelled.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	if o.MaxConcurrentRuns <= 0 {
		o.MaxConcurrentRuns = DefaultMaxConcurrentRuns()
	}
	if o.SummaryEvery <= 0 {
		o.SummaryEvery = DefaultSummaryEvery
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	stopCtx, cancelStop := context.WithCancel(ctx)
	defer cancelStop()
	d := &daemon{
		o:      o,
		log:    o.Logger,
		reg:    reg,
		m:      metrics.New(reg, o.Version),
		cron:   newScheduler(o.Clock),
		budget: newBudget(o.MaxConcurrentRuns, newBudgetMetrics(reg)),
		// No more runs than the budget can need a session of one
		// database at once.
		pool:     pgpool.New(pgpool.Options{MaxIdle: o.MaxConcurrentRuns}),
		sum:      &summary{},
		ctx:      ctx,
		stopCtx:  stopCtx,
		stop:     make(chan struct{}),
		sources:  map[string]*source{},
		matching: map[string]int{},
		ended:    make(chan struct{}, 1),
		patterns: map[string]*pattern{},
		pm:       newPatternMetrics(reg),
		files:    map[string][]*config.Config{},
	}

	var ln net.Listener
	if o.Listen != "" {
		var err error
		ln, err = net.Listen("tcp", o.Listen)
		switch {
		case err != nil && o.ListenOptional && errors.Is(err, syscall.EADDRINUSE):
			d.log.Warn("admin HTTP off: the default address is in use by another process; pass --listen with a free address for /healthz, /readyz, /metrics and /status (status and resync use the admin socket)", "addr", o.Listen)
		case err != nil:
			return fmt.Errorf("%w: %w; pass a free address with --listen, or --listen \"\" for no HTTP", ErrListen, err)
		}
	}
	var servers []*server
	var sl net.Listener
	if o.Socket != "" {
		secret, err := writeIdentity(o.Store.Path())
		if err != nil {
			if ln != nil {
				ln.Close()
			}
			return err
		}
		d.secret = secret
		defer os.Remove(IdentityPath(o.Store.Path()))
		sl, err = listenSocket(o.Socket)
		if err != nil {
			d.log.Warn("admin socket off: syncd status and resync need --listen to reach this daemon", "err", err)
			sl = nil
		}
	}

	// A run's record that changes nothing it resumes from waits for the
	// next flush (flush.go); the store's Close writes what is left.
	o.Store.DeferRecords()
	stopFlush := make(chan struct{})
	flushDone := d.flushRecords(stopFlush)
	defer func() { close(stopFlush); <-flushDone }()

	// The sources are added, and their series seeded from the state
	// file, before the first request is served: a scrape at start sees
	// the dashboard's gauges, never an empty page that a later scrape
	// fills. Adding a source starts its runs in the background, so this
	// holds the listeners' first answer back by no more than reading the
	// state file.
	for _, c := range o.Configs {
		d.files[c.File] = append(d.files[c.File], c)
		if c.IsPattern() {
			d.addPattern(c)
		} else {
			d.add(c)
		}
	}
	if sl != nil {
		servers = append(servers, serve(sl, d.handler(true)))
		d.log.Info("admin socket listening", "path", o.Socket)
	}
	if ln != nil {
		servers = append(servers, serve(ln, d.handler(false)))
		d.log.Info("admin HTTP listening", "addr", ln.Addr().String(), "resync_endpoint", o.AdminToken != "")
		if o.OnListen != nil {
			o.OnListen(ln.Addr().String())
		}
	}
	d.cron.start()
	d.log.Info("daemon started", "sources", len(o.Configs), "state", o.Store.Path(), "version", o.Version,
		"max_concurrent_runs", o.MaxConcurrentRuns, "summary_every", o.SummaryEvery.String())
	summaryDone := d.summaries()
	defer func() { <-summaryDone }()

	for loop := true; loop; {
		select {
		case <-o.Stop:
			loop = false
		case <-ctx.Done():
			loop = false
		case <-o.Reload:
			d.reload()
		}
	}
	began := time.Now()
	err := d.shutdown(ctx, began)
	d.pool.Close() // a run still going closes its sessions when it ends
	cancelStop()
	if serr := d.closeServers(ctx, servers, began); serr != nil && err == nil {
		err = serr
	}
	if err == nil {
		d.log.Info("stopped", "after", since(began))
	}
	return err
}

// closeServers stops the admin servers, saying so when requests in
// flight hold one up for more than a second.
func (d *daemon) closeServers(ctx context.Context, servers []*server, began time.Time) error {
	if len(servers) == 0 {
		return nil
	}
	errs := make(chan error, len(servers))
	for _, s := range servers {
		go func() { errs <- s.close(ctx) }()
	}
	slow := time.NewTimer(time.Second)
	defer slow.Stop()
	var err error
	for range servers {
		select {
		case serr := <-errs:
			err = cmp.Or(err, serr)
			continue
		case <-slow.C:
			d.log.Info("still waiting for: the admin server's requests in flight (at most 5s)", "after", since(began))
		}
		err = cmp.Or(err, <-errs)
	}
	return err
}

// since is the time since t, rounded for a log line.
func since(t time.Time) string {
	d := time.Since(t)
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// server is one admin listener being served.
type server struct {
	srv    *http.Server
	addr   string
	served chan error
}

func serve(ln net.Listener, h http.Handler) *server {
	s := &server{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, addr: ln.Addr().String(), served: make(chan error, 1)}
	go func() { s.served <- s.srv.Serve(ln) }()
	return s
}

// close stops serving, letting requests in flight end for a few seconds.
func (s *server) close(ctx context.Context) error {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if herr := s.srv.Shutdown(hctx); herr != nil {
		s.srv.Close()
	}
	if serr := <-s.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("admin HTTP on %s: %w", s.addr, serr)
	}
	return nil
}

// running is the progress of every run going, by source.
func (d *daemon) running() map[string]syncer.Progress {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]syncer.Progress{}
	for name, s := range d.sources {
		if p, ok := s.progressNow(); ok {
			out[name] = p
		}
	}
	return out
}

// stopReportEvery is how often a stop that waits says what for.
const stopReportEvery = 5 * time.Second

// shutdown takes no new run or page and waits for the runs in flight,
// saying what it waits for when it starts, each time one of them ends,
// and every stopReportEvery.
func (d *daemon) shutdown(ctx context.Context, began time.Time) error {
	d.mu.Lock()
	d.stopping = true
	running := d.runningNames()
	d.mu.Unlock()
	close(d.stop)
	waiting := d.inFlight()
	d.log.Info("stopping: no new page is taken; pages in flight commit and write their watermark",
		"running", running, "waiting_for", waiting, "timeout", d.o.ShutdownTimeout.String(), "force", "a second SIGTERM or SIGINT")
	cronDone := d.cron.stop()

	done := make(chan struct{})
	go func() {
		d.wg.Wait()
		<-cronDone
		close(done)
	}()
	timer := time.NewTimer(d.o.ShutdownTimeout)
	defer timer.Stop()
	tick := time.NewTicker(stopReportEvery)
	defer tick.Stop()
	report := func() {
		d.log.Info("still waiting for the jobs in flight; a second SIGTERM or SIGINT forces the exit",
			"waiting_for", waiting, "after", since(began), "timeout_in", (d.o.ShutdownTimeout - time.Since(began)).Round(time.Second).String())
	}
	for {
		select {
		case <-done:
			return nil
		case <-d.ended:
			// A job ended: say what is left, when something is.
			if now := d.inFlight(); len(now) > 0 && !slices.Equal(now, waiting) {
				waiting = now
				report()
			}
		case <-tick.C:
			if waiting = d.inFlight(); len(waiting) > 0 {
				report()
			}
		case <-ctx.Done():
			if waiting = d.inFlight(); len(waiting) == 0 {
				return nil
			}
			return fmt.Errorf("%w after %s; still going: %s; a page that had not committed rolls back and is read again at the next start",
				ErrForced, since(began), strings.Join(waiting, ", "))
		case <-timer.C:
			return fmt.Errorf("%w after %s; still going: %s; a page that had not committed rolls back and is read again at the next start; raise --shutdown-timeout if pages take longer",
				ErrShutdownTimeout, d.o.ShutdownTimeout, strings.Join(d.inFlight(), ", "))
		}
	}
}

// jobDone ends a job counted by begin.
func (d *daemon) jobDone() {
	d.wg.Done()
	select {
	case d.ended <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// inFlight lists what a stop waits for, sorted: each source with a job
// going and what it does ("orders (page in flight)"), and each pattern
// source being matched against its catalog.
func (d *daemon) inFlight() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for name, s := range d.sources {
		if what := s.doing(); what != "" {
			out = append(out, name+" ("+what+")")
		}
	}
	for name := range d.matching {
		out = append(out, name+" (matching its tables in the catalog)")
	}
	sort.Strings(out)
	return out
}

// begin registers a run or reconcile about to start; false once stopping.
func (d *daemon) begin() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return false
	}
	d.wg.Add(1)
	return true
}

// runningNames lists the sources with a run going; d.mu must be held.
func (d *daemon) runningNames() []string {
	var out []string
	for name, s := range d.sources {
		if s.isBusy() {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// configs returns the configs in effect, sorted by name.
func (d *daemon) configs() []*config.Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*config.Config, 0, len(d.sources))
	for _, s := range d.sources {
		out = append(out, s.config())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// add starts scheduling a new source and, for a table copy, runs it once
// now to catch up. A coupon campaign waits for its schedule: starting the
// daemon must never start a campaign early.
func (d *daemon) add(c *config.Config) {
	s := &source{d: d, log: d.log.With("source", c.Name), cfg: c}
	d.mu.Lock()
	d.sources[c.Name] = s
	d.mu.Unlock()
	st, _, err := d.o.Store.Get(c.Name)
	if err != nil {
		st = watermark.State{} // the run reports the damage
	}
	d.m.AddSource(c.Name, metrics.Totals{Read: st.TotalRead, Written: st.TotalWritten, Deleted: st.TotalDeleted})
	d.m.CaughtUp(c.Name, st.CaughtUp)
	d.m.ReconcileClean(c.Name, st.LastCleanReconcile)
	seedMetrics(d.m, c, st)
	if len(st.Cursor) > 0 {
		if t, ok := pgutil.ParseTime(st.Cursor[0]); ok {
			d.m.SetWatermark(c.Name, t)
		}
	}
	s.schedule(c)
	if k, err := d.o.Kinds.Of(c); err != nil || !k.RunsAtStart {
		return
	}
	if cfg, ok := s.start(jobSync); ok {
		go s.runJob(jobSync, cfg)
	}
}
