package syncer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/ops"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// loadOpts makes a first load of every table, in chunks of 4 heap blocks
// (about 100 rows of the tables below), two at a time.
func loadOpts() *syncer.FirstLoadOptions {
	return &syncer.FirstLoadOptions{Workers: 2, ChunkBlocks: 4, MinBlocks: 0}
}

// itemsTable creates a source table of n rows whose rows fill about 25 to a
// heap block, with a NULL cursor row and a row stamped ahead of the clock.
func itemsTable(t *testing.T, db *pgtest.DB, n int) {
	t.Helper()
	db.Exec(t, `CREATE TABLE items (id bigint PRIMARY KEY, updated_at timestamptz, name text, price numeric(12,2), tags text[], attrs jsonb)`)
	db.Exec(t, `CREATE INDEX ON items (updated_at, id)`)
	db.Exec(t, fmt.Sprintf(`INSERT INTO items SELECT g, now() - interval '1 day' + (g %% 500) * interval '1 second', repeat('n', 200) || g,
		g * 1.5, ARRAY['a', g::text], jsonb_build_object('g', g) FROM generate_series(1, %d) g`, n))
	db.Exec(t, `INSERT INTO items VALUES (-1, NULL, 'null cursor', 1, NULL, NULL), (-2, 'infinity', 'ahead of the clock', 2, '{}', '{}')`)
}

const itemCols = "id, updated_at, name, price, tags, attrs"

