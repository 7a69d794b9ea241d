package syncer_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/syncd/syncd/syncer"
)

const ordersDDL = `CREATE TABLE orders (
  id bigint PRIMARY KEY,
  updated_at timestamptz NOT NULL,
  name text,
  amount numeric(12,2)
)`

// The measured OFFSET failure's case: 1,000 orders sharing only 4 timestamps (250 rows
// each), read in pages of 50. OFFSET paging lost 182 rows here; a cursor on
// updated_at alone read 200. The (updated_at, id) cursor must read each row
// exactly once, with and without an index in cursor order.
func TestTiesFourTimestamps(t *testing.T) {
	for _, index := range []bool{true, false} {
		t.Run(fmt.Sprintf("index=%v", index), func(t *testing.T) {
			e := newEnv(t)
			e.src.Exec(t, ordersDDL)
			e.src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-01 09:00:00+00'::timestamptz + (g % 4) * interval '1 minute', 'order ' || g, g * 1.25
				FROM generate_series(1, 1000) g`)
			if index {
				e.src.Exec(t, "CREATE INDEX ON orders (updated_at, id)")
			}
			e.src.Exec(t, "ANALYZE orders")
			res := e.run(t, e.config(t, "public.orders", 50, ""), syncer.Options{})
			if res.Rows != 1000 || res.Pages != 20 {
				t.Fatalf("read %d rows in %d pages, want exactly 1000 rows (none twice) in 20 pages", res.Rows, res.Pages)
			}
			e.assertSame(t, "orders", "t.*")
		})
	}
}

// A group of equal timestamps larger than a page neither stalls nor skips.
func TestTieGroupLargerThanPage(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	e.src.Exec(t, `INSERT INTO orders SELECT g, CASE WHEN g BETWEEN 11 AND 340 THEN '2026-10-01 09:00:00+00'::timestamptz
		ELSE '2026-10-01 08:00:00+00'::timestamptz + g * interval '1 second' END, 'o' || g, g FROM generate_series(1, 500) g`)
	res := e.run(t, e.config(t, "public.orders", 7, ""), syncer.Options{})
	if res.Rows != 500 {
		t.Fatalf("read %d rows, want 500", res.Rows)
	}
	e.assertSame(t, "orders", "t.*")
}

// Rows 97 microseconds apart: a cursor carried at millisecond precision
// loses rows at page boundaries; syncd carries the server's microseconds.
func TestMicrosecondsAcrossPages(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	e.src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-01 09:00:00.000001+00'::timestamptz + g * interval '97 microseconds', 'o' || g, g
		FROM generate_series(1, 1000) g`)
	e.src.Exec(t, "CREATE INDEX ON orders (updated_at, id)")
	res := e.run(t, e.config(t, "public.orders", 13, ""), syncer.Options{})
	if res.Rows != 1000 {
		t.Fatalf("read %d rows, want 1000", res.Rows)
	}
	e.assertSame(t, "orders", "t.*")
	st, _, err := e.store.Get("test")
	if err != nil {
		t.Fatal(err)
	}
	if want := "2026-10-01 09:00:00.097001+00"; st.Cursor[0] != want {
		t.Fatalf("watermark %q, want the last row's timestamp at full precision %q", st.Cursor[0], want)
	}
}

// Updates and inserts committed between pages are picked up, at the latest
// by the next run, and the copy converges.
func TestWritesBetweenPagesConverge(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	e.src.Exec(t, `INSERT INTO orders SELECT g, now() - interval '1 hour' + g * interval '1 millisecond', 'o' || g, g FROM generate_series(1, 2000) g`)
	ctx := context.Background()
	write := func(_ context.Context, at syncer.Commit) error {
		// Update rows already read, rows not yet read, and insert new ones.
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{"UPDATE orders SET updated_at = clock_timestamp(), name = name || '+' WHERE id IN ($1, $2, $3)", []any{at.Page, at.Page*37%2000 + 1, 2000 - at.Page}},
			{"INSERT INTO orders SELECT 10000 + $1::bigint, clock_timestamp(), 'new', 1", []any{at.Page}},
			{"INSERT INTO orders SELECT 20000 + $1::bigint, now() - interval '10 minutes', 'late', 1", []any{at.Page}},
		} {
			if _, err := e.src.Pool.Exec(ctx, q.sql, q.args...); err != nil {
				return err
			}
		}
		return nil
	}
	c := e.config(t, "public.orders", 100, "")
	e.run(t, c, syncer.Options{Test: syncer.TestSignals{AfterCommit: write}})
	// Rows stamped behind the watermark (an application clock behind) are
	// the lookback's job: a run with a lookback covering them converges.
	c.Source.Lookback.Duration = 20 * 60 * 1e9
	e.run(t, c, syncer.Options{})
	e.assertSame(t, "orders", "t.*")
	// And a run with nothing new reads only the lookback window, writing nothing.
	res := e.run(t, c, syncer.Options{})
	if res.Written != 0 {
		t.Fatalf("a run over unchanged data wrote %d rows, want 0", res.Written)
	}
}

// A crash after the sink commit and before the watermark write: the sink's
// record of the copy moved in the page's own transaction, so the next run
// resumes after page 4 (the state file follows the sink's record); nothing
// is lost and nothing is doubled.
func TestCrashBetweenCommitAndWatermark(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	e.src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-01 09:00:00+00'::timestamptz + (g / 3) * interval '1 second', 'o' || g, g FROM generate_series(1, 1000) g`)
	c := e.config(t, "public.orders", 100, "")
	crash := errors.New("injected crash")
	_, err := syncer.Run(context.Background(), syncer.Options{Config: c, Store: e.store, Test: syncer.TestSignals{AfterCommit: func(_ context.Context, at syncer.Commit) error {
		if at.Page == 4 {
			return crash
		}
		return nil
	}}})
	if !errors.Is(err, crash) {
		t.Fatalf("run error %v, want the injected crash", err)
	}
	st, _, _ := e.store.Get("test")
	// Pages 1-3 are recorded; page 4 committed in the sink but not here.
	var n int
	if err := e.dst.Pool.QueryRow(context.Background(), "SELECT count(*) FROM copy").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 400 || st.TotalRows != 300 || st.LastStatus != "failed" {
		t.Fatalf("after the crash: copy has %d rows, watermark covers %d, status %q; want 400, 300, failed", n, st.TotalRows, st.LastStatus)
	}
	res := e.run(t, c, syncer.Options{})
	if res.Rows != 600 || res.Written != 600 {
		t.Fatalf("the run after the crash read %d rows and wrote %d; want 600 read and written (after page 4, which the sink's record holds)", res.Rows, res.Written)
	}
	e.assertSame(t, "orders", "t.*")
}

// Every column type of the table below (numbers, text, JSON, arrays, bytea,
// times, uuid, floats, boolean, interval) round-trips exactly, with its
// edge values (NaN, infinities, empty, NULL-looking text) and NULLs.
func TestTypesRoundTrip(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, `CREATE TABLE typed (
		id bigint PRIMARY KEY,
		updated_at timestamptz NOT NULL,
		n numeric, n2 numeric(12,2), txt text, vc varchar(20), j jsonb, js json,
		arr text[], iarr int[], b bytea, ts timestamp, d date, u uuid, f float8, r real, bo boolean, iv interval)`)
	e.src.Exec(t, `INSERT INTO typed VALUES
		(1, '2026-10-01 09:00:00.123456+00', 12345678901234567890.123456789, 1.10, e'tab\there\nnewline\\backslash \u00e9\u6f22', 'x',
		 '{"b": [1, 2.50, {"c": null}], "a": "é"}', '{"keep":  "spacing" }', ARRAY['a', NULL, 'b"c', e'd\\e', ''], ARRAY[1, NULL, 3],
		 '\x00ff5c0a09', '2026-10-01 09:00:00.000001', '2026-10-01', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 0.1, 1.5e-7, true, '1 day 02:03:04.000005'),
		(2, '2026-10-01 09:00:00.123457+00', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
		(3, '2026-10-01 09:00:00.123457+00', 'NaN', -0.00, '', '', '[]', 'null', '{}', '{}', '', '-infinity', 'infinity', '00000000-0000-0000-0000-000000000000', 'Infinity', '-0', false, '-1 mons'),
		(4, '2026-10-01 09:00:01+00', 0.000000000000000001, 9999999999.99, '\N', 'NULL', '"\\N"', '1', ARRAY['\N', 'NULL'], NULL, '\x5c4e', '1999-12-31 23:59:59.999999', '0001-01-01', NULL, 1e308, 'NaN', NULL, '0')`)
	e.run(t, e.config(t, "public.typed", 2, ""), syncer.Options{})
	e.assertSame(t, "typed", "t.*")
	// The copy's column types are the source's.
	var types string
	if err := e.dst.Pool.QueryRow(context.Background(), `SELECT string_agg(format_type(atttypid, atttypmod), ',' ORDER BY attnum)
		FROM pg_attribute WHERE attrelid = 'public.copy'::regclass AND attnum > 0`).Scan(&types); err != nil {
		t.Fatal(err)
	}
	want := "bigint,timestamp with time zone,numeric,numeric(12,2),text,character varying(20),jsonb,json,text[],integer[],bytea,timestamp without time zone,date,uuid,double precision,real,boolean,interval"
	if types != want {
		t.Fatalf("copy column types\n got  %s\n want %s", types, want)
	}
}

