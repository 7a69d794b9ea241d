package source_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgpool"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/source"
)

// patternTables creates tables app.tFROM..app.tTO-1, each with a primary
// key and the cursor column.
func patternTables(t testing.TB, db *pgtest.DB, from, to int) {
	t.Helper()
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "CREATE TABLE app.t%03d (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT now(), v text);\n", i)
	}
	db.Exec(t, b.String())
}

// patternConfig is the pattern source app.* with cursor [updated_at].
func patternConfig(t testing.TB, db *pgtest.DB, tables string) *config.Config {
	t.Helper()
	c, err := config.Parse("app.yaml", []byte(fmt.Sprintf(`name: app
source:
  dsn: %s
  table: app.*
  cursor: [updated_at]
sink:
  dsn: %s
  table: copy.*
%s`, db.URL, db.URL, tables)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// matchText is what a match found, one line per table: each source's
// cursor, key and mode, each skipped table's reason.
func matchText(e source.Expansion) string {
	var lines []string
	for _, m := range e.Members {
		lines = append(lines, fmt.Sprintf("%s %s cursor=%v key=%v mode=%s note=%q", m.Name, m.Source.Ident, m.Source.Cursor, m.Sink.Key, m.Mode, m.CursorNote))
	}
	for _, s := range e.Skipped {
		lines = append(lines, fmt.Sprintf("%s %s skipped %s: %s", s.Name, s.Table, s.Code, s.Reason))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// A match of an unchanged catalog costs the same few round trips with 50
// tables in the pattern and with 100, opens no session (the pool's) and
// describes no table; it finds what a match that describes every table
// finds.
func TestMatchOfUnchangedCatalogDescribesNoTable(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE SCHEMA app; CREATE SCHEMA copy`)
	c := patternConfig(t, db, "")
	pool := pgpool.New(pgpool.Options{MaxIdle: 1})
	defer pool.Close()
	var ctr pgutil.Counter
	ctx := pgutil.WithCounter(pgpool.With(context.Background(), pool), &ctr)
	made := 0
	idle := func(n int) int {
		t.Helper()
		patternTables(t, db, made, n)
		made = n
		cache := &source.MatchCache{}
		e, err := source.Expand(ctx, c, cache)
		if err != nil {
			t.Fatal(err)
		}
		if e.Described != n || len(e.Members) != n {
			t.Fatalf("the first match described %d tables and found %d; want %d", e.Described, len(e.Members), n)
		}
		before := ctr.Snapshot()
		e, err = source.Expand(ctx, c, cache)
		if err != nil {
			t.Fatal(err)
		}
		got := ctr.Snapshot().Since(before)
		if e.Described != 0 || got.Connects != 0 {
			t.Errorf("a match of an unchanged catalog of %d tables described %d tables and opened %d sessions; want none:\n%s",
				n, e.Described, got.Connects, strings.Join(got.Statements, "\n"))
		}
		all, err := source.ExpandAll(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if matchText(e) != matchText(all) {
			t.Errorf("the cached match found\n%s\nthe full match\n%s", matchText(e), matchText(all))
		}
		t.Logf("%d tables: an unchanged match took %d round trips: %q", n, got.RoundTrips, got.Statements)
		return got.RoundTrips
	}
	few := idle(50)
	many := idle(100)
	if few != many || few > 3 {
		t.Errorf("a match of an unchanged catalog took %d round trips with 50 tables and %d with 100; want the same, at most 3 (the fingerprints, the session's reset)", few, many)
	}
}

// Each kind of DDL that can change what a pattern source makes of a table
// is seen by the next match, which describes that table alone and finds
// what a match that describes every table finds.
func TestMatchSeesEveryDDL(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE SCHEMA app; CREATE SCHEMA copy; CREATE SCHEMA other`)
	patternTables(t, db, 0, 8)
	db.Exec(t, `CREATE TABLE app.nocursor (id bigint PRIMARY KEY, v text);
CREATE TABLE app.nokey (id bigint NOT NULL, updated_at timestamptz NOT NULL, v text);
CREATE TABLE app.seq (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text);
CREATE TABLE other.moved (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, v text)`)
	c := patternConfig(t, db, "tables:\n  seq: {cursor: [id]}\n")
	pool := pgpool.New(pgpool.Options{MaxIdle: 1})
	defer pool.Close()
	ctx := pgpool.With(context.Background(), pool)
	cache := &source.MatchCache{}
	if _, err := source.Expand(ctx, c, cache); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		ddl       string
		described int
		want      string // a line the match must have ("-" prefix: must not)
	}{
		{"CREATE TABLE app.fresh (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, v text)", 1, "app.fresh app.fresh cursor=[updated_at id]"},
		{"DROP TABLE app.t001", 0, "-app.t001 "},
		{"ALTER TABLE app.t002 RENAME TO renamed", 1, "app.renamed app.renamed cursor=[updated_at id]"},
		{"ALTER TABLE app.t003 SET SCHEMA other", 0, "-app.t003 "},
		{"ALTER TABLE other.moved SET SCHEMA app", 1, "app.moved app.moved cursor=[updated_at id]"},
		{"ALTER TABLE app.nocursor ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now()", 1, "app.nocursor app.nocursor cursor=[updated_at id]"},
		{"ALTER TABLE app.nokey ADD PRIMARY KEY (id)", 1, "app.nokey app.nokey cursor=[updated_at id]"},
		{"CREATE UNIQUE INDEX CONCURRENTLY t004_updated_at ON app.t004 (updated_at)", 1, "app.t004 app.t004 cursor=[updated_at] key=[id]"},
		{"ALTER TABLE app.t005 DROP COLUMN updated_at", 1, "app.t005 app.t005 skipped no_cursor_column"},
		{"ALTER TABLE app.t006 RENAME COLUMN updated_at TO changed_at", 1, "app.t006 app.t006 skipped no_cursor_column"},
		{"ALTER TABLE app.t007 ALTER COLUMN updated_at DROP DEFAULT, ALTER COLUMN updated_at TYPE jsonb USING to_jsonb(updated_at)", 1, "app.t007 app.t007 skipped cursor_not_usable"},
		{"ALTER TABLE app.seq ALTER COLUMN id SET CACHE 20", 1, "app.seq app.seq skipped cursor_not_usable"},
		{"ALTER TABLE app.seq ALTER COLUMN id SET CACHE 1", 1, "app.seq app.seq cursor=[id]"},
	} {
		db.Exec(t, step.ddl)
		e, err := source.Expand(ctx, c, cache)
		if err != nil {
			t.Fatalf("after %s: %v", step.ddl, err)
		}
		all, err := source.ExpandAll(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		got := matchText(e)
		if got != matchText(all) {
			t.Errorf("after %s the cached match found\n%s\nthe full match\n%s", step.ddl, got, matchText(all))
		}
		if e.Described != step.described {
			t.Errorf("after %s the match described %d tables, want %d", step.ddl, e.Described, step.described)
		}
		if line, absent := strings.CutPrefix(step.want, "-"); absent {
			if strings.Contains(got, line) {
				t.Errorf("after %s the match still has %q:\n%s", step.ddl, line, got)
			}
		} else if !strings.Contains(got, line) {
			t.Errorf("after %s the match lacks %q:\n%s", step.ddl, line, got)
		}
	}
}
