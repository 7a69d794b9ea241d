// Package kind is the contract of a kind of sink: per sink.type, its config
// keys, how a run opens it, what validate checks, what makes two copies
// "the same place" (its identity), which of its values are secrets, and its
// capabilities: how it holds the run lock, whether reconcile, resync and
// schema following apply, whether it appends rather than upserts. A
// Registry of kinds is built in one place (cli's DefaultKinds, one line a
// kind) and handed down to the commands, the daemon and the run loop
// (syncer.Options.Kinds), which look a source's kind up in it instead of
// comparing sink.type. This package knows only the table copy (Postgres);
// every other kind is a package of its own that returns its Kind (coupon's
// Kind, for a campaign). docs/SINKS.md is the guide.
package kind

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/plan"
	"github.com/syncd/syncd/reconcile"
	"github.com/syncd/syncd/runlock"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
)

// Kind describes one sink type. Type, Identity and one of OpenSink and
// OpenPlan are required (NewRegistry refuses a kind without them); every
// other field is a capability, off when unset.
type Kind struct {
	// Type is the sink.type value.
	Type string
	// Config declares the kind's own keys under sink: and their checks
	// (nil: a built-in kind, whose keys config.Sink holds). The load
	// refuses keys no kind declares.
	Config *config.SinkKind
	// OpenSink opens the sink of a table copy: syncer reads the source
	// table into it by the keyset cursor, below the commit-safe bound,
	// with lookback and the outside pass. Nil for a kind that reads its
	// own pages (OpenPlan).
	OpenSink func(ctx context.Context, c *config.Config) (sink.Sink, error)
	// OpenPlan opens a run that reads its own pages (a campaign's frozen
	// targets). Nil for a table copy (OpenSink).
	OpenPlan func(ctx context.Context, c *config.Config, o plan.Options) (*plan.Plan, error)
	// Check is what validate checks of the sink, given the open source,
	// without writing anything; it returns warnings. For a table copy it
	// runs after the source's checks; for a plan it replaces them (a
	// campaign reads its frozen targets, not pages). Nil: nothing beyond
	// the source's checks (and, for a sink with Catalog, the copy's
	// columns and key in its database).
	Check func(ctx context.Context, c *config.Config, src source.Source) ([]string, error)
	// Identity returns the settings, by config key ("sink.database",
	// "sink.directory"), that name the place the kind writes to, beyond
	// sink.type, sink.table, sink.key and sink.keep_deleted: a watermark
	// is only resumed where all of them are the same, so a copy moved to
	// another database (or directory, or topic) starts afresh instead of
	// resuming from a watermark that does not describe it. Values must not
	// hold secrets (they are printed).
	Identity func(c *config.Config) map[string]string
	// Secrets returns the values of c that must never be printed (a
	// password, a token); the commands scrub them from every line they
	// write. Nil: none.
	Secrets func(c *config.Config) []string
	// Lock takes the run lock of target t for a run that opened sink s,
	// without waiting: an error wrapping runlock.ErrHeld when another
	// process holds it (the run is then skipped). The run takes it once
	// the sink is open and before anything is written: a table copy after
	// the source's bound is read and before the copy is claimed in the
	// sink's catalog; a plan after OpenPlan (which writes nothing) and
	// before its Before hook. The run checks it before each page and
	// releases it last. Nil: the kind cannot hold a run lock, and two
	// runs of one source may write at once; only a kind whose writes
	// tolerate that may leave it out.
	Lock func(ctx context.Context, c *config.Config, s sink.Sink, t runlock.Target) (RunLock, error)
	// Reconcile compares the source with what the sink holds (and with
	// repair fixes it); states holds the watermark when ReconcileWatermark.
	// Nil: reconcile does not apply, and `syncd reconcile` refuses the
	// source with NoReconcile (exit 2).
	Reconcile func(ctx context.Context, c *config.Config, states reconcile.StateReader, repair bool, log *slog.Logger) (*reconcile.Report, error)
	// ReconcileWatermark is true when Reconcile compares the rows up to the
	// watermark in the state file (a campaign's progress lives in its sink).
	ReconcileWatermark bool
	// NoResync, when set, says why resync does not apply to the kind, as
	// the end of a sentence "source NAME ...".
	NoResync string
	// FollowsSchema is true when the kind's sinks follow the source's
	// schema changes (sink.SchemaFollower): schema_changes: evolve alters
	// the copy, fail refuses a change. A kind without it writes the
	// columns each page has, and refuses schema_changes: fail, which it
	// could not enforce.
	FollowsSchema bool
	// Appends is true when Apply appends every row of a page instead of
	// upserting it by key: a re-applied page or the lookback window is
	// written again, and readers keep the newest row of a key by its
	// cursor. The conformance suite checks such a sink by that rule.
	Appends bool
	// Catalog is true when the sink's database keeps syncd's catalog of
	// copies (package catalog): status --sink and the fleet status read
	// it, and validate checks the copy's columns and key there.
	Catalog bool
	// RunsAtStart is true when the daemon runs the source at start, not
	// only on its schedule.
	RunsAtStart bool
	// Campaign is true when a run is a campaign: a new sink.campaign id
	// starts afresh instead of being refused.
	Campaign bool
}