func (e *env) state(t *testing.T) watermark.State {
	t.Helper()
	st, _, err := e.store.Get("test")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func runErr(e *env, c *config.Config, o syncer.Options) (syncer.Result, error) {
	o.Config, o.Store = c, e.store
	return syncer.Run(context.Background(), o)
}

func TestFirstLoadCopiesEveryRowAndSetsTheWatermark(t *testing.T) {
	e := newEnv(t)
	itemsTable(t, e.src, 3000)
	c := e.config(t, "public.items", 1000, "")
	var chunks atomic.Int32
	res := e.run(t, c, syncer.Options{FirstLoad: loadOpts(), Test: syncer.TestSignals{AfterChunk: func(context.Context, int) error { chunks.Add(1); return nil }}})
	e.assertSame(t, "items", itemCols)
	var blocks int
	if err := e.src.Pool.QueryRow(context.Background(), "SELECT pg_relation_size('items') / 8192").Scan(&blocks); err != nil {
		t.Fatal(err)
	}
	if want := (blocks + 3) / 4; int(chunks.Load()) != want || res.Pages != int64(want) {
		t.Fatalf("%d chunks committed (%d pages in the result) for %d blocks; want %d", chunks.Load(), res.Pages, blocks, want)
	}
	if res.Rows != 3000 || res.OutsideRows != 2 || res.NullCursorRows != 1 || res.AheadOfClockRows != 1 {
		t.Fatalf("rows %d, outside %d (null %d, ahead %d); want 3000 by the load and 2 by the outside pass", res.Rows, res.OutsideRows, res.NullCursorRows, res.AheadOfClockRows)
	}
	st := e.state(t)
	var want [2]string
	if err := e.src.Pool.QueryRow(context.Background(), `SELECT to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '+00', id::text FROM items
		WHERE updated_at < 'infinity' ORDER BY items.updated_at DESC, items.id DESC LIMIT 1`).Scan(&want[0], &want[1]); err != nil {
		t.Fatal(err)
	}
	if st.FirstLoad != nil || len(st.Cursor) != 2 || st.Cursor[1] != want[1] || st.TotalRows != 3000 {
		t.Fatalf("state after the first load: cursor %q (want id %s), first load %+v, total rows %d", st.Cursor, want[1], st.FirstLoad, st.TotalRows)
	}
	// The next run goes on from that watermark.
	e.src.Exec(t, "UPDATE items SET price = price + 1, updated_at = clock_timestamp() WHERE id % 100 = 0")
	e.src.Exec(t, "INSERT INTO items SELECT g, clock_timestamp(), 'new', 1, '{}', '{}' FROM generate_series(5001, 5100) g")
	res = e.run(t, c, syncer.Options{FirstLoad: loadOpts()})
	if res.Rows != 130 {
		t.Fatalf("the run after the first load read %d rows; want the 130 changed", res.Rows)
	}
	e.assertSame(t, "items", itemCols)
}

// A first load reports its progress through OnProgress: the phase, all
// its chunks, one more done after each chunk commits with the rows so
// far, ending with every chunk done and every row; then the pages take
// over from the start of their own progress.
func TestFirstLoadReportsProgress(t *testing.T) {
	e := newEnv(t)
	itemsTable(t, e.src, 3000)
	e.src.Exec(t, "ANALYZE items")
	c := e.config(t, "public.items", 1000, "")
	var mu sync.Mutex
	var seen []syncer.Progress
	e.run(t, c, syncer.Options{FirstLoad: loadOpts(), OnProgress: func(p syncer.Progress) {
		mu.Lock()
		seen = append(seen, p)
		mu.Unlock()
	}})
	var load []syncer.Progress
	for _, p := range seen {
		if p.Phase == syncer.PhaseFirstLoad {
			load = append(load, p)
		}
	}
	if len(load) < 3 || load[0].ChunksDone != 0 || load[0].Rows != 0 || load[0].ETASeconds != -1 {
		t.Fatalf("first load progress %+v: want a start with nothing done and no ETA, then each chunk", load)
	}
	chunks := load[0].Chunks
	for i, p := range load {
		if p.Chunks != chunks || p.ChunksDone != i || p.Estimate < 2500 || p.Estimate > 3500 || i > 0 && (p.Rows <= load[i-1].Rows || p.ETASeconds < 0) {
			t.Fatalf("progress %d: %+v (the one before: %+v)", i, p, load[max(i-1, 0)])
		}
	}
	if last := load[len(load)-1]; len(load) != chunks+1 || last.Rows != 3000 || last.ETASeconds != 0 || last.Left != max(last.Estimate-3000, 0) {
		t.Fatalf("%d reports for %d chunks, the last %+v: want one per chunk, ending at 3000 rows and no time left", len(load), chunks, last)
	}
	if last := seen[len(seen)-1]; last.Phase != "" {
		t.Fatalf("the last progress %+v is the first load's; want the pages' after it", last)
	}
}

func TestFirstLoadCompositeTextKey(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, `CREATE TABLE kv (region text, id int, updated_at timestamptz NOT NULL, body text, PRIMARY KEY (region, id))`)
	e.src.Exec(t, `INSERT INTO kv SELECT (ARRAY['eu', 'us', 'é''x'])[1 + g % 3], g, now() - interval '1 hour' + g * interval '1 ms', repeat('b', 300)
		FROM generate_series(1, 2000) g`)
	y := fmt.Sprintf(`name: test
source:
  dsn: %s
  table: public.kv
  cursor: [updated_at, region, id]
  lookback: 0s
sink:
  dsn: %s
  table: public.copy
  key: [region, id]
`, e.src.URL, e.dst.URL)
	c, err := config.Parse("test.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	var chunks atomic.Int32
	res := e.run(t, c, syncer.Options{FirstLoad: loadOpts(), Test: syncer.TestSignals{AfterChunk: func(context.Context, int) error { chunks.Add(1); return nil }}})
	if chunks.Load() < 2 || res.Rows != 2000 {
		t.Fatalf("%d chunks, %d rows; want the 2000 rows in several chunks", chunks.Load(), res.Rows)
	}
	src := tableText(t, e.src, "(SELECT region || '/' || id AS id, region, id AS n, updated_at, body FROM kv)", "region, n, updated_at, body")
	dst := tableText(t, e.dst, "(SELECT region || '/' || id AS id, region, id AS n, updated_at, body FROM copy)", "region, n, updated_at, body")
	if fmt.Sprint(src) != fmt.Sprint(dst) {
		t.Fatalf("copy differs: %d source rows, %d copy rows", len(src), len(dst))
	}
}

func TestFirstLoadEmptyTable(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, `CREATE TABLE items (id bigint PRIMARY KEY, updated_at timestamptz, name text, price numeric(12,2), tags text[], attrs jsonb)`)
	c := e.config(t, "public.items", 1000, "")
	res := e.run(t, c, syncer.Options{FirstLoad: loadOpts()})
	if res.Rows != 0 || e.state(t).Cursor != nil || e.state(t).FirstLoad != nil {
		t.Fatalf("empty table: %d rows, state %+v", res.Rows, e.state(t))
	}
	e.src.Exec(t, "INSERT INTO items SELECT g, clock_timestamp(), 'x', 1, '{}', '{}' FROM generate_series(1, 10) g")
	if res = e.run(t, c, syncer.Options{FirstLoad: loadOpts()}); res.Rows != 10 {
		t.Fatalf("second run copied %d rows; want 10", res.Rows)
	}
	e.assertSame(t, "items", itemCols)
}

