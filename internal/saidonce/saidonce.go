// Package saidonce remembers the warnings a process has logged, so that a
// warning that would repeat at every run of a source (hundreds of sources,
// a run every few seconds) is said once and then only counted: the
// daemon's summary line reports how many repeats were held back.
package saidonce

import (
	"sync"
	"sync/atomic"
)

// Set holds the keys of the warnings said. The zero value is ready.
type Set struct {
	m sync.Map
}

// repeats counts the repeats held back by every Set of the process.
var repeats atomic.Int64

// First reports whether key has not been said yet, and remembers it; a
// key already said counts as a repeat held back.
func (s *Set) First(key string) bool {
	return s.Changed(key, "")
}

// Changed reports whether key has not been said yet with this value (the
// warning's numbers changed: that is news), and remembers the value; the
// same value again counts as a repeat held back.
func (s *Set) Changed(key, value string) bool {
	if prev, said := s.m.Swap(key, value); said && prev.(string) == value {
		repeats.Add(1)
		return false
	}
	return true
}

// Forget lets key be said again (the cause went away: when it comes back
// it is news).
func (s *Set) Forget(key string) {
	s.m.Delete(key)
}

// Repeats is how many repeats every Set of the process has held back.
func Repeats() int64 {
	return repeats.Load()
}
