package syncer

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
)

// prefetch is what the first round trip on the source's session reads
// with the table's fingerprint (source.Opening.Start), for a run with a
// SchemaCache: the statements of the read bound and of the look for rows
// stamped ahead of the clock, and, for a sink that keeps the syncd
// catalog, the source table's identity that claim compares with the
// sink's record (catalog.ReadSource). The identity is not cached: it is
// read at every run, as claim would read it, only one round trip earlier
// (after the bound's statements, as before, and before the run lock,
// which guards the sink, not the source table).
func (r *runner) prefetch(dst sink.Sink) source.Prefetch {
	p := source.Prefetch{Ahead: waitsOf(r.o).ahead}
	if _, ok := dst.(sink.Recorder); !ok || sink.LockConn(dst) == nil {
		return p
	}
	t := r.c.Source.Ident
	p.Extra = func(b *pgx.Batch) {
		catalog.QueueSource(b, pgutil.Qualified(t.Schema, t.Name), t.String(), func(id catalog.Source, err error) {
			if err == nil {
				r.sourceRead = &id
			}
		})
	}
	return p
}

// readSource is the source table's identity for claim: the one the run's
// first round trip read (prefetch), once, else read now on the source's
// session.
func (r *runner) readSource(ctx context.Context, q catalog.RowQuerier, src source.Source) (catalog.Source, error) {
	if id := r.sourceRead; id != nil {
		r.sourceRead = nil
		return *id, nil
	}
	t := src.Table().Ident
	return catalog.ReadSource(ctx, q, pgutil.Qualified(t.Schema, t.Name), t.String())
}
