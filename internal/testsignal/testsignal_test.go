package testsignal_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testsignal"
)

func TestHookZeroDoesNothing(t *testing.T) {
	var h testsignal.Hook[int]
	if err := h.Fire(context.Background(), 1); err != nil {
		t.Fatalf("zero hook returned %v", err)
	}
}

func TestHookRunsInTheCallerAndReturnsItsError(t *testing.T) {
	crash := errors.New("crash")
	var seen []int
	h := testsignal.Hook[int](func(_ context.Context, v int) error {
		seen = append(seen, v)
		if v == 2 {
			return crash
		}
		return nil
	})
	if err := h.Fire(context.Background(), 1); err != nil {
		t.Fatalf("fire 1: %v", err)
	}
	if err := h.Fire(context.Background(), 2); !errors.Is(err, crash) {
		t.Fatalf("fire 2: %v, want the hook's error", err)
	}
	if fmt.Sprint(seen) != "[1 2]" {
		t.Fatalf("hook saw %v, want [1 2]", seen)
	}
}

func TestSignalZeroDoesNothing(t *testing.T) {
	var s testsignal.Signal[string]
	s.Fire("ignored") // must neither block nor panic
}

func TestSignalWaitAndFired(t *testing.T) {
	var s testsignal.Signal[int]
	s.Init(t)
	go func() {
		for i := range 3 {
			s.Fire(i)
		}
	}()
	if v := s.Wait(10 * time.Second); v != 0 {
		t.Fatalf("first value %d, want 0", v)
	}
	if v := s.Wait(10 * time.Second); v != 1 {
		t.Fatalf("second value %d, want 1", v)
	}
	_ = s.Wait(10 * time.Second)
	if rest := s.Fired(); len(rest) != 0 {
		t.Fatalf("values left after waiting for all: %v", rest)
	}
	s.Fire(7)
	s.Fire(8)
	if got := s.Fired(); fmt.Sprint(got) != "[7 8]" {
		t.Fatalf("Fired = %v, want [7 8]", got)
	}
}

// fakeTB records a failure instead of ending the test.
type fakeTB struct{ failed string }

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Errorf(format string, a ...any) { f.failed = fmt.Sprintf(format, a...) }
func (f *fakeTB) Fatalf(format string, a ...any) { f.failed = fmt.Sprintf(format, a...) }

func TestSignalWaitTimesOut(t *testing.T) {
	var s testsignal.Signal[int]
	tb := &fakeTB{}
	s.Init(tb)
	s.Wait(time.Millisecond)
	if tb.failed == "" {
		t.Fatal("a wait with nothing fired did not fail the test")
	}
}
