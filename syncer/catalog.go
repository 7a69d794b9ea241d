package syncer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/internal/sourceerr"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// claim makes the sink's catalog (package catalog) agree with this run
// before it writes anything, on the sink session that holds the run lock:
//
//   - a copy recorded as written by another source is refused (exit 2,
//     naming both sources and the copy): a copy has exactly one writer;
//   - a state file that the sink's record is ahead of (lost, restored from
//     a backup, or left behind by a crash between a page's commit and its
//     watermark) resumes from the sink's record, which moved in the page's
//     own transaction;
//   - a sink behind the state file (restored from a backup to an older
//     point) resumes from the sink's record too, so the rows the restore
//     took away are read again;
//   - a resync of the state file moves the sink's record with it.
//
// It returns the record, with the source's identity as the catalog last
// knew it (see rewritten).
func (r *runner) claim(ctx context.Context, src source.Source, dst sink.Sink) (*catalog.Record, error) {
	conn := sink.LockConn(dst)
	rs, ok := dst.(sink.Recorder)
	q, queried := src.(source.Querier)
	if conn == nil || !ok || !queried {
		// A sink without a database of its own to record in, or a source
		// whose table has no catalog identity.
		return nil, nil
	}
	c := r.c
	if err := catalog.EnsureFrom(ctx, conn, r.pre.catalog); err != nil {
		return nil, err // a missing privilege: exit 1, a grant fixes it
	}
	id, err := r.readSource(ctx, q, src)
	if err != nil {
		return nil, err
	}
	id.Cursor = slices.Clone(c.Source.Cursor)
	r.source = &id
	mine := catalog.Record{Copy: c.Sink.Ident.String(), SourceName: c.Name, Source: id, Cursor: r.st.Cursor,
		Writer: writerName(), StateFile: r.o.Store.Path(), ResyncedAt: r.st.ResyncedAt.Truncate(time.Microsecond)}
	rec, created, err := catalog.ClaimFrom(ctx, conn, mine, r.pre.catalog)
	if err != nil {
		return nil, err
	}
	r.rec, r.claimedAt = &rec, time.Now()
	if created {
		rs.Record(mine.Copy)
		return &rec, nil
	}
	if err := catalog.Refuse(rec, c.Name, id); err != nil {
		return nil, c.ErrorAt("sink.table", err)
	}
	if !rec.Source.Same(id) && !r.resyncedSince(rec) {
		return nil, c.ErrorAt("source.table", &sourceerr.ResyncNeeded{Source: c.Name, Alt: "(or --from TIME) to rebuild it from the new table, or point source.table back",
			Reason: fmt.Sprintf("the copy %s was made by source %s from %s, but the source now reads %s: resuming would mix the two tables' rows; ", rec.Copy, c.Name, rec.Source, id)})
	}
	if err := r.forgetOthersLoad(rec, mine); err != nil {
		return nil, err
	}
	moved, err := r.follow(ctx, src, conn, &rec)
	if err != nil {
		return nil, err
	}
	if !rec.Source.Same(id) {
		rec.Source = id // moved to another table by the resync followed above
	}
	r.handover = rec.Writer != mine.Writer
	changed := moved || rec.Writer != mine.Writer || rec.StateFile != mine.StateFile || !slices.Equal(rec.Source.Cursor, id.Cursor)
	rec.Writer, rec.StateFile = mine.Writer, mine.StateFile
	// A record that did not name its cursor's columns names them (follow
	// moved one that named others). The columns stay the ones the copy
	// follows until prepare has followed the source's (rewritten records
	// them): a state file without a schema follows the source's changes
	// from them. An idle run of a daemon writes nothing here.
	rec.Source.Cursor = id.Cursor
	r.recordedColumns = rec.Source.Columns
	known := rec.Source
	if changed {
		if err := catalog.Update(ctx, conn, rec, moved); err != nil {
			return nil, err
		}
	}
	rs.Record(mine.Copy)
	rec.Source = known
	return &rec, nil
}

