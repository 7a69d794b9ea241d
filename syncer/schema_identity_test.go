package syncer_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/syncer"
)

// identityTable is 1,000 source rows with columns a, b and v, copied once.
func identityTable(t *testing.T, e *env, extra string) {
	t.Helper()
	if _, err := e.src.Pool.Exec(context.Background(), `
CREATE TABLE src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, a text NOT NULL, b text NOT NULL, v integer NOT NULL);
INSERT INTO src SELECT i, now() - interval '1 hour' + i * interval '1 ms', 'a' || i, 'b' || i, i FROM generate_series(1, 1000) i`); err != nil {
		t.Fatal(err)
	}
	e.run(t, e.config(t, "public.src", 300, extra), syncer.Options{})
}

func (e *env) exec(t *testing.T, db string, q string) {
	t.Helper()
	p := e.src.Pool
	if db == "sink" {
		p = e.dst.Pool
	}
	if _, err := p.Exec(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// sameRows: the copy equals the source on cols, row by row, with want rows.
func (e *env) sameRows(t *testing.T, cols string, want int) {
	t.Helper()
	src, dst := tableText(t, e.src, "src", cols), tableText(t, e.dst, "copy", cols)
	if len(src) != want {
		t.Fatalf("source has %d rows, want %d", len(src), want)
	}
	if !slices.Equal(src, dst) {
		var diff int
		var ex []string
		for i := range src {
			if i >= len(dst) || src[i] != dst[i] {
				diff++
				if len(ex) < 3 {
					ex = append(ex, src[i]+" / "+dst[min(i, len(dst)-1)])
				}
			}
		}
		t.Fatalf("copy differs from the source on %s: %d source rows, %d copy rows, %d differ, e.g. %v", cols, len(src), len(dst), diff, ex)
	}
}

// A column dropped and added again under its name, in one ALTER with the
// same type and across two runs with another type, is a drop and an add:
// under evolve every one of the 1,000 rows the copy holds ends with the
// source's value (not the dropped column's), the copy's column takes the
// new type, and no run fails.
func TestColumnDroppedAndAddedAgain(t *testing.T) {
	e := newEnv(t)
	identityTable(t, e, "")
	c := e.config(t, "public.src", 300, "")
	e.exec(t, "source", `ALTER TABLE src DROP COLUMN v, ADD COLUMN v integer NOT NULL DEFAULT 7`)
	e.run(t, c, syncer.Options{})
	e.sameRows(t, "id, a, b, v", 1000)

	e.exec(t, "source", `ALTER TABLE src DROP COLUMN b`)
	e.run(t, c, syncer.Options{})
	e.exec(t, "source", `ALTER TABLE src ADD COLUMN b numeric DEFAULT 2.5`)
	e.run(t, c, syncer.Options{})
	e.sameRows(t, "id, a, b, v", 1000)
	var typ string
	if err := e.dst.Pool.QueryRow(context.Background(), `SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'copy'::regclass AND attname = 'b'`).Scan(&typ); err != nil || typ != "numeric" {
		t.Fatalf("copy column b: %q %v, want numeric", typ, err)
	}
	// New rows and updates go on as usual.
	e.exec(t, "source", `INSERT INTO src (id, updated_at, a, v, b) SELECT i, now(), 'n', 1, 9 FROM generate_series(1001, 1010) i`)
	e.run(t, c, syncer.Options{})
	e.sameRows(t, "id, a, b, v", 1010)
}

// Two columns whose names are swapped are two renames: the run stops with
// statements that follow both, and once they ran on the sink the next run
// goes on and the 1,000 rows hold the swapped values, row by row.
func TestColumnsSwapped(t *testing.T) {
	e := newEnv(t)
	identityTable(t, e, "")
	c := e.config(t, "public.src", 300, "")
	e.exec(t, "source", `BEGIN; ALTER TABLE src RENAME COLUMN a TO tmp; ALTER TABLE src RENAME COLUMN b TO a; ALTER TABLE src RENAME COLUMN tmp TO b; COMMIT`)
	_, err := syncer.Run(context.Background(), syncer.Options{Config: c, Store: e.store})
	if !errors.Is(err, syncer.ErrSchemaChange) || !strings.Contains(err.Error(), `column "b" was renamed to "a"`) || !strings.Contains(err.Error(), `column "a" was renamed to "b"`) {
		t.Fatalf("run after the swap: %v, want a refused rename naming both", err)
	}
	fix := regexp.MustCompile("run `([^`]*)` on the sink").FindStringSubmatch(err.Error())
	if fix == nil || strings.Count(err.Error(), "\n") > 0 {
		t.Fatalf("no one-line fix in %q", err)
	}
	// Refused again until the fix ran: nothing was written meanwhile.
	if _, err := syncer.Run(context.Background(), syncer.Options{Config: c, Store: e.store}); !errors.Is(err, syncer.ErrSchemaChange) {
		t.Fatalf("second run before the fix: %v", err)
	}
	if n := tableText(t, e.dst, "copy", "a"); n[0] != "1 a1" {
		t.Fatalf("the refused swap changed the copy: %v", n[0])
	}
	e.exec(t, "sink", fix[1])
	e.run(t, c, syncer.Options{})
	e.sameRows(t, "id, a, b, v", 1000)
	if n := tableText(t, e.dst, "copy", "a"); n[0] != "1 b1" {
		t.Fatalf("copy row 1 a = %v, want b1", n[0])
	}
}

// Under schema_changes: fail a column dropped and added again, and a swap,
// stop the run (any change stops it) and leave the copy as it was.
func TestColumnIdentityUnderFail(t *testing.T) {
	e := newEnv(t)
	identityTable(t, e, "")
	c := e.config(t, "public.src", 300, "")
	c.SchemaChanges = config.SchemaFail
	e.exec(t, "source", `ALTER TABLE src DROP COLUMN v, ADD COLUMN v integer DEFAULT 7`)
	_, err := syncer.Run(context.Background(), syncer.Options{Config: c, Store: e.store})
	if !errors.Is(err, syncer.ErrSchemaChange) || !strings.Contains(err.Error(), `column "v" was dropped and added again (integer)`) || !strings.Contains(err.Error(), "schema_changes is fail") {
		t.Fatalf("run after drop and add under fail: %v", err)
	}
	e.sameRows(t, "id, a, b", 1000)
	if got := tableText(t, e.dst, "copy", "v"); got[0] != "1 1" {
		t.Fatalf("copy changed under fail: %v", got[0])
	}
	// Followed by hand as the error says: the next run fills the column.
	hand := regexp.MustCompile("run `([^`]*)` on the sink").FindStringSubmatch(err.Error())
	if hand == nil {
		t.Fatalf("no statement to run by hand in %q", err)
	}
	e.exec(t, "sink", hand[1])
	e.run(t, c, syncer.Options{})
	e.sameRows(t, "id, a, b, v", 1000)

	e.exec(t, "source", `BEGIN; ALTER TABLE src RENAME COLUMN a TO tmp; ALTER TABLE src RENAME COLUMN b TO a; ALTER TABLE src RENAME COLUMN tmp TO b; COMMIT`)
	if _, err := syncer.Run(context.Background(), syncer.Options{Config: c, Store: e.store}); !errors.Is(err, syncer.ErrSchemaChange) || !strings.Contains(err.Error(), "renamed") {
		t.Fatalf("run after a swap under fail: %v", err)
	}
}
