package watermark_test

import (
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/syncd/syncd/watermark"
)

// TestReadStateWhileHeld reads a state file that another store holds and
// writes to without pause, as a daemon does after every page: every read
// returns a state the writer committed, never a torn one, and never one
// newer than the last commit.
func TestReadStateWhileHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	w, err := watermark.Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Put("other", watermark.State{Cursor: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	last := 0
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 1; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := w.Put("items", watermark.State{Cursor: []string{"2026-01-01 00:00:00+00", strconv.Itoa(i)}}); err != nil {
				done <- err
				return
			}
			mu.Lock()
			last = i
			mu.Unlock()
		}
	}()
	prev := 0
	for range 40 {
		st, ok, err := watermark.ReadState(path, "items", 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		committed := last
		mu.Unlock()
		if !ok {
			if prev > 0 {
				t.Fatal("the state of items vanished")
			}
			continue
		}
		n, err := strconv.Atoi(st.Cursor[1])
		if err != nil || n < prev || n > committed+1 {
			t.Fatalf("read cursor %v after %d (last commit %d)", st.Cursor, prev, committed)
		}
		prev = n
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if prev == 0 {
		t.Fatal("never read the state of items")
	}
}
