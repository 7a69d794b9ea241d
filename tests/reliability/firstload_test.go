package reliability

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/watermark"
)

// TestFirstLoadChunkDurableWhateverTheSinkSettings: a first load into a
// sink whose synchronous_commit is off (the DSN's options), with fsync =
// on and a WAL writer that waits 10 s. The sink's server is crashed
// (pg_ctl -m immediate) right after the run has marked its third chunk
// done in the state file, and restarted; then every source row of every
// chunk the state file records as done is in the copy with equal values,
// and the next run (resuming the load) levels the copy with the source. A
// chunk marked done over an asynchronous commit that the crash lost would
// never be copied again.
func TestFirstLoadChunkDurableWhateverTheSinkSettings(t *testing.T) {
	ctx := context.Background()
	cl := durableSink(t)
	const rows = 20_000
	src := pgtest.NewDB(t)
	namedTable(t, src.Pool, "src", rows)
	sinkDB := clusterDB(t, cl)
	dsn := withURL(t, sinkDB.URL, "", "options", "-c synchronous_commit=off")
	if got := showSetting(t, dsn, false); got != "off" {
		t.Fatalf("synchronous_commit in a session of the sink DSN is %q, want off", got)
	}
	dir := t.TempDir()
	// Chunks of 16 blocks (about 2,000 rows), two at a time.
	cfg := writeFile(t, dir, "firstload.yaml", tableConfig{Name: "firstload", SourceDSN: src.URL, Table: "public.src",
		Cursor: "[updated_at, id]", SinkDSN: dsn, SinkTable: "public.copy",
		Extra: "  first_load: {workers: 2, chunk_size: 128kB, min_table_size: 8192}\n"}.YAML())
	state := filepath.Join(dir, "state.db")
	committed := 0
	r, _, _ := runUntil(t, cl, cfg, state, func(e logLine) bool {
		if e.Msg == "first load chunk committed" {
			committed++
		}
		return committed == 3
	})
	if r.Code != 1 {
		t.Fatalf("the run hit by the crash must exit 1: %s", r)
	}
	st, ok, err := watermark.ReadState(state, "firstload", 10*time.Second)
	if err != nil || !ok || st.FirstLoad == nil {
		t.Fatalf("state after the crash: %+v (found %v, %v); want a first load under way", st, ok, err)
	}
	dst, err := pgx.Connect(ctx, sinkDB.URL)
	if err != nil {
		t.Fatal(err)
	}
	done, behind, lost := 0, 0, 0
	for _, ch := range st.FirstLoad.Chunks {
		if !ch.Done {
			continue
		}
		done++
		cond := fmt.Sprintf("ctid >= '(%d,0)'", ch.From)
		if ch.To > 0 {
			cond += fmt.Sprintf(" AND ctid < '(%d,0)'", ch.To)
		}
		want := map[int64]string{}
		rs, err := src.Pool.Query(ctx, "SELECT id, md5(x::text) FROM src x WHERE "+cond)
		if err != nil {
			t.Fatal(err)
		}
		var id int64
		var h string
		if _, err := pgx.ForEachRow(rs, []any{&id, &h}, func() error { want[id] = h; return nil }); err != nil {
			t.Fatal(err)
		}
		ids := make([]int64, 0, len(want))
		for id := range want {
			ids = append(ids, id)
		}
		got := map[int64]string{}
		rs, err = dst.Query(ctx, "SELECT id, md5(x::text) FROM copy x WHERE id = ANY($1)", ids)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pgx.ForEachRow(rs, []any{&id, &h}, func() error { got[id] = h; return nil }); err != nil {
			t.Fatal(err)
		}
		behind += len(want)
		for id, h := range want {
			if got[id] != h {
				lost++
			}
		}
	}
	dst.Close(ctx)
	t.Logf("crash after the 3rd chunk marked done: %d chunks done in the state file, %d source rows in them, %d missing from the copy", done, behind, lost)
	if done < 3 {
		t.Fatalf("%d chunks marked done after the 3rd chunk's progress was logged", done)
	}
	if lost != 0 {
		t.Fatalf("chunks were marked done ahead of what the sink had made durable: %d of their %d rows were lost by the crash", lost, behind)
	}
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("run after the crash: %s", r)
	}
	sinkDB.Pool.Reset() // its connections died with the server
	if n := sameRows(t, src.Pool, "src", sinkDB.Pool, "copy"); n != rows {
		t.Fatalf("copy holds %d rows, want %d", n, rows)
	}
}
