package syncer

import (
	"github.com/syncd/syncd/internal/testsignal"
	"github.com/syncd/syncd/plan"
)

// TestSignals are the moments of a run a test can act at, to inject a
// crash at the worst moment or to change the source between two pages
// (see package testsignal). Production code leaves them zero.
type TestSignals struct {
	// AfterCommit fires after a page has committed in the sink and before
	// its watermark is written; an error fails the run there, as a crash
	// would.
	AfterCommit testsignal.Hook[Commit]
	// AfterChunk fires after a first-load chunk has committed in the sink
	// and before its progress is written to the state file, told the
	// chunk's index; an error fails the run there.
	AfterChunk testsignal.Hook[int]
	// Plan holds the moments inside a kind's pages (inside a page's
	// transaction), which no hook of the run loop reaches.
	Plan plan.TestSignals
}

// Commit is the page AfterCommit fires for.
type Commit struct {
	Source string // the source's name
	Page   int64  // the page's number in this run, from 1
}
