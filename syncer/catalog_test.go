package syncer_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// seedOrders fills orders with n rows stamped one second apart from
// 2026-10-01 09:00 (ids first..first+n-1).
func seedOrders(t *testing.T, e *env, first, n int) {
	t.Helper()
	e.src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-01 09:00:00+00'::timestamptz + g * interval '1 second', 'o' || g, g
FROM generate_series($1::int, $2::int) g`, first, first+n-1)
}

// sinkRecord reads the copy's record from the sink's catalog.
func sinkRecord(t *testing.T, e *env) catalog.Record {
	t.Helper()
	conn, err := e.dst.Pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	rec, ok, err := catalog.Read(context.Background(), conn.Conn(), "public.copy")
	if err != nil || !ok {
		t.Fatalf("read the sink's record of public.copy: found %v, %v", ok, err)
	}
	return rec
}

func newStore(t *testing.T) *watermark.Store {
	t.Helper()
	st, err := watermark.Open(filepath.Join(t.TempDir(), "other.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// The sink's catalog records the copy's writer, where its rows come from,
// and the cursor of the last page, equal to the state file's watermark.
func TestSinkRecordFollowsEveryPage(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	seedOrders(t, e, 1, 1000)
	c := e.config(t, "public.orders", 100, "")
	e.run(t, c, syncer.Options{})
	rec := sinkRecord(t, e)
	st, _, _ := e.store.Get("test")
	if rec.SourceName != "test" || rec.Source.Table != "public.orders" || rec.Source.OID == 0 || rec.Source.Heap == "" || rec.Source.System == "" {
		t.Fatalf("record %+v: want source test, table public.orders, its oid, heap and cluster", rec)
	}
	if !slices.Equal(rec.Cursor, st.Cursor) || rec.Rows != 1000 {
		t.Fatalf("sink record at %v after %d rows, state file at %v; want the same cursor and 1000 rows", rec.Cursor, rec.Rows, st.Cursor)
	}
	names := []string{}
	for _, col := range rec.Source.Columns {
		names = append(names, col.Name)
	}
	if strings.Join(names, ",") != "id,updated_at,name,amount" || rec.Source.Columns[3].Num != 4 {
		t.Fatalf("recorded columns %+v, want id, updated_at, name, amount by attnum", rec.Source.Columns)
	}
}

// A lost state file resumes from the sink's record: the next run reads
// only the rows after it, and the copy equals the source.
func TestLostStateFileResumesFromTheSink(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	seedOrders(t, e, 1, 1000)
	c := e.config(t, "public.orders", 100, "")
	e.run(t, c, syncer.Options{})
	seedOrders(t, e, 1001, 50)
	e.store = newStore(t) // the state file is gone
	res := e.run(t, c, syncer.Options{})
	if res.Rows != 50 || res.Written != 50 {
		t.Fatalf("a run with a lost state file read %d rows and wrote %d; want 50 and 50 (after the sink's record)", res.Rows, res.Written)
	}
	e.assertSame(t, "orders", "t.*")
	st, _, _ := e.store.Get("test")
	if !slices.Equal(st.Cursor, sinkRecord(t, e).Cursor) {
		t.Fatalf("state file at %v, sink at %v after the run", st.Cursor, sinkRecord(t, e).Cursor)
	}
}

// A sink restored from a backup to an older point is behind the state
// file: the run resumes from the sink's point, so the rows the restore
// took away are copied again.
func TestRestoredSinkResumesFromItsOwnPoint(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	seedOrders(t, e, 1, 500)
	c := e.config(t, "public.orders", 100, "")
	e.run(t, c, syncer.Options{})
	// The backup: the copy and the catalog at one point.
	e.dst.Exec(t, "CREATE TABLE backup_copy AS TABLE copy; CREATE TABLE backup_rec AS TABLE syncd.copies")
	seedOrders(t, e, 501, 300)
	e.run(t, c, syncer.Options{})
	// The restore, as pg_restore or a PITR would leave it.
	e.dst.Exec(t, "TRUNCATE copy; INSERT INTO copy TABLE backup_copy; TRUNCATE syncd.copies; INSERT INTO syncd.copies TABLE backup_rec")
	seedOrders(t, e, 801, 10)
	res := e.run(t, c, syncer.Options{})
	if res.Rows != 310 {
		t.Fatalf("the run after the restore read %d rows, want 310 (the 300 the restore took away, and 10 new)", res.Rows)
	}
	e.assertSame(t, "orders", "t.*")
}

// A copy has exactly one writer: a second source (another name, another
// source table, the same sink.table) is refused with a config error that
// names both sources and the copy, and writes nothing.
func TestSecondWriterOfACopyIsRefused(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	e.src.Exec(t, strings.Replace(ordersDDL, "orders", "orders2", 1))
	seedOrders(t, e, 1, 100)
	e.src.Exec(t, `INSERT INTO orders2 SELECT id + 1000, updated_at, 'other', amount FROM orders`)
	c := e.config(t, "public.orders", 100, "")
	e.run(t, c, syncer.Options{})
	other := e.config(t, "public.orders2", 100, "")
	other.Name = "other"
	_, err := syncer.Run(context.Background(), syncer.Options{Config: other, Store: newStore(t)})
	if !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("second writer: %v; want a config error", err)
	}
	for _, want := range []string{"public.copy", "source test", "source other", "exactly one writer", "DELETE FROM syncd.copies"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %q", err, want)
		}
	}
	e.assertSame(t, "orders", "t.*")
}

// A source table dropped and created again, or truncated and reloaded,
// with rows stamped before the watermark: the run notices that the table
// is not the one the copy was made from, repairs the copy by reconcile,
// and the copy equals the new table row by row (nothing missing, nothing
// extra).
func TestRecreatedSourceTableIsRepaired(t *testing.T) {
	for _, how := range []string{"drop", "truncate"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			e.src.Exec(t, ordersDDL)
			seedOrders(t, e, 1, 300)
			c := e.config(t, "public.orders", 100, "")
			e.run(t, c, syncer.Options{})
			if how == "drop" {
				e.src.Exec(t, "DROP TABLE orders")
				e.src.Exec(t, ordersDDL)
			} else {
				e.src.Exec(t, "TRUNCATE orders")
			}
			// Rows 101-400, stamped like the old ones: 100 old rows gone,
			// 100 new ones before the watermark, 100 changed.
			e.src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-01 09:00:00+00'::timestamptz + (g - 100) * interval '1 second', 'new' || g, g FROM generate_series(101, 400) g`)
			var log jsonLog
			e.run(t, c, syncer.Options{Logger: log.logger()})
			e.assertSame(t, "orders", "t.*")
			if msgs := log.messages(t); !slices.Contains(msgs, "reconcile done") {
				t.Fatalf("the repairing run logged no \"reconcile done\": %q", msgs)
			}
			if rec := sinkRecord(t, e); rec.Source.Heap == "" {
				t.Fatalf("record without heap: %+v", rec)
			}
			// The next run does not repair again.
			res := e.run(t, c, syncer.Options{})
			if res.Written != 0 {
				t.Fatalf("the run after the repair wrote %d rows, want 0", res.Written)
			}
		})
	}
}

