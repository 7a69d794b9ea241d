// Package sink owns where pages go. Sink is the small interface every
// destination implements; Postgres is the table copy, which applies each page
// in one transaction as an idempotent upsert by key, so re-applying a page
// or a lookback window changes nothing.
package sink

import (
	"context"

	"github.com/syncd/syncd/page"
)

// Sink receives the pages of one source.
type Sink interface {
	// Prepare checks the destination against the selected source columns and
	// creates it when it does not exist.
	Prepare(ctx context.Context, cols []page.Column) error
	// Apply writes one page in one transaction; it returns only after the
	// transaction has committed (or failed and rolled back).
	Apply(ctx context.Context, p page.Page) (Result, error)
	// Close releases the sink's connection.
	Close(ctx context.Context) error
}

// Result counts what one Apply changed.
type Result struct {
	// Written is the number of rows inserted or changed; rows whose stored
	// values were already equal or newer are not counted.
	Written int64
	// Deleted is the number of rows removed (soft deletes).
	Deleted int64
}
