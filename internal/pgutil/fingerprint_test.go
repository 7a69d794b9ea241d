package pgutil_test

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/pgutil"
)

// Every kind of DDL that changes what syncd reads from the catalog about a
// table changes its fingerprint; reading and writing rows, VACUUM and
// ANALYZE of an analyzed table do not.
func TestFingerprintChangesWithEveryDDL(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	db.Exec(t, `CREATE TYPE public.mood AS ENUM ('sad', 'ok');
CREATE DOMAIN public.pos AS int CHECK (VALUE > 0);
CREATE TYPE public.pair AS (a int, b text);
CREATE TABLE public.t (id int PRIMARY KEY, m public.mood, p public.pos, pr public.pair, v text);
INSERT INTO public.t VALUES (1, 'ok', 1, ROW(1, 'x'), 'a'); ANALYZE public.t`)
	conn, err := pgutil.Connect(ctx, db.URL, "source")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	fp := func() string {
		t.Helper()
		s, err := pgutil.Fingerprint(ctx, conn, "public", "t")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	last := fp()
	if last == "" {
		t.Fatal("the fingerprint of an existing table is empty")
	}
	for _, q := range []string{
		"INSERT INTO public.t VALUES (2, 'sad', 2, ROW(2, 'y'), 'b')",
		"UPDATE public.t SET v = 'c'",
		"DELETE FROM public.t WHERE id = 2",
		"VACUUM public.t",
		"ANALYZE public.t",
	} {
		db.Exec(t, q)
		if now := fp(); now != last {
			t.Errorf("%s changed the fingerprint", q)
			last = now
		}
	}
	for _, q := range []string{
		"ALTER TABLE public.t ADD COLUMN w int",
		"ALTER TABLE public.t ALTER COLUMN w TYPE bigint",
		"ALTER TABLE public.t RENAME COLUMN w TO w2",
		"ALTER TABLE public.t ALTER COLUMN w2 SET DEFAULT 7; UPDATE public.t SET w2 = 7",
		"ALTER TABLE public.t ALTER COLUMN w2 SET NOT NULL",
		"ALTER TABLE public.t DROP COLUMN w2",
		"ALTER TYPE public.mood ADD VALUE 'happy'",
		"ALTER TYPE public.mood RENAME VALUE 'ok' TO 'fine'",
		"ALTER DOMAIN public.pos ADD CONSTRAINT small CHECK (VALUE < 100)",
		"ALTER DOMAIN public.pos DROP CONSTRAINT small",
		"ALTER TYPE public.pair ADD ATTRIBUTE c int",
		"CREATE INDEX ON public.t (v)",
		"ALTER TABLE public.t ADD CONSTRAINT vlen CHECK (length(v) < 10)",
		"CREATE FUNCTION public.noop() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'; CREATE TRIGGER tr BEFORE INSERT ON public.t FOR EACH ROW EXECUTE FUNCTION public.noop()",
		"ALTER TABLE public.t DISABLE TRIGGER tr",
		"TRUNCATE public.t",
		"VACUUM FULL public.t",
		"ALTER TABLE public.t RENAME TO t2; ALTER TABLE public.t2 RENAME TO t",
		"DROP TABLE public.t; CREATE TABLE public.t (id int PRIMARY KEY, m public.mood, p public.pos, pr public.pair, v text)",
	} {
		db.Exec(t, q)
		now := fp()
		if now == last {
			t.Errorf("%s left the fingerprint as it was", q)
		}
		last = now
	}
	db.Exec(t, "DROP TABLE public.t")
	if now := fp(); now != "" {
		t.Errorf("the fingerprint of a dropped table is %q, want empty", now)
	}
}

// The fingerprints of a schema's tables stay as they are while only rows
// change and the tables are vacuumed and analyzed (an idle pattern tick
// describes nothing), and a DDL statement changes its own table's only.
func TestTableFingerprintsChangeWithDDLOnly(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	db.Exec(t, `CREATE SCHEMA app;
CREATE TABLE app.a (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT now(), v text);
CREATE TABLE app.b (id bigserial PRIMARY KEY, v text);
CREATE TABLE app.p (id bigint, d date NOT NULL, PRIMARY KEY (id, d)) PARTITION BY RANGE (d);
CREATE TABLE app.p1 PARTITION OF app.p FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')`)
	conn, err := pgutil.Connect(ctx, db.URL, "source")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	read := func() ([]string, map[string]string) {
		t.Helper()
		names, fps, err := pgutil.TableFingerprints(ctx, conn, "app")
		if err != nil {
			t.Fatal(err)
		}
		return names, fps
	}
	names, last := read()
	if got := strings.Join(names, ","); got != "a,b,p" {
		t.Fatalf("tables %s, want a,b,p (not the partition p1)", got)
	}
	for _, q := range []string{
		"INSERT INTO app.a (v) SELECT 'x' FROM generate_series(1, 100); INSERT INTO app.b (v) VALUES ('y'); INSERT INTO app.p VALUES (1, '2026-02-01')",
		"UPDATE app.a SET v = 'z'",
		"DELETE FROM app.a WHERE id % 2 = 0",
		"VACUUM app.a", "ANALYZE app.a", "VACUUM ANALYZE app.b", "ANALYZE app.p",
	} {
		db.Exec(t, q)
		if _, now := read(); !maps.Equal(now, last) {
			t.Errorf("%s changed the fingerprints", q)
			last = now
		}
	}
	for _, step := range []struct{ q, table string }{
		{"ALTER TABLE app.a ALTER COLUMN id SET CACHE 10", "a"},
		{"ALTER SEQUENCE app.b_id_seq INCREMENT BY 2", "b"},
		{"ALTER TABLE app.b ADD COLUMN w int", "b"},
		{"CREATE UNIQUE INDEX ON app.a (updated_at, id)", "a"},
		{"ALTER TABLE app.p ADD COLUMN w int", "p"},
	} {
		db.Exec(t, step.q)
		_, now := read()
		for name, fp := range now {
			if changed := fp != last[name]; changed != (name == step.table) {
				t.Errorf("%s: the fingerprint of %s changed: %v, want %v", step.q, name, changed, name == step.table)
			}
		}
		last = now
	}
}
