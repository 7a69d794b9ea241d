package syncer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// heapOpts makes a first load in chunks of 40 heap blocks (about 1,100
// rows of itemsTable), two at a time.
func heapOpts() *syncer.FirstLoadOptions {
	return &syncer.FirstLoadOptions{Workers: 2, ChunkBlocks: 40, MinBlocks: 0}
}

// crashLoadAt is crashAtChunk with heapOpts: the k-th chunk to commit
// fails (an injected crash) before its progress is written.
func crashLoadAt(t *testing.T, e *env, c *config.Config, k int32) {
	t.Helper()
	crash := errors.New("crash")
	var n atomic.Int32
	_, err := runErr(e, c, syncer.Options{FirstLoad: heapOpts(), Test: syncer.TestSignals{AfterChunk: func(context.Context, int) error {
		if n.Add(1) == k {
			return crash
		}
		return nil
	}}})
	if !errors.Is(err, crash) {
		t.Fatalf("run: %v; want the injected crash at chunk %d", err, k)
	}
	st := e.state(t)
	if st.FirstLoad == nil || st.Cursor != nil {
		t.Fatalf("after the crash: first load %v, cursor %q; want the load's progress and no watermark", st.FirstLoad, st.Cursor)
	}
	if d := len(st.FirstLoad.Chunks) - notDoneChunks(e, t); d < 3 || d >= len(st.FirstLoad.Chunks)-3 {
		t.Fatalf("%d of %d chunks done after the crash; want a load killed midway", d, len(st.FirstLoad.Chunks))
	}
}

func notDoneChunks(e *env, t *testing.T) int {
	n := 0
	for _, ch := range e.state(t).FirstLoad.Chunks {
		if !ch.Done {
			n++
		}
	}
	return n
}

// diffRows compares the rows of the source query src with those of the
// copy query dst (both ordered by id) and returns how many source rows
// the copy lacks, how many differ and how many copy rows the source lacks.
func diffRows(t *testing.T, e *env, src, dst string) (missing, changed, extra int) {
	t.Helper()
	s := map[string]string{}
	for _, r := range tableText(t, e.src, src, itemCols) {
		s[rowID(r)] = r
	}
	d := map[string]string{}
	for _, r := range tableText(t, e.dst, dst, itemCols) {
		d[rowID(r)] = r
	}
	for id, r := range s {
		switch dr, ok := d[id]; {
		case !ok:
			missing++
		case dr != r:
			changed++
		}
	}
	for id := range d {
		if _, ok := s[id]; !ok {
			extra++
		}
	}
	return missing, changed, extra
}

func rowID(r string) string {
	for i := range len(r) {
		if r[i] == ' ' {
			return r[:i]
		}
	}
	return r
}

