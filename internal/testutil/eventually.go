package testutil

import (
	"testing"
	"time"
)

// Eventually polls cond until it returns true and fails the test with
// "what did not happen within timeout" if it does not by then. cond runs
// in the test's goroutine, so it may call t.Fatal. Use it to wait for a
// state (a row count, a status, a session) instead of sleeping for a
// guessed time.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(timeout, cond) {
		t.Fatalf("%s did not happen within %s", what, timeout)
	}
}

// EventuallyState is Eventually for a cond that also describes the state
// it saw; the last description goes into the failure message.
func EventuallyState(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	var last string
	if !poll(timeout, func() bool {
		ok, state := cond()
		last = state
		return ok
	}) {
		t.Fatalf("%s did not happen within %s; last seen: %s", what, timeout, last)
	}
}

// poll calls cond at growing intervals (5 ms to 200 ms) until it returns
// true or timeout passes, and reports whether it did; cond is called once
// more at the deadline.
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	wait := 5 * time.Millisecond
	for {
		if cond() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(wait, left)) // the poll interval, not a wait for a state
		wait = min(2*wait, 200*time.Millisecond)
	}
}
