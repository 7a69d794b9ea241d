package syncer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/syncd/syncd/source"
)

// outsideState reads the two counts the state file keeps for the source.
func (f *fixture) outsideState(t *testing.T) (nullCursor, ahead int64) {
	t.Helper()
	st, _, err := f.store.Get(f.name)
	if err != nil {
		t.Fatal(err)
	}
	return st.NullCursorRows, st.AheadOfClockRows
}

// Rows whose cursor column is NULL never come out of a row-value keyset.
// They must not stop the other rows (main failed the whole run), must be
// copied, and must be reported in every run, the state and status until
// the source is fixed; a row that gets a cursor value is then synced
// normally.
func TestNullCursorRowsCopiedAndReported(t *testing.T) {
	f := newFixtureOf(t, "timestamptz")
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, CASE WHEN g IN (7, 500, 1000) THEN NULL
		ELSE now() - interval '1 hour' + g * interval '1 ms' END, 'v' || g FROM generate_series(1, 1000) g`)
	c := f.config(t, f.db.URL, "lookback: 0s", "page_size: 100")

	res := f.run(t, c)
	if res.Rows != 997 || res.NullCursorRows != 3 || res.OutsideRows != 3 || res.AheadOfClockRows != 0 {
		t.Fatalf("run: %d cursor rows, %d NULL-cursor rows counted, %d copied by the extra pass, %d ahead; want 997, 3, 3, 0", res.Rows, res.NullCursorRows, res.OutsideRows, res.AheadOfClockRows)
	}
	f.assertSame(t)
	if n := len(f.rows(t, "dst")); n != 1000 {
		t.Fatalf("copy has %d rows, want all 1000", n)
	}
	logs := f.logs.String()
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "3 rows of public.src have a NULL cursor column (updated_at, id)") ||
		!strings.Contains(logs, "make it NOT NULL") || !strings.Contains(logs, "source="+f.name) {
		t.Fatalf("no warning naming the source, the table, the count and the fix:\n%s", logs)
	}
	if !strings.Contains(logs, `msg="run done"`) || !strings.Contains(logs, "rows_null_cursor=3") {
		t.Fatalf(`"run done" does not carry rows_null_cursor=3:\n%s`, logs)
	}
	if n, a := f.outsideState(t); n != 3 || a != 0 {
		t.Fatalf("state: %d NULL-cursor rows and %d ahead, want 3 and 0", n, a)
	}
	if st := status(t, f, c); st.RowsNullCursor != 3 || st.RowsAheadOfClock != 0 {
		t.Fatalf("status --json: rows_null_cursor %d, rows_ahead_of_clock %d; want 3 and 0", st.RowsNullCursor, st.RowsAheadOfClock)
	}
	if text := statusText(t, f, c); !strings.Contains(text, f.name+": 3 rows with a NULL cursor column at the last run") {
		t.Fatalf("status does not report the NULL-cursor rows:\n%s", text)
	}

	// Nothing changed: the extra pass reads the 3 rows again and writes nothing.
	if res = f.run(t, c); res.Written != 0 || res.OutsideWritten != 0 || res.NullCursorRows != 3 {
		t.Fatalf("idle run wrote %d rows (%d by the extra pass) and counted %d NULL-cursor rows; want 0, 0 and 3", res.Written, res.OutsideWritten, res.NullCursorRows)
	}

	// One row gets a cursor value: the cursor syncs it, the count drops to
	// 2. Another changes while its cursor stays NULL: the extra pass copies
	// the change.
	f.db.Exec(t, `UPDATE src SET updated_at = now() - interval '1 minute', v = 'stamped' WHERE id = 500`)
	f.db.Exec(t, `UPDATE src SET v = 'changed, still NULL' WHERE id = 7`)
	res = f.run(t, c)
	if res.Rows != 1 || res.NullCursorRows != 2 {
		t.Fatalf("after the update: %d cursor rows, %d NULL-cursor rows; want 1 and 2", res.Rows, res.NullCursorRows)
	}
	f.assertSame(t)
	if n, _ := f.outsideState(t); n != 2 {
		t.Fatalf("state: %d NULL-cursor rows, want 2", n)
	}
	if !strings.Contains(f.logs.String(), "2 rows of public.src have a NULL cursor column") {
		t.Fatalf("no warning with the new count 2:\n%s", f.logs)
	}

	// A row copied with a cursor value whose cursor becomes NULL follows too.
	f.db.Exec(t, `UPDATE src SET updated_at = NULL, v = 'unstamped' WHERE id = 20`)
	if res = f.run(t, c); res.NullCursorRows != 3 {
		t.Fatalf("after unstamping a row: %d NULL-cursor rows, want 3", res.NullCursorRows)
	}
	f.assertSame(t)

	// Fixed in the source: nothing is reported any more.
	f.db.Exec(t, `UPDATE src SET updated_at = now() - interval '30 seconds' WHERE updated_at IS NULL`)
	if res = f.run(t, c); res.NullCursorRows != 0 {
		t.Fatalf("after the fix: %d NULL-cursor rows, want 0", res.NullCursorRows)
	}
	f.assertSame(t)
	if text := statusText(t, f, c); strings.Contains(text, "NULL cursor") {
		t.Fatalf("status still reports NULL-cursor rows after the fix:\n%s", text)
	}
}

// Rows stamped past the source's clock plus source.ClockAllowance
// ('infinity', a wrong year) were never copied: the read bound is below the
// clock. They must be copied, counted and reported, the watermark must stay
// at or below the clock plus the allowance, rows written later with normal
// stamps must still be synced, and a corrected stamp must reach the copy.
// '-infinity' sorts first and is read by the cursor like any row.
func TestRowsAheadOfClockCopiedAndReported(t *testing.T) {
	for _, tc := range []struct{ typ, past, recent string }{
		{"timestamptz", "now() - interval '1 hour' + g * interval '1 ms'", "now() - interval '1 second'"},
		{"timestamp", "(now() AT TIME ZONE 'UTC') - interval '1 hour' + g * interval '1 ms'", "(now() AT TIME ZONE 'UTC') - interval '1 second'"},
		{"date", "current_date - 10 + g / 100", "current_date - 1"},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			f := newFixtureOf(t, tc.typ+" NOT NULL")
			f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, `+tc.past+`, 'v' || g FROM generate_series(1, 300) g`)
			f.db.Exec(t, `INSERT INTO src (id, updated_at, v) VALUES (301, 'infinity', 'inf'), (302, '2099-01-01', 'typo'), (303, '-infinity', 'minus inf')`)
			c := f.config(t, f.db.URL, "lookback: 0s", "page_size: 50")

			res := f.run(t, c)
			if res.AheadOfClockRows != 2 || res.NullCursorRows != 0 || res.OutsideRows != 2 || res.Rows != 301 {
				t.Fatalf("run: %d rows ahead of the clock, %d NULL-cursor, %d copied by the extra pass, %d cursor rows; want 2, 0, 2, 301 (300 + '-infinity')",
					res.AheadOfClockRows, res.NullCursorRows, res.OutsideRows, res.Rows)
			}
			f.assertSame(t)
			f.assertWatermarkNotAhead(t, tc.typ)
			logs := f.logs.String()
			want := fmt.Sprintf("2 rows of public.src have updated_at past the source's clock plus %s", source.ClockAllowance)
			if !strings.Contains(logs, want) || !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "rows_ahead_of_clock=2") {
				t.Fatalf("no warning %q with the count:\n%s", want, logs)
			}
			if _, a := f.outsideState(t); a != 2 {
				t.Fatalf("state: %d rows ahead of the clock, want 2", a)
			}
			if st := status(t, f, c); st.RowsAheadOfClock != 2 {
				t.Fatalf("status --json: rows_ahead_of_clock %d, want 2", st.RowsAheadOfClock)
			}
			if text := statusText(t, f, c); !strings.Contains(text, f.name+": 2 rows stamped past the source's clock") {
				t.Fatalf("status does not report the rows ahead of the clock:\n%s", text)
			}

			// Rows written later with normal stamps are still synced; the
			// wrong year is corrected and the copy follows.
			f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, `+tc.recent+`, 'later' FROM generate_series(304, 320) g`)
			f.db.Exec(t, `UPDATE src SET updated_at = `+tc.recent+`, v = 'corrected' WHERE id = 302`)
			res = f.run(t, c)
			if res.AheadOfClockRows != 1 {
				t.Fatalf("after the correction: %d rows ahead of the clock, want 1", res.AheadOfClockRows)
			}
			f.assertSame(t)
			f.assertWatermarkNotAhead(t, tc.typ)
		})
	}
}

// assertWatermarkNotAhead checks that the stored watermark is not past the
// source's clock plus source.ClockAllowance.
func (f *fixture) assertWatermarkNotAhead(t *testing.T, typ string) {
	t.Helper()
	wm := f.watermark(t)
	if len(wm) == 0 {
		t.Fatal("no watermark")
	}
	var ok bool
	q := fmt.Sprintf("SELECT $1::%s <= now() + $2::interval", typ)
	allow := fmt.Sprintf("%d microseconds", source.ClockAllowance.Microseconds())
	if err := f.db.Pool.QueryRow(context.Background(), q, wm[0], allow).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("watermark %v is past the source's clock plus %s", wm, source.ClockAllowance)
	}
}

// The extra pass goes through the same sink path as the pages, here the
// text transfer with soft deletes: a NULL-cursor row flagged deleted is
// removed from the copy, the others are copied.
func TestNullCursorRowsWithSoftDeletes(t *testing.T) {
	f := newFixtureOf(t, "timestamptz")
	f.db.Exec(t, `ALTER TABLE src ADD COLUMN deleted boolean NOT NULL DEFAULT false`)
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, CASE WHEN g % 10 = 0 THEN NULL
		ELSE now() - interval '1 hour' + g * interval '1 ms' END, 'v' || g FROM generate_series(1, 200) g`)
	c := f.config(t, f.db.URL, "lookback: 0s", "page_size: 7", "deleted_column: deleted")
	if res := f.run(t, c); res.NullCursorRows != 20 || res.OutsideRows != 20 {
		t.Fatalf("run: %d NULL-cursor rows counted, %d copied; want 20 and 20", res.NullCursorRows, res.OutsideRows)
	}
	f.assertSame(t)

	f.db.Exec(t, `UPDATE src SET deleted = true WHERE id = 50`)
	if res := f.run(t, c); res.OutsideWritten != 1 || res.NullCursorRows != 20 {
		t.Fatalf("run after flagging a NULL-cursor row deleted: %d rows removed or changed by the extra pass, %d NULL-cursor rows; want 1 and 20", res.OutsideWritten, res.NullCursorRows)
	}
	f.db.Exec(t, `DELETE FROM src WHERE id = 50`)
	f.assertSame(t)
}
