// Package sink owns where pages go. Sink is the small interface every
// destination implements; Postgres is the table copy, which applies each page
// in one transaction as an idempotent upsert by key, so re-applying a page
// or a lookback window changes nothing.
package sink

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/page"
)

// Sink receives the pages of one source.
//
// Beyond these methods a sink may declare optional capabilities, which the
// run loop looks for and the conformance suite (package sinktest) checks
// against what each sink's harness says it has:
//   - Deferred: Apply may return before its commit is durable; the run
//     writes a page's watermark only once Durable counts the page, and
//     calls Flush when the run ends.
//   - BinaryWriter: the sink takes pages of binary values when it says so
//     after Prepare, and the source then reads binary.
//   - LockHolder: the sink's own session holds the run lock, so that the
//     lock is lost exactly when the sink's connection is.
//   - SourceSchemaUser: the sink is given the source's types and checks
//     before Prepare.
//   - Unfinisher: the sink is told, before Close, that the run did not
//     catch up, and skips closing work worth doing only after one that did.
//   - Recorder: the destination keeps its own record of its position,
//     moved by each page with a mark in the page's transaction.
//   - SchemaFollower: the copy follows the source's schema changes.
//
// What is not a method of the sink (its config keys, identity, secrets,
// run lock, whether reconcile and resync apply, whether it appends) its
// kind declares (package kind).
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

// LockHolder is implemented by a sink whose own connection should hold the
// run lock (runlock.Acquire): a run that loses the sink's session loses the
// lock with it, and a lock held elsewhere cannot outlive the writes it
// guards. Conn is the session Apply writes on; it stays the same from
// Prepare to Close.
type LockHolder interface {
	Conn() *pgx.Conn
}

var _ LockHolder = (*Postgres)(nil)

// Unfinisher is implemented by a sink whose Close does work worth doing
// only after a run that caught up (Postgres: the ANALYZE of a copy the run
// filled from empty). A run that ends otherwise (stopped, gracefully or by
// force, or failed) calls Unfinished before Close, and Close skips that
// work: the next run goes on filling the copy, and a stop must not wait.
type Unfinisher interface {
	Unfinished()
}

var _ Unfinisher = (*Postgres)(nil)

// LockConn is s's connection when s is a LockHolder, else nil (the run lock
// then opens its own connection).
func LockConn(s Sink) *pgx.Conn {
	if h, ok := s.(LockHolder); ok {
		return h.Conn()
	}
	return nil
}

// Recorder is implemented by a sink that keeps, in its own database, the
// record of how far its copy is (package catalog): after Record, every
// page with a Mark moves that record in the page's own transaction, so the
// record and the copy can never disagree, whatever crashes.
type Recorder interface {
	Record(copy string)
}

var _ Recorder = (*Postgres)(nil)
