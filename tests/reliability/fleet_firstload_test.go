package reliability

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// firstLoadYAML is a source whose first load of 40,000 rows takes about
// 20 chunks of 16 blocks, two at a time.
func firstLoadYAML(db *pgtest.DB, name string) string {
	return tableConfig{Name: name, SourceDSN: db.URL, Table: "public.src", Cursor: "[updated_at, id]",
		SinkDSN: db.URL, SinkTable: "public.copy",
		Extra: "  first_load: {workers: 2, chunk_size: 128kB, min_table_size: 8192}\n"}.YAML()
}

// holdCopy takes a SHARE lock on the copy in a transaction of its own,
// once the chunks in flight have committed: the chunks after them wait
// for it. The returned func releases it.
func holdCopy(t *testing.T, db *pgtest.DB) func() {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "BEGIN; LOCK TABLE public.copy IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	return func() { conn.Close(ctx) }
}

// startLoad starts a daemon-less run of cfg on state with debug logs (a
// chunk's commit is logged at debug).
func startLoad(t *testing.T, cfg, state string) *testutil.Process {
	return bin.Start(t, nil, "run", "--once", "--config", cfg, "--state", state, "--log-level", "debug")
}

// TestFirstLoadOfAnotherReplicaNotTrusted: two replicas (two state files)
// each begin a first load of one empty copy, and each is killed in it; the
// source table is rewritten (VACUUM FULL) in between. Replica A, resuming
// its load of the old heap, empties the copy and starts again, which
// deletes the chunks replica B had committed; B, resuming after A was
// killed too, must not trust the chunks its state file says are done: the
// copy ends equal to the source row by row.
func TestFirstLoadOfAnotherReplicaNotTrusted(t *testing.T) {
	const rows = 40_000
	db := pgtest.NewDB(t)
	namedTable(t, db.Pool, "src", rows)
	db.Exec(t, `CREATE TABLE copy (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, val text)`)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "fl.yaml", firstLoadYAML(db, "fl"))
	stateA, stateB := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")

	// A plans its load and is killed before a chunk commits.
	release := holdCopy(t, db)
	a := startLoad(t, cfg, stateA)
	a.WaitLog(t, time.Minute, "first load")
	a.Kill(t)
	release()
	if n := count(t, db, "copy"); n != 0 {
		t.Fatalf("copy holds %d rows after A was killed before its first chunk", n)
	}
	db.Exec(t, "VACUUM FULL src")

	// B loads the rewritten heap and is killed after 8 chunks or more (the
	// chunks in flight commit before the lock is granted), A below after
	// 1 to 3: both copy chunks in order, so B's 4th to 8th are not A's.
	b := startLoad(t, cfg, stateB)
	b.WaitLogCount(t, time.Minute, 8, "first load chunk committed")
	release = holdCopy(t, db)
	b.Kill(t)
	release()
	loadedByB := count(t, db, "copy")

	// A runs again and is killed after its first commit: resuming its load
	// of the old heap, it empties the copy (B's chunks with it) and starts
	// again; or it leaves its load, which another replica took over, and
	// fills the copy by pages.
	a = startLoad(t, cfg, stateA)
	if !a.Output.Await(time.Minute, func() bool {
		return a.Output.Count("first load chunk committed")+a.Output.Count("page applied") > 0
	}) {
		t.Fatalf("A committed nothing; output:\n%s", a.Output)
	}
	release = holdCopy(t, db)
	a.Kill(t)
	release()
	t.Logf("B loaded %d rows; then A (load started again: %v) left %d", loadedByB, a.Output.Contains("the first load starts again"), count(t, db, "copy"))

	// B goes on to the end.
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", stateB); r.Code != 0 {
		t.Fatalf("B's run: %s", r)
	}
	if n := sameRows(t, db.Pool, "src", db.Pool, "copy"); n != rows {
		t.Fatalf("copy holds %d rows, want %d", n, rows)
	}
}

// TestFirstLoadStopsWhenItsLockIsLost: the run lock of a first load lives
// on the run's sink session while its chunks commit on sessions of their
// own. When that session is terminated (pg_terminate_backend, an
// idle_session_timeout, a lost connection) the server releases the lock
// and another replica may start the source: no chunk may commit after
// that. A statement trigger on the copy records whether any session held
// the source's run lock when each chunk wrote; a chunk that wrote without
// it must not have committed.
func TestFirstLoadStopsWhenItsLockIsLost(t *testing.T) {
	const rows = 40_000
	ctx := context.Background()
	db := pgtest.NewDB(t)
	namedTable(t, db.Pool, "src", rows)
	db.Exec(t, `CREATE TABLE copy (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, val text)`)
	db.Exec(t, `CREATE TABLE chunk_log (pid int, held boolean)`)
	// runlock.Key of source fl writing public.copy.
	db.Exec(t, `CREATE FUNCTION log_chunk() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  k bigint := hashtextextended('syncd:fl:public.copy', 0);
BEGIN
  INSERT INTO public.chunk_log SELECT pg_backend_pid(), EXISTS (SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.classid::bigint = (k >> 32) & 4294967295 AND l.objid::bigint = k & 4294967295);
  RETURN NULL;
END $$;
CREATE TRIGGER log_chunk AFTER INSERT OR UPDATE ON copy FOR EACH STATEMENT EXECUTE FUNCTION log_chunk()`)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "fl.yaml", firstLoadYAML(db, "fl"))
	state := filepath.Join(dir, "state.db")

	p := startLoad(t, cfg, state)
	p.WaitLogCount(t, time.Minute, 2, "first load chunk committed")
	release := holdCopy(t, db) // the chunks after those in flight wait
	var holder int
	if err := db.Pool.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
  AND classid::bigint = (hashtextextended('syncd:fl:public.copy', 0) >> 32) & 4294967295
  AND objid::bigint = hashtextextended('syncd:fl:public.copy', 0) & 4294967295`).Scan(&holder); err != nil {
		t.Fatalf("find the session holding the run lock: %v", err)
	}
	db.Exec(t, "SELECT pg_terminate_backend($1, 10000)", holder)
	release()
	r := p.Wait(t, 2*time.Minute)
	var without int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM chunk_log WHERE NOT held").Scan(&without); err != nil {
		t.Fatal(err)
	}
	if without > 0 {
		t.Fatalf("%d chunks committed while no session held the source's run lock (another replica could run it); the run: %s", without, r)
	}
	if r.Code != 0 && !p.Output.Contains("lost the source's advisory lock") {
		t.Fatalf("the run hit by the lost lock must say so: %s", r)
	}
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("the next run: %s", r)
	}
	if n := sameRows(t, db.Pool, "src", db.Pool, "copy"); n != rows {
		t.Fatalf("copy holds %d rows, want %d", n, rows)
	}
}
