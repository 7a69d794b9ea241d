package syncer_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/syncer"
)

// A backfill page's commit is durable before its progress is recorded,
// whatever synchronous_commit the sink sets: with the sink database's
// synchronous_commit = off, a deferred trigger on the copy, which fires at
// COMMIT, sees synchronous_commit raised to on in every backfill
// transaction (as in a page's). With off, a crash of the sink could lose
// backfilled rows that the state file says are done.
func TestBackfillCommitIsDurable(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, `CREATE TABLE src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text NOT NULL);
INSERT INTO src SELECT i, now() - interval '1 hour' + i * interval '1 ms', 'n' || i FROM generate_series(1, 1000) i`)
	e.dst.Exec(t, `ALTER DATABASE `+pgx.Identifier{e.dst.Name}.Sanitize()+` SET synchronous_commit = off`)
	c := e.config(t, "public.src", 300, "")
	e.run(t, c, syncer.Options{})
	e.dst.Exec(t, `CREATE TABLE probe (setting text NOT NULL);
CREATE FUNCTION probe() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN INSERT INTO probe VALUES (current_setting('synchronous_commit')); RETURN NULL; END$$;
CREATE CONSTRAINT TRIGGER probe AFTER UPDATE ON copy DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION probe()`)
	e.src.Exec(t, `ALTER TABLE src ADD COLUMN tier text NOT NULL DEFAULT 'gold'`)
	e.run(t, c, syncer.Options{})
	e.sameRows(t, "id, name, tier", 1000)
	var on, off int
	if err := e.dst.Pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE setting = 'on'), count(*) FILTER (WHERE setting <> 'on') FROM probe`).Scan(&on, &off); err != nil {
		t.Fatal(err)
	}
	if on != 1000 || off != 0 {
		t.Fatalf("backfilled rows committed with synchronous_commit on: %d, otherwise: %d; want 1000 and 0", on, off)
	}
}
