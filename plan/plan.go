// Package plan declares what one run of a source needs from the kind of
// sink it writes to when its pages are not a source table's: a page reader
// (a campaign's frozen targets), the sink, and hooks that run before the
// first page (a campaign's freeze) and after the last (its final count).
// Package kind opens plans; package syncer runs them with the same page
// loop, run lock and watermark as a table copy. The package holds only
// interfaces and plain types, so that syncer and the sink kinds depend on
// it and not on each other.
package plan

import (
	"context"
	"log/slog"
	"time"

	"github.com/syncd/syncd/internal/testsignal"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/watermark"
)

// Reader reads the pages of one run in key order.
type Reader interface {
	// Next returns the page after the one it returned last (the first: the
	// one after the position Hooks.Before set), at most limit rows; an
	// empty page ends the run. behind is true while the page re-reads rows
	// the stored watermark already passed (a lookback window): its cursor
	// is not saved, so the watermark never moves back.
	Next(ctx context.Context, limit int) (p page.Page, behind bool, err error)
}

// Hooks run around the page loop.
type Hooks interface {
	// Before runs once the run lock is held and before the first page (a
	// campaign's freeze). Its error fails the run before any page.
	Before(ctx context.Context) error
	// After runs when the reader has no more pages and every page is
	// durable with its watermark written (a campaign's final count). Its
	// error fails the run; it does not run after a stop or a failure.
	After(ctx context.Context) error
}

// Plan is one run's reader, sink and hooks, as opened by a kind.
type Plan struct {
	Reader Reader
	Sink   sink.Sink
	Hooks  Hooks
	// Record, when set, is applied to the state with every watermark the
	// run writes (a campaign records its id with its first granted page).
	Record func(st *watermark.State)
	// Campaign holds a campaign's numbers as far as the run got, also when
	// it failed (nil: not a campaign).
	Campaign *CampaignStats
	// Close releases what the plan holds besides Sink (which the run
	// closes); nil: nothing.
	Close func(ctx context.Context)
	// PageSize is the most rows the run asks Reader.Next for (0:
	// source.page_size); a campaign's grant pages have their own size.
	PageSize int
}

// Counts compares the grants of a campaign with its frozen targets.
type Counts struct {
	Targets int64 // frozen targets
	Granted int64 // grants of the campaign
	Missing int64 // targets without a grant
	Extra   int64 // grants whose key is not a target
}

// Reconciled reports whether the granted keys equal the targets.
func (c Counts) Reconciled() bool { return c.Missing == 0 && c.Extra == 0 }

// CampaignStats are a campaign's numbers after a run, for metrics and
// status.
type CampaignStats struct {
	Campaign string
	AsOf     time.Time
	// Frozen is true when this run froze the campaign.
	Frozen bool
	Counts
}

// Options are what a kind's OpenPlan gets besides the config.
type Options struct {
	Logger *slog.Logger
	// Test, zero in production, lets a test reach moments inside a run.
	Test TestSignals
	// Stop is the run's graceful stop (closed: take no new page; nil:
	// none): a campaign whose freeze would also grant the first page
	// grants none when the run was asked to stop before the freeze.
	Stop <-chan struct{}
}

// TestSignals are the moments inside a kind's pages a test can act at (a
// crash injected where a kill would land only sometimes; see package
// testsignal). Production code leaves them zero.
type TestSignals struct {
	// BeforeCommit runs inside each page's transaction just before its
	// commit, told the campaign; an error rolls the page back as a crash
	// would.
	BeforeCommit testsignal.Hook[string]
}