// forgetOthersLoad drops the state file's unfinished first load when
// another state file (another replica, or a run --once elsewhere) claimed
// the copy since: its chunks done may no longer be in the copy. A load
// that other process restarted empties the copy first (a rewritten source
// heap), deleting the chunks this one committed; resumed, this load would
// skip them and record a watermark past rows the copy lacks. Without it,
// the run starts from the sink's record (follow), or fills the copy from
// the start as any run without a watermark does. A hand-over, logged at
// info.
func (r *runner) forgetOthersLoad(rec, mine catalog.Record) error {
	if r.st.FirstLoad == nil || sameStateFile(rec, mine) {
		return nil
	}
	r.log.Info("another syncd process claimed the copy since this state file's first load began, and may have removed the chunks this one committed: the load is not resumed; the run starts from the sink's record, or from the start",
		"copy", rec.Copy, "last_writer", rec.Writer, "last_state_file", rec.StateFile)
	if err := r.o.Store.Update(r.c.Name, func(st *watermark.State) error {
		st.FirstLoad = nil
		return nil
	}); err != nil {
		return err
	}
	r.st.FirstLoad = nil
	return nil
}

// sameStateFile reports whether two records were claimed through the same
// state file: the same path on the same host (writerName).
func sameStateFile(a, b catalog.Record) bool {
	host := func(w string) string {
		if i := strings.LastIndex(w, " pid "); i >= 0 {
			return w[:i]
		}
		return w
	}
	return a.StateFile == b.StateFile && host(a.Writer) == host(b.Writer)
}

// follow settles where the run starts when the state file and the sink's
// record disagree: a resync of the state file the record has not seen
// moves the record (moved is true); otherwise the sink's record wins, and
// the state file is set to it.
func (r *runner) follow(ctx context.Context, src source.Source, conn *pgx.Conn, rec *catalog.Record) (moved bool, err error) {
	st := r.st
	if r.resyncedSince(*rec) {
		// A resync since the record last moved: the operator chose where
		// the copy restarts.
		rec.Cursor, rec.ResyncedAt = st.Cursor, st.ResyncedAt.Truncate(time.Microsecond)
		return true, nil
	}
	if len(rec.Cursor) > 0 && len(rec.Cursor) != len(src.Table().Cursor) {
		return false, nil // another cursor: the identity check refuses the state's
	}
	if cols := r.c.Source.Cursor; len(rec.Source.Cursor) > 0 && !slices.Equal(rec.Source.Cursor, cols) {
		// The record's cursor is a position in another cursor: read as
		// this one's it would skip rows. The state file decides (its own
		// identity check refuses a watermark of the other cursor), and the
		// record moves to it and to this cursor.
		r.log.Warn("the sink's record of the copy is a position in another cursor; the state file decides where the run starts",
			"copy", rec.Copy, "record_cursor_columns", strings.Join(rec.Source.Cursor, ", "), "cursor_columns", strings.Join(cols, ", "))
		rec.Cursor, rec.Source.Cursor = st.Cursor, slices.Clone(cols)
		return true, nil
	}
	var why string
	behind := false // the state file is behind the record, or has no watermark
	switch {
	case slices.Equal(rec.Cursor, st.Cursor):
		return false, nil
	case st.Cursor == nil && st.From != "":
		return false, nil // a resync --from point the record has followed already
	case st.Cursor == nil:
		why, behind = "the state file holds no watermark for it (lost, or replaced by an older one)", true
	case rec.Cursor == nil:
		why = "the copy holds no page of the state file's watermark: the sink was restored from a backup taken before syncd wrote it, or the copy was rebuilt"
	default:
		less, err := src.Less(ctx, st.Cursor, rec.Cursor)
		if err != nil {
			return false, err
		}
		if less {
			behind = true
			why = "the state file is behind the copy (restored from a backup, or a crash came between a page's commit and its watermark)"
		} else {
			why = "the copy is behind the state file: the sink was restored from a backup to an older point, or lost commits"
		}
	}
	if rec.Cursor != nil {
		holds, err := copyHolds(ctx, conn, r.c)
		if err != nil {
			return false, err
		}
		if !holds {
			// The record outlived its copy (dropped or emptied): it says
			// nothing about where to resume; the state file decides, and
			// the lost-copy check refuses a watermark without its rows.
			rec.Cursor = st.Cursor
			return true, nil
		}
	}
	attrs := []any{"copy", rec.Copy, "state_file_cursor", cursorText(st.Cursor), "sink_cursor", cursorText(rec.Cursor), "reason", why}
	if behind && rec.Writer != writerName() {
		// Another process (a replica sharing the sources) ran the source
		// since this state file's last run: the usual hand-over, no alarm.
		r.log.Info("resuming from the sink's record: another syncd process ran this source since this state file's last run",
			"copy", rec.Copy, "last_writer", rec.Writer, "state_file_cursor", cursorText(st.Cursor), "sink_cursor", cursorText(rec.Cursor))
	} else {
		r.log.Warn("the state file and the sink's record of the copy disagree; resuming from the sink's record, which moves in each page's own transaction", attrs...)
	}
	err = r.o.Store.Update(r.c.Name, func(st *watermark.State) error {
		st.Cursor, st.From = rec.Cursor, ""
		// The stored bound and a first load belong to the old position.
		st.LookbackBound, st.LookbackXmin, st.LookbackServer, st.FirstLoad = "", 0, time.Time{}, nil
		return nil
	})
	if err != nil {
		return false, err
	}
	r.st.Cursor, r.st.From, r.st.LookbackBound, r.st.LookbackXmin, r.st.LookbackServer, r.st.FirstLoad = rec.Cursor, "", "", 0, time.Time{}, nil
	return false, nil
}