// Rows stamped a moment ahead of the source's clock (now() plus an offset)
// arrive in the same run: it waits for the clock to pass them. A row
// stamped an hour ahead is not read by the cursor (the commit-safe bound):
// the extra pass copies it and counts it, and the watermark stays behind it.
func TestRowsStampedAheadOfTheClock(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	e.src.Exec(t, `INSERT INTO orders SELECT g, now() + g * interval '2 milliseconds', 'o' || g, g FROM generate_series(1, 500) g`)
	e.src.Exec(t, `INSERT INTO orders VALUES (9999, now() + interval '1 hour', 'far', 1)`)
	res := e.run(t, e.config(t, "public.orders", 100, ""), syncer.Options{})
	if res.Rows != 500 || res.AheadOfClockRows != 1 || res.OutsideRows != 1 {
		t.Fatalf("read %d rows by the cursor and %d (counted %d) ahead of the clock; want the 500 stamped up to 1 s ahead, and the one an hour ahead by the extra pass",
			res.Rows, res.OutsideRows, res.AheadOfClockRows)
	}
	if id := res.Cursor[1]; id != "500" {
		t.Fatalf("watermark %v, want the row stamped 1 s ahead (id 500), not the one an hour ahead", res.Cursor)
	}
	e.assertSame(t, "orders", "t.*")
}