// A crash after a chunk's sink commit and before its progress is written;
// rows change, are added and move to other blocks before the next run,
// which reads another snapshot. The resumed load does not redo the chunks
// recorded as done, and the copy ends equal to the source.
func TestFirstLoadResumesAfterCrash(t *testing.T) {
	e := newEnv(t)
	itemsTable(t, e.src, 3000)
	c := e.config(t, "public.items", 1000, "")
	crashAtChunk(t, e, c, 7)
	st := e.state(t)
	if st.FirstLoad == nil || st.Cursor != nil {
		t.Fatalf("after the crash: first load %v, cursor %q; want the load's progress and no watermark", st.FirstLoad, st.Cursor)
	}
	done := map[int]bool{}
	for i, ch := range st.FirstLoad.Chunks {
		if ch.Done {
			done[i] = true
		}
	}
	if len(done) < 5 || len(done) >= len(st.FirstLoad.Chunks) {
		t.Fatalf("%d of %d chunks recorded done after the 7th commit crashed", len(done), len(st.FirstLoad.Chunks))
	}
	// Which chunk each row is in, and the sink transaction that wrote it.
	ctx := context.Background()
	chunkOf := map[int64]int{}
	// Only rows older than the load's snapshot: a resumed load re-reads
	// newer ones in the chunks done.
	rows, err := e.src.Pool.Query(ctx, "SELECT id, (ctid::text::point)[0]::int FROM items WHERE true"+olderThanLoad(st))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var block int
		if err := rows.Scan(&id, &block); err != nil {
			t.Fatal(err)
		}
		chunkOf[id] = min(block/4, len(st.FirstLoad.Chunks)-1)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	xmins := func() map[int64]string {
		m := map[int64]string{}
		rows, err := e.dst.Pool.Query(ctx, "SELECT id, xmin::text FROM copy")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			var x string
			if err := rows.Scan(&id, &x); err != nil {
				t.Fatal(err)
			}
			m[id] = x
		}
		return m
	}
	before := xmins()
	// Between the two snapshots: rows of done chunks change (and move to
	// the end of the heap), rows are added.
	e.src.Exec(t, "UPDATE items SET price = price + 1, updated_at = clock_timestamp() WHERE id % 50 = 0")
	e.src.Exec(t, "INSERT INTO items SELECT g, clock_timestamp(), 'new', 1, '{}', '{}' FROM generate_series(5001, 5100) g")
	e.run(t, c, syncer.Options{FirstLoad: loadOpts()})
	e.assertSame(t, "items", itemCols)
	after := xmins()
	redone := 0
	for id, x := range before {
		if c, ok := chunkOf[id]; !ok || !done[c] || id%50 == 0 {
			continue
		}
		if after[id] != x {
			redone++
		}
	}
	if redone > 0 {
		t.Fatalf("%d rows of chunks recorded as done were written again by the resumed load", redone)
	}
	if st := e.state(t); st.FirstLoad != nil || st.Cursor == nil {
		t.Fatalf("after the resumed load: first load %v, cursor %q", st.FirstLoad, st.Cursor)
	}
}

