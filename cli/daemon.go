package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

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
		ConfigPath:      c.config,
		Configs:         cfgs,
		Load:            config.Options{Getenv: env.Getenv, CheckDSN: pgutil.CheckDSN},
		Store:           store,
		Logger:          env.Logger,
		Version:         Version,
		Listen:          d.listen,
		Socket:          daemon.SocketPath(store.Path()),
		ListenOptional:  !d.listenSet,
		AdminToken:      token,
		ShutdownTimeout: d.shutdownTimeout,
		Stop:            stop,
		Reload:          reload,
		OnConfig: func(c *config.Config) {
			env.scrub.add(pgutil.Password(c.Source.DSN))
			env.scrub.add(pgutil.Password(c.Sink.DSN))
		},
		Expand: source.Expand,
	})
	if errors.Is(err, daemon.ErrListen) {
		return fmt.Errorf("%w: %w", err, ErrUsage)
	}
	return err
}
