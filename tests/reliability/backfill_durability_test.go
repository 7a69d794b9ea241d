package reliability

import (
	"context"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/watermark"
)

// A backfill's progress is recorded only once its page's commit is
// durable: the sink database has synchronous_commit = off (fsync = on),
// a column is added to the source, and the sink's server is crashed
// (pg_ctl -m immediate) right after the run reports a backfill page
// recorded. Every row at or before the recorded progress then holds the
// source's value in the copy, and the next run exits 0 with the copy
// equal to the source row by row. Before, the last backfill pages were
// lost with their progress recorded, and their rows stayed NULL for good.
func TestBackfillDurableWhateverTheSinkSettings(t *testing.T) {
	ctx := context.Background()
	cl := durableSink(t)
	const rows = 6000
	src := pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, val text NOT NULL);
INSERT INTO src SELECT g, timestamptz '2026-01-01' + g * interval '1 s', 'v' || g FROM generate_series(1, 6000) g`)
	sinkDB := clusterDB(t, cl)
	clusterExec(t, cl, `ALTER DATABASE `+pgx.Identifier{sinkDB.Name}.Sanitize()+` SET synchronous_commit = off`)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "bf.yaml", tableConfig{Name: "bf", SourceDSN: src.URL, Table: "public.src",
		Cursor: "[updated_at, id]", SinkDSN: sinkDB.URL, SinkTable: "public.copy", PageSize: 100}.YAML())
	state := filepath.Join(dir, "state.db")
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("first run: %s", r)
	}
	src.Exec(t, `BEGIN; ALTER TABLE src ADD COLUMN tier text; UPDATE src SET tier = 't' || id; COMMIT`)

	p := bin.Start(t, nil, "run", "--once", "--log-level", "debug", "--config", cfg, "--state", state)
	hold := func(f func()) {
		p.Signal(t, syscall.SIGSTOP)
		defer p.Signal(t, syscall.SIGCONT)
		f()
	}
	pages, crashed := 0, false
	for i := 0; ; i++ {
		rec, ok := p.Stderr.Nth(2*time.Minute, i)
		if !ok {
			break
		}
		var e logLine
		if rec.Decode(&e) != nil || crashed {
			continue
		}
		switch e.Msg {
		case "source schema changed; the copy follows":
			// The ADD COLUMN is on disk, whatever syncd does about it:
			// only the backfill's own commits are at stake.
			hold(func() { clusterExec(t, cl, "CHECKPOINT") })
		case "backfill page applied":
			if pages++; pages == 20 {
				hold(func() {
					if err := cl.Stop(ctx, "immediate"); err != nil {
						t.Fatal(err)
					}
				})
				crashed = true
			}
		}
	}
	r := p.Wait(t, 2*time.Minute)
	if !crashed {
		t.Fatalf("the run ended before 20 backfill pages; the crash was not exercised: %s", r)
	}
	if err := cl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	st, _, err := watermark.ReadState(state, "bf", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st.Backfill == nil || len(st.Backfill.After) != 1 {
		t.Fatalf("after the crash: backfill %+v, want one under way", st.Backfill)
	}
	var behind, lost int
	if err := sinkDB.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE tier IS DISTINCT FROM 't' || id) FROM copy WHERE id <= $1::bigint`, st.Backfill.After[0]).Scan(&behind, &lost); err != nil {
		t.Fatal(err)
	}
	t.Logf("crash after backfill page %d (exit %d): progress after id %s, %d rows at or before it, %d without the source's value", pages, r.Code, st.Backfill.After[0], behind, lost)
	if behind == 0 || lost != 0 {
		t.Errorf("the backfill's progress was ahead of what the sink had made durable: %d of the %d rows at or before it lost their value", lost, behind)
	}
	sinkDB.Pool.Reset() // its connections died with the server
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("run after the crash: %s", r)
	}
	cols := []string{"id", "updated_at", "val", "tier"}
	if s, d := schemaRows(t, src.Pool, "src", cols), schemaRows(t, sinkDB.Pool, "copy", cols); len(s) != rows || !slices.Equal(s, d) {
		t.Fatalf("copy differs from the source after the next run: %d source rows, %d copy rows", len(s), len(d))
	}
}
