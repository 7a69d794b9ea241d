package daemon_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/coupon"
	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/internal/retry"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/watermark"
)

// inproc is a daemon running inside the test process.
type inproc struct {
	addr   string
	store  *watermark.Store
	stop   chan struct{}
	reload chan struct{}
	done   chan error
	logs   *testutil.Log
}

// startDaemon runs daemon.Run on the configs of path with a fast backoff;
// edit changes the options before the start. It stops at the test's end.
func startDaemon(t *testing.T, path string, edit func(*daemon.Options)) *inproc {
	t.Helper()
	return startDaemonCtx(t, context.Background(), path, edit)
}

// startDaemonCtx is startDaemon with the context daemon.Run gets.
func startDaemonCtx(t *testing.T, ctx context.Context, path string, edit func(*daemon.Options)) *inproc {
	t.Helper()
	cfgs, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	store, err := watermark.Open(filepath.Join(t.TempDir(), "state.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	d := &inproc{store: store, stop: make(chan struct{}), reload: make(chan struct{}), done: make(chan error, 1), logs: &testutil.Log{}}
	listening := make(chan string, 1)
	o := daemon.Options{
		ConfigPath: path,
		Configs:    cfgs,
		Kinds:      kind.NewRegistry(kind.Postgres(), coupon.Kind()),
		Store:      store,
		Logger:     slog.New(slog.NewJSONHandler(d.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Version:    "test",
		Listen:     "127.0.0.1:0",
		OnListen:   func(a string) { listening <- a },
		Stop:       d.stop,
		Reload:     d.reload,
		Backoff:    retry.Backoff{Initial: 100 * time.Millisecond, Max: 500 * time.Millisecond, Attempts: 30},
	}
	if edit != nil {
		edit(&o)
	}
	go func() { d.done <- daemon.Run(ctx, o) }()
	select {
	case d.addr = <-listening:
	case err := <-d.done:
		t.Fatalf("daemon did not start: %v", err)
	}
	t.Cleanup(func() {
		d.shutdown(t)
		store.Close()
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.logs.String())
		}
	})
	return d
}

// shutdown stops the daemon gracefully (once) and returns Run's error.
func (d *inproc) shutdown(t *testing.T) error {
	t.Helper()
	select {
	case <-d.stop:
		return nil
	default:
	}
	close(d.stop)
	select {
	case err := <-d.done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("daemon did not stop within 60s")
		return nil
	}
}

// state reads a source's stored state.
func (d *inproc) state(t *testing.T, name string) watermark.State {
	t.Helper()
	st, _, err := d.store.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