// resyncedSince reports whether the state file holds a resync that rec
// has not followed (see resyncPending).
func (r *runner) resyncedSince(rec catalog.Record) bool {
	return resyncPending(r.st.Cursor, r.st.ResyncedAt, rec.ResyncedAt)
}

// resyncPending reports whether a state file at cursor, resynced at
// stateAt, holds a resync that the sink's record, which last followed the
// one at recordAt, has not followed: one the state file still sits at (no
// cursor: a page moves it on), other than the record's. A state file that
// moved past its resync had it followed, by a run against this sink or
// against the one a restore took back: following it again would move the
// record to the state file's position and skip the rows the copy lacks
// (a state file restored from a backup after an older resync, or a sink
// restored from a backup taken before the resync). The clocks of the
// hosts that resynced are not compared.
func resyncPending(cursor []string, stateAt, recordAt time.Time) bool {
	at := stateAt.Truncate(time.Microsecond)
	return cursor == nil && !at.IsZero() && !at.Equal(recordAt)
}

// rewritten compares the source table with the one the copy was made
// from. A table dropped and re-created (another OID), or whose heap was
// replaced (TRUNCATE, VACUUM FULL, CLUSTER, pg_repack, a rewriting ALTER
// TABLE; a partition attached or detached), may hold rows stamped before
// the watermark that no cursor page will read, and lack rows the copy
// holds: the copy is compared with the source value by value and repaired
// (reconcile), before the run reads on. The new identity is recorded only
// once that repair has succeeded.
func (r *runner) rewritten(ctx context.Context, src source.Source, rec *catalog.Record, repair func(context.Context) error) error {
	if rec == nil {
		return nil
	}
	conn := sink.LockConn(r.dst)
	id := *r.source
	old := rec.Source
	if old.OID == id.OID && old.Heap == id.Heap {
		if slices.Equal(old.Columns, id.Columns) {
			return nil
		}
		// The copy follows the source's columns now (prepare).
		rec.Source.Columns = id.Columns
		return catalog.Update(ctx, conn, *rec, false)
	}
	if r.st.Cursor == nil && repair != nil {
		// No watermark to repair the copy up to (a resync from the start
		// or from a time, a load to come): the pages re-read the source,
		// but rows the copy holds that the new table lacks would stay. A
		// copy that holds rows keeps the old identity in the record, so
		// that the next run, which has a watermark, compares and repairs.
		holds, err := copyHolds(ctx, conn, r.c)
		if err != nil {
			return err
		}
		if holds {
			r.log.Warn("the source table is not the one the copy was made from, and there is no watermark to compare the copy up to yet; the next run compares and repairs it",
				"table", src.Table().Ident.String(), "copy", rec.Copy, "heap", id.Heap, "was", old.Heap)
			return nil
		}
	}
	if r.st.Cursor != nil && repair != nil {
		what := "its heap was rewritten or emptied (TRUNCATE, VACUUM FULL, CLUSTER, pg_repack, a rewriting ALTER TABLE) or a partition was attached or detached"
		if old.OID != id.OID {
			what = fmt.Sprintf("it was dropped and created again (oid %d, was %d)", id.OID, old.OID)
		}
		r.log.Warn("the source table is not the one the copy was made from: "+what+"; comparing the copy with it value by value and repairing it before reading on",
			"table", src.Table().Ident.String(), "copy", rec.Copy, "heap", id.Heap, "was", old.Heap)
		if err := repair(ctx); err != nil {
			return fmt.Errorf("source table %s changed under the copy %s (%s), and the repair of the copy failed: %w; the next run tries again",
				src.Table().Ident, rec.Copy, what, err)
		}
	}
	rec.Source = id
	return catalog.Update(ctx, conn, *rec, false)
}