// RunLock is a held run lock (runlock.Lock is the PostgreSQL one).
type RunLock interface {
	// Check fails when the lock was lost; the run then stops before its
	// next page.
	Check(ctx context.Context) error
	// Release gives the lock back.
	Release(ctx context.Context) error
}

var _ RunLock = (*runlock.Lock)(nil)

// NoReconcile is the refusal of `syncd reconcile` for a source whose kind
// has no Reconcile.
func (k Kind) NoReconcile(c *config.Config) error {
	return c.Errorf("sink.type", "source %s has a %s sink, for which reconcile does not apply (the kind compares no copy with its source); check it with `syncd status`, and rebuild it with `syncd resync` if it is wrong", c.Name, k.Type)
}

// Registry holds the kinds one build knows, by type. It is built once (by
// cli's DefaultKinds) and passed down; it is never changed after. A nil
// *Registry holds the table copy (Postgres) only.
type Registry struct {
	kinds map[string]Kind
}

// NewRegistry returns the registry of ks. It panics on a kind that lacks
// what every kind needs, or a type given twice: a mistake in the one place
// kinds are registered, found when the program starts.
func NewRegistry(ks ...Kind) *Registry {
	r := &Registry{kinds: map[string]Kind{}}
	for _, k := range ks {
		switch {
		case k.Type == "":
			panic("kind: a kind without Type")
		case (k.OpenSink == nil) == (k.OpenPlan == nil):
			panic(fmt.Sprintf("kind %s: set exactly one of OpenSink and OpenPlan", k.Type))
		case k.Identity == nil:
			panic(fmt.Sprintf("kind %s: Identity is required (what makes two copies the same place)", k.Type))
		}
		if _, dup := r.kinds[k.Type]; dup {
			panic(fmt.Sprintf("kind %s: registered twice", k.Type))
		}
		r.kinds[k.Type] = k
	}
	return r
}

// With returns a registry of r's kinds and ks (a test adds its own kind
// to the default ones this way).
func (r *Registry) With(ks ...Kind) *Registry {
	if r == nil {
		return NewRegistry(append([]Kind{Postgres()}, ks...)...)
	}
	return NewRegistry(append(slices.Collect(maps.Values(r.kinds)), ks...)...)
}

// Of returns the kind of c's sink, or an error naming sink.type when this
// build does not know it (config validation refuses such a config first).
func (r *Registry) Of(c *config.Config) (Kind, error) {
	if r == nil {
		r = NewRegistry(Postgres())
	}
	if k, ok := r.kinds[c.Sink.Type]; ok {
		return k, nil
	}
	return Kind{}, c.Errorf("sink.type", "unknown sink type %q; use one of %s", c.Sink.Type, strings.Join(r.Types(), ", "))
}

