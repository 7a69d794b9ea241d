package pgutil_test

import (
	"context"
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