// recordLoaded moves the copy's record to the cursor a first load ends
// with, before the state file's watermark is.
func recordLoaded(ctx context.Context, dst sink.Sink, c *config.Config, cursor []string, rows int64) error {
	conn := sink.LockConn(dst)
	if _, ok := dst.(sink.Recorder); !ok || conn == nil || cursor == nil {
		return nil
	}
	return catalog.SetCursor(ctx, conn, c.Sink.Ident.String(), cursor, rows)
}

// copyHolds reports whether c's copy exists and holds a row.
func copyHolds(ctx context.Context, conn *pgx.Conn, c *config.Config) (bool, error) {
	state, err := copyState(ctx, conn, c)
	return state == "", err
}

// copyState is "missing" or "empty" for a copy that lacks its rows, ""
// for one that holds a row, in one round trip: a copy that does not exist
// (or whose schema does not) fails the statement with undefined_table or
// invalid_schema_name, which resolve the qualified name as to_regclass
// would.
func copyState(ctx context.Context, conn *pgx.Conn, c *config.Config) (string, error) {
	t := c.Sink.Ident
	var any bool
	err := conn.QueryRow(ctx, copyHoldsSQL(c)).Scan(&any)
	if missingTable(err) {
		return "missing", nil
	}
	if err != nil {
		return "", sink.Explain(ctx, conn, c, []string{t.String()}, fmt.Errorf("look into the copy %s: %w", t, err))
	}
	if any {
		return "", nil
	}
	return "empty", nil
}

// copyHoldsSQL asks whether c's copy holds a row.
func copyHoldsSQL(c *config.Config) string {
	return "SELECT EXISTS (SELECT 1 FROM " + pgutil.Qualified(c.Sink.Ident.Schema, c.Sink.Ident.Name) + ")"
}

// missingTable reports whether err is PostgreSQL's undefined_table or
// invalid_schema_name.
func missingTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000")
}

// writerName names this process in the catalog: host and pid.
// WriterName is how the sink's records name this process as a copy's
// writer: "HOST pid PID".
func WriterName() string { return writerName() }

func writerName() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d", h, os.Getpid())
}

func cursorText(c []string) string {
	if c == nil {
		return "(none)"
	}
	return "(" + strings.Join(c, ", ") + ")"
}

// repairFunc is the repair a changed source table needs: k's reconcile
// with repair, against the state file's watermark (nil when k has none).
func (r *runner) repairFunc(k kind.Kind) func(context.Context) error {
	if k.Reconcile == nil || !k.ReconcileWatermark {
		return nil
	}
	return func(ctx context.Context) error {
		// The caller's logger: the reconcile names the source itself
		// (r.log does too, and slog would write the key twice).
		rep, err := k.Reconcile(ctx, r.c, r.o.Store, true, r.o.Logger)
		if err != nil {
			return err
		}
		f := rep.Final()
		if !f.Equal() {
			return fmt.Errorf("differences remain after the repair: %v", f.Differences())
		}
		r.log.Warn("the copy was compared with the re-created or rewritten source table and repaired",
			"copy", r.c.Sink.Ident.String(), "missing", rep.Missing, "extra", rep.Extra, "changed", rep.Changed)
		return nil
	}
}

// RecordedSchema is the source's schema as the sink's record of a copy
// knows it (cols, the record's columns; nil when it knows none): what a
// state file without a schema follows the source's changes from.
func RecordedSchema(cols []catalog.Column) *watermark.Schema {
	if len(cols) == 0 {
		return nil
	}
	s := &watermark.Schema{}
	for _, col := range cols {
		s.Columns = append(s.Columns, watermark.SchemaColumn{Name: col.Name, Type: col.Type, Num: col.Num})
	}
	return s
}