// A resync moves the sink's record with the state file: a resync from the
// start is not undone by the sink's record.
func TestResyncMovesTheSinkRecord(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	seedOrders(t, e, 1, 200)
	c := e.config(t, "public.orders", 100, "")
	e.run(t, c, syncer.Options{})
	err := e.store.Update("test", func(st *watermark.State) error {
		st.Cursor, st.From, st.ResyncedAt = nil, "", st.LastRunAt.Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	res := e.run(t, c, syncer.Options{})
	if res.Rows != 200 {
		t.Fatalf("the run after a resync from the start read %d rows, want 200", res.Rows)
	}
	st, _, _ := e.store.Get("test")
	if rec := sinkRecord(t, e); !slices.Equal(rec.Cursor, st.Cursor) {
		t.Fatalf("sink record at %v, state file at %v", rec.Cursor, st.Cursor)
	}
}

// The same source name reading another table (with a lost state file, so
// that the state file's own identity check cannot see it): refused with
// the resync that rebuilds the copy; after the resync the source takes the
// copy over.
func TestSourceNowReadingAnotherTableNeedsAResync(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	e.src.Exec(t, strings.Replace(ordersDDL, "orders", "orders2", 1))
	seedOrders(t, e, 1, 100)
	e.src.Exec(t, `INSERT INTO orders2 SELECT id, updated_at, 'other', amount FROM orders`)
	c := e.config(t, "public.orders", 100, "")
	e.run(t, c, syncer.Options{})
	moved := e.config(t, "public.orders2", 100, "")
	e.store = newStore(t)
	_, err := syncer.Run(context.Background(), syncer.Options{Config: moved, Store: e.store})
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "was made by source test from table public.orders") ||
		!strings.Contains(err.Error(), "syncd resync --source test") {
		t.Fatalf("source moved to another table: %v; want a config error naming both tables and the resync", err)
	}
	err = e.store.Update("test", func(st *watermark.State) error {
		st.Cursor, st.ResyncedAt = nil, st.LastRunAt.Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.run(t, moved, syncer.Options{})
	e.assertSame(t, "orders2", "t.*")
	if rec := sinkRecord(t, e); rec.Source.Table != "public.orders2" {
		t.Fatalf("record names %s, want public.orders2", rec.Source.Table)
	}
}

// A state file restored from a backup taken after an older resync had been
// followed does not undo a later resync the sink's record has followed:
// the older resync is not one made since the record last moved, so the
// sink's record wins, and the rows the later resync re-reads are read.
func TestRestoredStateFileDoesNotReplayAnOlderResync(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	seedOrders(t, e, 1, 200)
	c := e.config(t, "public.orders", 100, "")
	e.run(t, c, syncer.Options{})
	resync := func(at time.Time) {
		t.Helper()
		if err := e.store.Update("test", func(st *watermark.State) error {
			st.Cursor, st.From, st.ResyncedAt = nil, "", at
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	first := time.Now().UTC().Add(-time.Hour)
	resync(first)
	e.run(t, c, syncer.Options{})
	backup, _, err := e.store.Get("test") // the state file's backup: followed the first resync
	if err != nil {
		t.Fatal(err)
	}
	// The copy loses rows; the operator resyncs again, and the run that
	// follows the resync dies after its first page.
	e.dst.Exec(t, "DELETE FROM copy WHERE id % 2 = 0")
	resync(first.Add(30 * time.Minute))
	crash := errors.New("crash")
	if _, err := syncer.Run(context.Background(), syncer.Options{Config: c, Store: e.store,
		Test: syncer.TestSignals{AfterCommit: func(context.Context, syncer.Commit) error { return crash }}}); !errors.Is(err, crash) {
		t.Fatalf("the run meant to die after its first page: %v", err)
	}
	if err := e.store.Replace("test", backup); err != nil {
		t.Fatal(err)
	}
	e.run(t, c, syncer.Options{})
	e.assertSame(t, "orders", "t.*")
}

// The sink's record's cursor is a position in the cursor it was recorded
// with: a lost state file under another source.cursor (same length) does
// not resume from it, which would read the record's values as the new
// cursor's and skip rows; the run starts as a new state file would.
func TestLostStateFileUnderAnotherCursorDoesNotResumeFromTheSink(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, created_at timestamptz NOT NULL, name text)`)
	e.src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-01 09:00:00+00'::timestamptz + g * interval '1 second',
'2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second', 'o' || g FROM generate_series(1, 100) g`)
	c := e.config(t, "public.orders", 30, "")
	e.run(t, c, syncer.Options{})
	// Rows created before the record's cursor value, written since.
	e.src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-02 09:00:00+00', '2026-02-01 00:00:00+00'::timestamptz + g * interval '1 second', 'n' || g
FROM generate_series(101, 150) g`)
	other, err := config.Parse("test.yaml", []byte(fmt.Sprintf(`name: test
source:
  dsn: %s
  table: public.orders
  cursor: [created_at, id]
  lookback: 0s
  page_size: 30
sink:
  dsn: %s
  table: public.copy
  key: [id]
`, e.src.URL, e.dst.URL)))
	if err != nil {
		t.Fatal(err)
	}
	e.store = newStore(t) // the state file is gone, and the cursor changed
	e.run(t, other, syncer.Options{})
	e.assertSame(t, "orders", "t.*")
	if rec := sinkRecord(t, e); !slices.Equal(rec.Source.Cursor, []string{"created_at", "id"}) {
		t.Fatalf("the record's cursor columns are %v after the run, want [created_at id]", rec.Source.Cursor)
	}
}

// A column the source gained while the state file was lost: the sink's
// record knows the source's columns as the copy follows them, so the run
// follows the change (adds the column and fills the rows the copy holds),
// as it does with the state file. Before, the run refused the copy ("add
// it as integer"), and a column added by hand as told stayed NULL in every
// row below the watermark, every command exiting 0.
func TestLostStateFileStillFollowsAColumnAddedToTheSource(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	seedOrders(t, e, 1, 300)
	c := e.config(t, "public.orders", 100, "")
	e.run(t, c, syncer.Options{})
	e.store = newStore(t) // the state file is gone
	e.src.Exec(t, "ALTER TABLE orders ADD COLUMN e integer DEFAULT 7")
	if _, err := runErr(e, c, syncer.Options{}); err != nil {
		// As the error says, by hand.
		t.Logf("the run refused the copy: %v", err)
		e.dst.Exec(t, "ALTER TABLE copy ADD COLUMN e integer")
		e.run(t, c, syncer.Options{})
	}
	e.assertSame(t, "orders", "t.*")
}

// The source table emptied and filled again with part of its rows
// (TRUNCATE), then the state file resynced from the start: the run that
// re-reads the source has no watermark to repair the copy up to, so it
// keeps the table's old identity in the sink's record, and the next run
// (which has one) compares and repairs: the rows the TRUNCATE took away
// leave the copy. Before, the record took the new heap at once, and they
// stayed for good, every run exiting 0.
func TestTruncatedSourceThenResyncFromStartIsRepaired(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	seedOrders(t, e, 1, 400)
	c := e.config(t, "public.orders", 100, "")
	e.run(t, c, syncer.Options{})
	e.src.Exec(t, "BEGIN; CREATE TEMP TABLE kept AS SELECT * FROM orders WHERE id % 4 <> 0; TRUNCATE orders; INSERT INTO orders SELECT * FROM kept; COMMIT")
	if err := e.store.Update("test", func(st *watermark.State) error {
		st.Cursor, st.From, st.ResyncedAt = nil, "", time.Now().UTC()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	e.run(t, c, syncer.Options{})
	e.run(t, c, syncer.Options{})
	e.assertSame(t, "orders", "t.*")
}

// A sink restored from a backup taken before a resync that the state file
// has since followed and moved past: the state file's resync is not one
// to follow again (its pages moved it on), so the sink's record, which the
// restore took back, wins and the rows the restore took away are read
// again. Before, the resync looked new to the restored record, which took
// the state file's position, and those rows were never copied again.
func TestRestoredSinkOlderThanAFollowedResyncResumesFromItsOwnPoint(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	seedOrders(t, e, 1, 300)
	c := e.config(t, "public.orders", 100, "")
	e.run(t, c, syncer.Options{})
	e.dst.Exec(t, "CREATE TABLE backup_copy AS TABLE copy; CREATE TABLE backup_rec AS TABLE syncd.copies")
	seedOrders(t, e, 301, 200)
	if err := e.store.Update("test", func(st *watermark.State) error {
		st.Cursor, st.From, st.ResyncedAt = nil, "", time.Now().UTC()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	e.run(t, c, syncer.Options{}) // follows the resync, re-reads all 500
	e.dst.Exec(t, "TRUNCATE copy; INSERT INTO copy TABLE backup_copy; TRUNCATE syncd.copies; INSERT INTO syncd.copies TABLE backup_rec")
	e.run(t, c, syncer.Options{})
	e.assertSame(t, "orders", "t.*")
}
