package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/internal/retry"
	"github.com/syncd/syncd/watermark"
)

// inproc is a daemon running inside the test process.
type inproc struct {
	addr   string
	store  *watermark.Store
	stop   chan struct{}
	reload chan struct{}
	done   chan error
	logs   *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Count returns how many records have message msg and the attributes
// (see countRecords).
func (s *syncBuffer) Count(msg string, attrs ...any) int {
	return countRecords(s.String(), msg, attrs...)
}

// records returns the JSON log records among the lines of out, in order.
func records(out string) []map[string]any {
	var recs []map[string]any
	for _, l := range strings.Split(out, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) == nil {
			recs = append(recs, rec)
		}
	}
	return recs
}

// match reports whether rec has message msg (any message when "") and, for each key/value pair
// of attrs, that attribute with that value (compared as text).
func match(rec map[string]any, msg string, attrs ...any) bool {
	if msg != "" && rec["msg"] != msg {
		return false
	}
	for i := 0; i+1 < len(attrs); i += 2 {
		if fmt.Sprint(rec[fmt.Sprint(attrs[i])]) != fmt.Sprint(attrs[i+1]) {
			return false
		}
	}
	return true
}

// countRecords returns how many JSON records of out match msg and attrs.
func countRecords(out, msg string, attrs ...any) int {
	n := 0
	for _, rec := range records(out) {
		if match(rec, msg, attrs...) {
			n++
		}
	}
	return n
}

// findRecord returns the first JSON record of out that matches msg and
// attrs.
func findRecord(out, msg string, attrs ...any) (map[string]any, bool) {
	for _, rec := range records(out) {
		if match(rec, msg, attrs...) {
			return rec, true
		}
	}
	return nil, false
}

// startDaemon runs daemon.Run on the configs of path with a fast backoff;
// edit changes the options before the start. It stops at the test's end.
func startDaemon(t *testing.T, path string, edit func(*daemon.Options)) *inproc {
	t.Helper()
	cfgs, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	store, err := watermark.Open(filepath.Join(t.TempDir(), "state.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	d := &inproc{store: store, stop: make(chan struct{}), reload: make(chan struct{}), done: make(chan error, 1), logs: &syncBuffer{}}
	listening := make(chan string, 1)
	o := daemon.Options{
		ConfigPath: path,
		Configs:    cfgs,
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
	go func() { d.done <- daemon.Run(context.Background(), o) }()
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