// A first load killed midway, then the source heap rewritten (CLUSTER,
// VACUUM FULL after a DELETE, a rewriting ALTER TABLE, the table dropped
// and created again, an inheritance child clustered): the next run must
// not resume the chunks left, which are block ranges of the old layout,
// but start the load again (upserting into the copy that holds rows). The
// copy ends with every live source row, equal row by row; before, rows
// that moved into blocks of chunks done were never read.
func TestFirstLoadStartsAgainWhenTheHeapWasRewritten(t *testing.T) {
	const n = 20000
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, e *env) // the source, before the load
		rewrite []string                   // between the crash and the next run
		deleted string                     // the rows the rewrite deleted ("": none)
	}{
		{name: "cluster", rewrite: []string{"CLUSTER items USING items_updated_at_id_idx"}},
		{name: "delete and vacuum full", rewrite: []string{"DELETE FROM items WHERE id > 0 AND id % 3 <> 0", "VACUUM FULL items"},
			deleted: "id > 0 AND id % 3 <> 0"},
		{name: "delete and rewriting alter table", rewrite: []string{"DELETE FROM items WHERE id > 0 AND id % 3 <> 0",
			"ALTER TABLE items SET UNLOGGED", "ALTER TABLE items SET LOGGED"}, deleted: "id > 0 AND id % 3 <> 0"},
		{name: "dropped and created again", rewrite: []string{"CREATE TABLE old AS SELECT * FROM items", "DROP TABLE items",
			`CREATE TABLE items (id bigint PRIMARY KEY, updated_at timestamptz, name text, price numeric(12,2), tags text[], attrs jsonb)`,
			"INSERT INTO items SELECT * FROM old ORDER BY id % 97, id", "CREATE INDEX ON items (updated_at, id)", "DROP TABLE old"}},
		{name: "inheritance child clustered", setup: func(t *testing.T, e *env) {
			e.src.Exec(t, "CREATE TABLE items_more () INHERITS (items)")
			e.src.Exec(t, "CREATE INDEX items_more_price ON items_more (price)")
			e.src.Exec(t, `INSERT INTO items_more SELECT g, now() - interval '1 day' + (g % 500) * interval '1 second', repeat('m', 200) || g,
				-g, ARRAY['b'], jsonb_build_object('m', g) FROM generate_series(100001, 100000 + $1) g`, n)
		}, rewrite: []string{"CLUSTER items_more USING items_more_price"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			itemsTable(t, e.src, n)
			if tc.setup != nil {
				tc.setup(t, e)
			}
			c := e.config(t, "public.items", 1000, "")
			crashLoadAt(t, e, c, 6)
			for _, q := range tc.rewrite {
				e.src.Exec(t, q)
			}
			logs := &testutil.Log{}
			log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			e.run(t, c, syncer.Options{FirstLoad: heapOpts(), Logger: log})
			dst := "public.copy"
			if tc.deleted != "" {
				// Hard deletes are not followed: the copy keeps the deleted
				// rows the crashed load had copied.
				dst = "(SELECT * FROM copy WHERE NOT (" + tc.deleted + "))"
			}
			missing, changed, extra := diffRows(t, e, "items", dst)
			if missing+changed+extra > 0 {
				t.Fatalf("copy differs from the source after the resumed run: %d rows missing, %d changed, %d extra", missing, changed, extra)
			}
			if !logs.Contains("the first load starts again: ") {
				t.Fatalf("no warning that the load starts again; log:\n%s", logs)
			}
			if st := e.state(t); st.FirstLoad != nil || st.Cursor == nil {
				t.Fatalf("after the run: first load %v, cursor %q", st.FirstLoad, st.Cursor)
			}
		})
	}
}

