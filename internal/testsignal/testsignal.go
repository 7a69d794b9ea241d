// Package testsignal is the one shape of syncd's test hooks: a named moment
// inside production code that a test can wait for (Signal) or act at
// (Hook). Production code fires both unconditionally; neither does anything
// until a test sets it up, and then the cost is one nil check.
//
// A package that has such moments gathers them in a TestSignals struct of
// Signal and Hook fields, reached through its Options as a value (so the
// zero Options is production's), as syncer.TestSignals and
// plan.TestSignals do.
//
// The package is compiled into the binary, so it does not import testing:
// a test passes its *testing.T as a TB.
package testsignal

import (
	"context"
	"time"
)

// TB is the part of testing.TB a Signal uses.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Hook is a moment at which production code stops for a test: Fire calls
// the test's function in the production goroutine and goes on only when
// it returns. The function may block (hold a run while something else
// happens), act (write to the database between two pages), or return an
// error, which production code handles as it would a failure at that
// moment (a crash injected exactly where a kill would land only
// sometimes). v says where production code is, such as a page's number.
// The zero Hook does nothing.
type Hook[T any] func(ctx context.Context, v T) error

// Fire calls h, if a test set it, and returns its error.
func (h Hook[T]) Fire(ctx context.Context, v T) error {
	if h == nil {
		return nil
	}
	return h(ctx, v)
}

// signalBuffer is how many values a Signal holds that no test has waited
// for yet; one more fails the test instead of blocking production code.
const signalBuffer = 256

// Signal is a moment production code announces and a test may wait for,
// carrying a value of type T. Fire never blocks. Until a test calls Init,
// Fire does nothing.
type Signal[T any] struct {
	c  chan T
	tb TB
}

// Init makes s record what is fired, for the test tb to wait on. Call it
// before the production code that fires s starts (before the Options that
// hold it are passed on).
func (s *Signal[T]) Init(tb TB) {
	s.c, s.tb = make(chan T, signalBuffer), tb
}

// Fire records v for a test waiting on s; without Init it does nothing.
func (s *Signal[T]) Fire(v T) {
	if s.c == nil {
		return
	}
	select {
	case s.c <- v:
	default:
		s.tb.Errorf("testsignal: %d values fired that no test waited for", signalBuffer)
	}
}

// Wait returns the next value fired, and fails the test if none comes
// within timeout. It must be called from the test's goroutine.
func (s *Signal[T]) Wait(timeout time.Duration) T {
	s.mustInit()
	s.tb.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-s.c:
		return v
	case <-timer.C:
		s.tb.Fatalf("no test signal within %s", timeout)
		var zero T
		return zero
	}
}

// Fired returns the values fired and not yet waited for, and forgets them.
func (s *Signal[T]) Fired() []T {
	s.mustInit()
	var out []T
	for {
		select {
		case v := <-s.c:
			out = append(out, v)
		default:
			return out
		}
	}
}

func (s *Signal[T]) mustInit() {
	if s.c == nil {
		panic("testsignal: Wait or Fired on a Signal without Init (called outside a test?)")
	}
}
