package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/syncer"
)

func cmdRun(ctx context.Context, env *Env, args []string) error {
	fs := flagSet(env, "run")
	var c common
	c.register(fs, true)
	once := fs.Bool("once", false, "sync every source (or --source) until caught up, then exit")
	name := fs.String("source", "", "only this source")
	if err := parse(env, fs, args, &c); err != nil {
		return err
	}
	cfgs, err := load(env, c.config, *name)
	if err != nil {
		return err
	}
	if !*once {
		return fmt.Errorf("the daemon mode is not available in this build; use --once: %w", ErrUsage)
	}
	// Check every source against its databases before anything is written,
	// the state file included: a config mistake exits 2 and changes nothing.
	// A source that cannot be reached fails later, on its own.
	for _, cfg := range cfgs {
		if _, _, err := check(ctx, cfg, false); errors.Is(err, config.ErrInvalid) {
			return err
		}
	}
	store, err := openState(c.state)
	if err != nil {
		return err
	}
	defer store.Close()

	// First SIGINT/SIGTERM: take no new page, let the one in flight commit.
	// Second: cancel everything.
	stop := make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
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

	var failed []string
	for _, cfg := range cfgs {
		_, err := syncer.Run(ctx, syncer.Options{Config: cfg, Store: store, Logger: env.Logger, Stop: stop})
		switch {
		case errors.Is(err, syncer.ErrStopped):
			return nil
		case err != nil:
			if len(cfgs) == 1 {
				return err
			}
			fmt.Fprintf(env.Stderr, "syncd run: source %s: %s\n", cfg.Name, oneLine(err.Error()))
			failed = append(failed, cfg.Name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d sources failed: %v: %w", len(failed), len(cfgs), failed, errReported)
	}
	return nil
}