// Types lists the known sink types, sorted.
func (r *Registry) Types() []string {
	if r == nil {
		return []string{config.SinkPostgres}
	}
	return slices.Sorted(maps.Keys(r.kinds))
}

// Sinks is what a config load needs to accept the registered kinds' own
// keys (config.Options.Sinks).
func (r *Registry) Sinks() map[string]config.SinkKind {
	out := map[string]config.SinkKind{}
	if r == nil {
		return out
	}
	for t, k := range r.kinds {
		if k.Config != nil {
			out[t] = *k.Config
		}
	}
	return out
}

// Secrets lists the secrets of c: both DSNs' passwords and what c's kind
// declares.
func (r *Registry) Secrets(c *config.Config) []string {
	out := []string{pgutil.Password(c.Source.DSN)}
	if k, err := r.Of(c); err == nil && k.Secrets != nil {
		out = append(out, k.Secrets(c)...)
	}
	return out
}

// Postgres is the table copy: a sink.Postgres in the database of sink.dsn,
// holding the run lock on its own session, keeping syncd's catalog,
// following the source's schema, reconciled against the watermark.
func Postgres() Kind {
	return Kind{
		Type:               config.SinkPostgres,
		OpenSink:           openPostgres,
		Identity:           DatabaseIdentity,
		Secrets:            DSNSecrets,
		Lock:               PostgresLock,
		Reconcile:          reconcileTable,
		ReconcileWatermark: true,
		FollowsSchema:      true,
		Catalog:            true,
		RunsAtStart:        true,
	}
}

// DatabaseIdentity is the identity of a sink in a PostgreSQL database:
// sink.database, the host, port and database of sink.dsn without user or
// password.
func DatabaseIdentity(c *config.Config) map[string]string {
	return map[string]string{"sink.database": DatabaseText(c.Sink.DSN)}
}

// DSNSecrets is the secret of a sink in a PostgreSQL database: the
// password of sink.dsn.
func DSNSecrets(c *config.Config) []string {
	return []string{pgutil.Password(c.Sink.DSN)}
}

// DatabaseText is host:port/database of a DSN, without user or password
// ("" when it does not parse).
func DatabaseText(dsn string) string {
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s:%d/%s", pc.Host, pc.Port, pc.Database)
}

// PostgresLock takes the run lock as an advisory lock in the sink's
// database: on the sink's own session when it is a sink.LockHolder (so
// that losing one loses both), else on a connection of its own opened
// with the sink's session limits (sink.Connect).
func PostgresLock(ctx context.Context, c *config.Config, s sink.Sink, t runlock.Target) (RunLock, error) {
	var lock *runlock.Lock
	var err error
	if conn := sink.LockConn(s); conn != nil {
		lock, err = runlock.Acquire(ctx, conn, c.Sink.DSN, t)
		// A pooled sink session releases the lock with its reset when the
		// sink closes (or before it is closed): no round trip of its own.
		if r, ok := s.(interface{ ReleasesLocks() bool }); err == nil && ok && r.ReleasesLocks() {
			lock.ReleasedBySession()
		}
	} else {
		dial := func(ctx context.Context) (*pgx.Conn, error) { return sink.Connect(ctx, c) }
		lock, err = runlock.AcquireOwn(ctx, dial, t)
	}
	if err != nil {
		return nil, err
	}
	return lock, nil
}

func reconcileTable(ctx context.Context, c *config.Config, states reconcile.StateReader, repair bool, log *slog.Logger) (*reconcile.Report, error) {
	return reconcile.Run(ctx, c, states, reconcile.Options{Repair: repair, Logger: log})
}

// openPostgres opens the table copy's sink; on failure the Sink is nil, not
// an interface holding a nil *sink.Postgres (a run that failed to open its
// sink would otherwise call methods on it).
func openPostgres(ctx context.Context, c *config.Config) (sink.Sink, error) {
	s, err := sink.OpenPostgres(ctx, c)
	if err != nil {
		return nil, err
	}
	return s, nil
}
