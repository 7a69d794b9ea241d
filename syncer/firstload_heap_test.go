package syncer_test

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/syncer"
)

// heapOpts makes a first load in chunks of 40 heap blocks (about 1,100
// rows of itemsTable), two at a time.
func heapOpts(after func(int) error) *syncer.FirstLoadOptions {
	return &syncer.FirstLoadOptions{Workers: 2, ChunkBlocks: 40, MinBlocks: 0, AfterChunk: after}
}

// crashLoadAt is crashAtChunk with heapOpts: the k-th chunk to commit
// fails (an injected crash) before its progress is written.
func crashLoadAt(t *testing.T, e *env, c *config.Config, k int32) {
	t.Helper()
	crash := errors.New("crash")
	var n atomic.Int32
	_, err := runErr(e, c, syncer.Options{FirstLoad: heapOpts(func(int) error {
		if n.Add(1) == k {
			return crash
		}
		return nil
	})})
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
			e.run(t, c, syncer.Options{FirstLoad: heapOpts(nil), Logger: log})
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