// A first load killed midway; then a plain VACUUM frees space in blocks of
// chunks already done, and an update that leaves the cursor columns alone
// moves rows of chunks not done into those blocks. The heap is the same
// file, so the load resumes; the resumed chunks no longer hold those rows
// and no page will read them (their cursor did not change): the resumed
// load must re-read, in the chunks done, every row version newer than the
// load's first snapshot. Rows of done chunks that did not change are not
// written again.
func TestFirstLoadRereadsRowsMovedIntoDoneChunks(t *testing.T) {
	const n = 20000
	ctx := context.Background()
	e := newEnv(t)
	itemsTable(t, e.src, n)
	e.src.Exec(t, "ALTER TABLE items SET (autovacuum_enabled = off)")
	// Dead rows in the first 240 blocks, where the chunks done will be:
	// never copied, and free space once vacuumed.
	e.src.Exec(t, "DELETE FROM items WHERE (ctid::text::point)[0] < 240 AND id % 2 = 0")
	c := e.config(t, "public.items", 1000, "")
	crashLoadAt(t, e, c, 4)
	st := e.state(t)
	doneBlock := func(block int64) bool {
		for _, ch := range st.FirstLoad.Chunks {
			if ch.Done && block >= int64(ch.From) && (ch.To == 0 || block < int64(ch.To)) {
				return true
			}
		}
		return false
	}
	copyXmin := func() map[string]string {
		m := map[string]string{}
		rows, err := e.dst.Pool.Query(ctx, "SELECT id::text, xmin::text FROM copy")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id, x string
			if err := rows.Scan(&id, &x); err != nil {
				t.Fatal(err)
			}
			m[id] = x
		}
		return m
	}
	before := copyXmin()
	e.src.Exec(t, "VACUUM items")
	e.src.Exec(t, "UPDATE items SET price = price + 1 WHERE (ctid::text::point)[0] >= 400")
	moved := 0
	rows, err := e.src.Pool.Query(ctx, "SELECT (ctid::text::point)[0]::int8 FROM items WHERE price <> id * 1.5 AND id > 0")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var b int64
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		if doneBlock(b) {
			moved++
		}
	}
	rows.Close()
	if moved < 100 {
		t.Fatalf("only %d updated rows moved into blocks of chunks done; the test does not exercise the hole", moved)
	}
	e.run(t, c, syncer.Options{FirstLoad: heapOpts()})
	missing, changed, extra := diffRows(t, e, "items", "public.copy")
	if missing+changed+extra > 0 {
		t.Fatalf("copy differs from the source after the resumed run (%d updated rows had moved into chunks done): %d rows missing, %d changed, %d extra",
			moved, missing, changed, extra)
	}
	// Rows of chunks done that did not change keep the sink xmin the
	// crashed load gave them: the re-read takes only newer row versions
	// (and those of transactions that were still open, anywhere on the
	// server, when the load began: the snapshot's xmin is the server's).
	after := copyXmin()
	rewritten := 0
	rows, err = e.src.Pool.Query(ctx, "SELECT id::text, (ctid::text::point)[0]::int8 FROM items WHERE id > 0 AND price = id * 1.5"+olderThanLoad(st))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var b int64
		if err := rows.Scan(&id, &b); err != nil {
			t.Fatal(err)
		}
		if doneBlock(b) && after[id] != before[id] {
			rewritten++
		}
	}
	rows.Close()
	if rewritten > 0 {
		t.Fatalf("%d unchanged rows of chunks done were written again by the resumed load", rewritten)
	}
}

// olderThanLoad is the condition (" AND ...") on the source's rows whose
// version is older than the first snapshot of the load st holds, so that
// the chunks done copied them: a test on a server that others use may see
// an older snapshot xmin, and more rows re-read.
func olderThanLoad(st watermark.State) string {
	return fmt.Sprintf(" AND age(xmin) > age('%d'::xid)", uint32(st.FirstLoad.Xmin))
}

// A first load killed midway, then the source table emptied and filled
// again with part of its rows (TRUNCATE, in one transaction; or DELETE and
// VACUUM FULL): the copy holds rows of the old heap that the source no
// longer has, which no page and no later repair would remove (the sink's
// record takes the new heap once the load has started again). The load
// that starts again starts from an empty copy, so the copy ends equal to
// the source, as it does when the same TRUNCATE comes after the load.
func TestFirstLoadStartingAgainAfterATruncateKeepsNoRowOfTheOldHeap(t *testing.T) {
	const n = 20000
	e := newEnv(t)
	itemsTable(t, e.src, n)
	c := e.config(t, "public.items", 1000, "")
	crashLoadAt(t, e, c, 6)
	e.src.Exec(t, "BEGIN; CREATE TEMP TABLE kept AS SELECT * FROM items WHERE id % 2 = 1; TRUNCATE items; INSERT INTO items SELECT * FROM kept; COMMIT")
	e.run(t, c, syncer.Options{FirstLoad: heapOpts()})
	if missing, changed, extra := diffRows(t, e, "items", "public.copy"); missing+changed+extra > 0 {
		t.Fatalf("copy differs from the source after the load started again: %d rows missing, %d changed, %d extra (rows the TRUNCATE removed)", missing, changed, extra)
	}
	e.run(t, c, syncer.Options{FirstLoad: heapOpts()})
	e.assertSame(t, "items", itemCols)
}
