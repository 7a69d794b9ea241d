package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/internal/pgpool"
	"github.com/syncd/syncd/internal/sourceerr"
	"github.com/syncd/syncd/runlock"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/syncer"
)

func cmdRun(ctx context.Context, env *Env, args []string) error {
	fs := flagSet(env, "run")
	var c common
	c.register(fs, true)
	once := fs.Bool("once", false, "sync every source (or --source) until caught up, then exit")
	name := fs.String("source", "", "only this source (with --once): a source, a pattern source (all its tables) or NAME.TABLE")
	var d daemonFlags
	d.register(fs)
	if err := parse(env, fs, args, &c); err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) { d.listenSet = d.listenSet || f.Name == "listen" })
	if !*once && *name != "" {
		return fmt.Errorf("--source works with --once only; to run one source as a daemon, pass its file to --config: %w", ErrUsage)
	}
	cfgs, err := load(env, c.config, *name)
	if err != nil {
		return err
	}
	if !*once {
		return runDaemon(ctx, env, &c, &d, cfgs)
	}
	// One pool lends their sessions to the expansion of patterns, every
	// check and every run: a source's run goes on on the sessions its check
	// opened, and a pattern's tables share two instead of opening four each.
	pool := pgpool.New(pgpool.Options{MaxIdle: 1})
	defer pool.Close()
	ctx = pgpool.With(ctx, pool)
	// Pattern sources become a source per matched table; a table that
	// cannot be synced is reported and skipped, and the run exits 1 after
	// syncing the others.
	raw := cfgs
	cfgs, skipped, warnings, err := expandWarn(ctx, cfgs, *name)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintf(env.Stderr, "syncd run: %s\n", w)
	}
	// Check every source against its databases before anything is written,
	// the state file included: a config mistake exits 2 and changes nothing.
	// A source that cannot be reached fails later, on its own.
	if err := oneWriter(env.Kinds, cfgs); err != nil {
		return err
	}
	kept := cfgs[:0]
	for _, cfg := range cfgs {
		_, _, err := check(ctx, env.Kinds, cfg, false, c.state, nil)
		switch {
		case errors.Is(err, config.ErrInvalid) && cfg.Pattern != "" && !errors.Is(err, catalog.ErrSecondWriter):
			skipped = append(skipped, skippedBy(cfg, err))
			continue
		case errors.Is(err, config.ErrInvalid):
			return err
		}
		kept = append(kept, cfg)
	}
	cfgs = kept
	reportSkipped(env, "run", skipped)
	store, err := openState(c.state)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := recordMatches(store, raw, *name, skipped); err != nil {
		return err
	}
	// A stored watermark that does not decode, or was computed for other
	// settings, stops the run before any source is touched, with the
	// resync that replaces it.
	for _, cfg := range cfgs {
		st, _, err := store.Get(cfg.Name)
		if err != nil {
			return err
		}
		k, err := env.Kinds.Of(cfg)
		if err != nil {
			return err
		}
		if err := syncer.CheckIdentity(k, cfg, st, store.Path()); err != nil {
			return err
		}
	}

	ctx, stop, cleanup := stopSignals(ctx)
	defer cleanup()

	var failed []string
	for _, cfg := range cfgs {
		_, err := syncer.Run(ctx, syncer.Options{Config: cfg, Kinds: env.Kinds, Store: store, Logger: env.Logger, Stop: stop, Pool: pool})
		switch {
		case errors.Is(err, syncer.ErrStopped):
			return nil
		case errors.Is(err, runlock.ErrHeld):
			// Another process is syncing it: that is its job, not a failure.
			fmt.Fprintf(env.Stdout, "syncd run: %s\n", oneLine(err.Error()))
		case err != nil:
			err = source.Explain(cfg, err)
			if len(cfgs) == 1 && len(skipped) == 0 {
				return sourceerr.Name(cfg.Name, err)
			}
			fmt.Fprintf(env.Stderr, "syncd run: %s\n", oneLine(sourceerr.Name(cfg.Name, err).Error()))
			failed = append(failed, cfg.Name)
		}
	}
	switch {
	case len(failed) > 0:
		return fmt.Errorf("%d of %d sources failed: %v: %w", len(failed), len(cfgs)+len(skipped), failed, errReported)
	case len(skipped) > 0:
		return fmt.Errorf("%d sources synced, %d tables skipped (see above): fix them or add them to source.exclude", len(cfgs), len(skipped))
	}
	return nil
}

// stopSignals turns the first SIGINT/SIGTERM into closing stop (take no new
// page, let the one in flight commit) and the second into cancelling the
// returned context (force the exit).
func stopSignals(ctx context.Context) (context.Context, <-chan struct{}, func()) {
	stop := make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-sigs:
			close(stop)
		case <-ctx.Done():
			return
		}
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, stop, func() {
		signal.Stop(sigs)
		cancel()
		<-done
	}
}

// daemonFlags are the flags of `syncd run` without --once.
type daemonFlags struct {
	listen          string
	listenSet       bool // --listen was given, not defaulted
	shutdownTimeout time.Duration
	tokenFile       string
	maxRuns         int
	summaryEvery    time.Duration
}

func (d *daemonFlags) register(fs interface {
	StringVar(*string, string, string, string)
	DurationVar(*time.Duration, string, time.Duration, string)
	IntVar(*int, string, int, string)
}) {
	fs.IntVar(&d.maxRuns, "max-concurrent-runs", 0, "at most this many syncs and scheduled reconciles run at once; the others due wait in turn (default $SYNCD_MAX_CONCURRENT_RUNS, else twice the CPUs, between 2 and 8)")
	fs.DurationVar(&d.summaryEvery, "summary-every", 0, "how often the daemon logs its summary of the runs at INFO (default $SYNCD_SUMMARY_EVERY, else 1m)")
	fs.StringVar(&d.listen, "listen", daemon.DefaultListen, "admin HTTP address of the daemon (/healthz /readyz /metrics /status /resync); \"\" for none")
	fs.DurationVar(&d.shutdownTimeout, "shutdown-timeout", daemon.DefaultShutdownTimeout, "on SIGTERM/SIGINT, how long to wait for the pages in flight to commit")
	fs.StringVar(&d.tokenFile, "admin-token-file", "", "file holding the admin token that enables POST /resync (default $SYNCD_ADMIN_TOKEN)")
}