// crashAtChunk runs a first load of c that fails (an injected crash) when
// its k-th chunk starts, and fails the test unless the run reports that
// crash.
func crashAtChunk(t *testing.T, e *env, c *config.Config, k int32) {
	t.Helper()
	crash := errors.New("crash")
	var n atomic.Int32
	_, err := runErr(e, c, syncer.Options{FirstLoad: loadOpts(), Test: syncer.TestSignals{AfterChunk: func(context.Context, int) error {
		if n.Add(1) == k {
			return crash
		}
		return nil
	}}})
	if !errors.Is(err, crash) {
		t.Fatalf("run: %v; want the injected crash at chunk %d", err, k)
	}
}

// Writers change, add and delete-and-reinsert rows between the chunks of
// the first load; the next run brings the copy level with the source.
func TestFirstLoadWithWriters(t *testing.T) {
	e := newEnv(t)
	itemsTable(t, e.src, 3000)
	c := e.config(t, "public.items", 1000, "")
	var seq atomic.Int32
	e.run(t, c, syncer.Options{FirstLoad: loadOpts(), Test: syncer.TestSignals{AfterChunk: func(context.Context, int) error {
		n := seq.Add(1)
		e.src.Exec(t, fmt.Sprintf("UPDATE items SET name = 'w%d', updated_at = clock_timestamp() WHERE id %% 37 = %d", n, n%37))
		e.src.Exec(t, fmt.Sprintf("INSERT INTO items VALUES (%d, clock_timestamp(), 'ins', 1, '{}', '{}')", 10000+n))
		return nil
	}}})
	e.run(t, c, syncer.Options{FirstLoad: loadOpts()})
	e.assertSame(t, "items", itemCols)
}

// A copy emptied while a first load was under way holds none of the chunks
// done: the next run starts the load again instead of resuming it.
func TestFirstLoadStartsAgainWhenTheCopyWasEmptied(t *testing.T) {
	e := newEnv(t)
	itemsTable(t, e.src, 3000)
	c := e.config(t, "public.items", 1000, "")
	crashAtChunk(t, e, c, 5)
	if st := e.state(t); st.FirstLoad == nil {
		t.Fatal("no first load in the state after the crash")
	}
	e.dst.Exec(t, "TRUNCATE copy")
	res := e.run(t, c, syncer.Options{FirstLoad: loadOpts()})
	if res.Rows != 3000 {
		t.Fatalf("the run after the copy was emptied copied %d rows; want all 3000", res.Rows)
	}
	e.assertSame(t, "items", itemCols)
}

// resync --from-start during a first load under way forgets it: the next
// run re-reads the whole source, as resync promises, by pages (the copy is
// not empty).
func TestResyncForgetsTheFirstLoad(t *testing.T) {
	e := newEnv(t)
	itemsTable(t, e.src, 3000)
	c := e.config(t, "public.items", 1000, "")
	crashAtChunk(t, e, c, 5)
	e.dst.Exec(t, "UPDATE copy SET name = 'damaged'")
	if err := ops.Resync(e.store, c, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if st := e.state(t); st.FirstLoad != nil {
		t.Fatalf("resync left the first load %+v", st.FirstLoad)
	}
	res := e.run(t, c, syncer.Options{FirstLoad: loadOpts()})
	if res.Rows != 3000 {
		t.Fatalf("the run after resync read %d rows; want all 3000", res.Rows)
	}
	e.assertSame(t, "items", itemCols)
}
