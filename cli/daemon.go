package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/source"
)

// runDaemon is `syncd run` without --once: it holds the state file, wires
// the signals and hands over to package daemon.
func runDaemon(ctx context.Context, env *Env, c *common, d *daemonFlags, cfgs []*config.Config) error {
	if d.shutdownTimeout <= 0 {
		return fmt.Errorf("--shutdown-timeout %s: give a positive duration such as 30s: %w", d.shutdownTimeout, ErrUsage)
	}
	maxRuns, summaryEvery, err := d.budget(env)
	if err != nil {
		return err
	}
	token, err := adminToken(env, d.tokenFile)
	if err != nil {
		return err
	}
	store, err := openState(c.state)
	if err != nil {
		return err
	}
	defer store.Close()

	ctx, stop, cleanup := stopSignals(ctx)
	defer cleanup()
	reload := make(chan struct{}, 1)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-hup:
				select {
				case reload <- struct{}{}:
				default: // a reload is already pending
				}
			case <-ctx.Done():
				return
			}
		}
	}()

	err = daemon.Run(ctx, daemon.Options{
		ConfigPath:        c.config,
		Configs:           cfgs,
		Load:              config.Options{Getenv: env.Getenv, CheckDSN: pgutil.CheckDSN, Sinks: env.Kinds.Sinks()},
		Kinds:             env.Kinds,
		Store:             store,
		Logger:            env.Logger,
		Version:           Version,
		Listen:            d.listen,
		Socket:            daemon.SocketPath(store.Path()),
		ListenOptional:    !d.listenSet,
		AdminToken:        token,
		ShutdownTimeout:   d.shutdownTimeout,
		MaxConcurrentRuns: maxRuns,
		SummaryEvery:      summaryEvery,
		Stop:              stop,
		Reload:            reload,
		OnConfig: func(c *config.Config) {
			for _, s := range env.Kinds.Secrets(c) {
				env.scrub.add(s)
			}
		},
		Expand: source.Expand,
	})
	if errors.Is(err, daemon.ErrListen) {
		return fmt.Errorf("%w: %w", err, ErrUsage)
	}
	return err
}

// Variables that give the defaults of --max-concurrent-runs and
// --summary-every.
const (
	EnvMaxConcurrentRuns = "SYNCD_MAX_CONCURRENT_RUNS"
	EnvSummaryEvery      = "SYNCD_SUMMARY_EVERY"
)

// budget is the daemon's run budget and summary period: the flags, else
// their variables, else the daemon's defaults (0).
func (d *daemonFlags) budget(env *Env) (int, time.Duration, error) {
	n := d.maxRuns
	if n == 0 {
		if v := env.getenv(EnvMaxConcurrentRuns); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n <= 0 {
				return 0, 0, fmt.Errorf("$%s=%q: give a positive number of runs such as 4: %w", EnvMaxConcurrentRuns, v, ErrUsage)
			}
		}
	}
	if n < 0 {
		return 0, 0, fmt.Errorf("--max-concurrent-runs %d: give a positive number of runs such as 4: %w", n, ErrUsage)
	}
	every := d.summaryEvery
	if every == 0 {
		if v := env.getenv(EnvSummaryEvery); v != "" {
			var err error
			if every, err = time.ParseDuration(v); err != nil || every <= 0 {
				return 0, 0, fmt.Errorf("$%s=%q: give a positive duration such as 1m: %w", EnvSummaryEvery, v, ErrUsage)
			}
		}
	}
	if every < 0 {
		return 0, 0, fmt.Errorf("--summary-every %s: give a positive duration such as 1m: %w", every, ErrUsage)
	}
	return n, every, nil
}
