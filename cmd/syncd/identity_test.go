package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/watermark"
)

// identitySource makes a source table of 112 rows whose updated_at runs
// from 10 days ago to 10 minutes ago (created_at 20 days earlier), with a
// unique code, and returns a config writer for the source "orders".
func identitySource(t *testing.T, src *pgtest.DB, table string) {
	t.Helper()
	src.Exec(t, fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY, code text NOT NULL UNIQUE, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL, name text)`, table))
	src.Exec(t, fmt.Sprintf(`INSERT INTO %s SELECT g, 'c' || g, now() - interval '30 days' + g * interval '1 hour', now() - interval '10 days' + g * interval '2 hours', 'row ' || g FROM generate_series(1, 112) g`, table))
}

type identityConfig struct {
	srcTable, sinkTable, cursor, where, key string
}

func (c identityConfig) yaml(src, dst *pgtest.DB) string {
	where := ""
	if c.where != "" {
		where = "\n  where: " + c.where
	}
	return fmt.Sprintf(`name: orders
source:
  dsn: %s
  table: %s
  cursor: %s
  lookback: 0s
  page_size: 25%s
sink:
  dsn: %s
  table: %s
  key: %s
`, src.URL, c.srcTable, c.cursor, where, dst.URL, c.sinkTable, c.key)
}

// rowsOf is every row of table in db (as text, ordered by id), restricted
// by where when it is set.
func rowsOf(t *testing.T, db *pgtest.DB, table, where string) string {
	t.Helper()
	if where != "" {
		table = fmt.Sprintf("(SELECT * FROM %s WHERE %s)", table, where)
	}
	return rowsText(t, db, table)
}

// Changing a setting that gives the watermark its meaning, under the same
// name, is refused with exit 2 and one line naming the file, the key (old
// and new values) and the resync command; nothing is written (the
// watermark and the sink stay as they were). After the suggested resync the
// copy equals the source row by row. Before, the old watermark was reused:
// a new copy got a few of the 112 rows and the run said "ok".
func TestChangedSettingsRefuseTheWatermark(t *testing.T) {
	base := identityConfig{srcTable: "public.orders", sinkTable: "public.orders_copy", cursor: "[updated_at, id]", key: "[id]"}
	cases := []struct {
		key           string
		before, after identityConfig
		prepare       func(t *testing.T, src, dst *pgtest.DB)
	}{
		{key: "source.table", before: base, after: func() identityConfig { c := base; c.srcTable = "public.orders_v2"; return c }(),
			prepare: func(t *testing.T, src, _ *pgtest.DB) { identitySource(t, src, "orders_v2") }},
		{key: "sink.table", before: base, after: func() identityConfig { c := base; c.sinkTable = "public.orders_copy2"; return c }()},
		{key: "source.cursor", before: base, after: func() identityConfig { c := base; c.cursor = "[created_at, id]"; return c }()},
		{key: "source.where", before: func() identityConfig { c := base; c.where = `"id <= 10"`; return c }(), after: base},
		{key: "sink.key", before: base, after: func() identityConfig { c := base; c.key = "[code]"; return c }(),
			prepare: func(t *testing.T, _, dst *pgtest.DB) { dst.Exec(t, `CREATE UNIQUE INDEX ON orders_copy (code)`) }},
	}
	for _, tc := range cases {
		t.Run(tc.key, func(t *testing.T) {
			src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
			identitySource(t, src, "orders")
			dir := t.TempDir()
			state := filepath.Join(dir, "state.db")
			env := []string{"SYNCD_STATE=" + state}
			cfg := writeConfig(t, dir, "orders.yaml", tc.before.yaml(src, dst))
			if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
				t.Fatalf("first run: exit %d: %s", r.Code, r.Stderr)
			}
			if tc.prepare != nil {
				tc.prepare(t, src, dst)
			}
			stateBefore, err := os.ReadFile(state)
			if err != nil {
				t.Fatal(err)
			}
			copyBefore := rowsText(t, dst, "orders_copy")

			writeConfig(t, dir, "orders.yaml", tc.after.yaml(src, dst))
			r := bin.Run(t, env, "run", "--config", cfg, "--once")
			line := strings.TrimSpace(r.Stderr)
			wantPrefix := cfg + ":"
			if r.Code != 2 || strings.Count(line, "\n") != 0 || !strings.HasPrefix(line, "syncd run: "+wantPrefix) ||
				!strings.Contains(line, ": "+tc.key+": ") || !strings.Contains(line, tc.key+" ") ||
				!strings.Contains(line, "the watermark of source orders in "+state+" was computed for other settings") ||
				!strings.Contains(line, "run `syncd resync --source orders --from-start` (or --from TIME)") {
				t.Fatalf("run after changing %s: exit %d, want 2 with one line naming the file, the key and the resync:\n%s%s", tc.key, r.Code, r.Stdout, r.Stderr)
			}
			t.Logf("%s", line)
			if after, _ := os.ReadFile(state); string(after) != string(stateBefore) {
				t.Errorf("the refused run changed the state file")
			}
			if got := rowsText(t, dst, "orders_copy"); got != copyBefore {
				t.Errorf("the refused run changed the copy")
			}
			if tc.key == "sink.table" && count(t, dst, "SELECT count(*) FROM pg_class WHERE relname = 'orders_copy2'") != 0 {
				t.Errorf("the refused run created the new sink table")
			}
			// validate and status say the same.
			for _, cmd := range []string{"status", "validate"} {
				if r := bin.Run(t, env, cmd, "--config", cfg); r.Code != 2 || !strings.Contains(r.Stderr, "syncd resync --source orders --from-start") {
					t.Errorf("%s: exit %d, want 2 with the resync advice:\n%s%s", cmd, r.Code, r.Stdout, r.Stderr)
				}
			}

			if r := bin.Run(t, env, "resync", "--config", cfg, "--source", "orders", "--from-start"); r.Code != 0 {
				t.Fatalf("resync: exit %d: %s", r.Code, r.Stderr)
			}
			if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
				t.Fatalf("run after resync: exit %d: %s", r.Code, r.Stderr)
			}
			srcTable, sinkTable := strings.TrimPrefix(tc.after.srcTable, "public."), strings.TrimPrefix(tc.after.sinkTable, "public.")
			want := rowsOf(t, src, srcTable, strings.Trim(tc.after.where, `"`))
			if got := rowsText(t, dst, sinkTable); got != want || count(t, dst, "SELECT count(*) FROM "+sinkTable) != 112 {
				t.Fatalf("after resync the copy %s differs from the source %s:\n%s\nwant\n%s", sinkTable, srcTable, got, want)
			}
			if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
				t.Fatalf("second run after resync: exit %d: %s", r.Code, r.Stderr)
			}
		})
	}
}

// A state written before syncd recorded identities (no "identity" in the
// record) is adopted silently: the run continues from its watermark and
// records the current settings, so that a later change is refused.
func TestOldStateWithoutIdentityIsAdopted(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	identitySource(t, src, "orders")
	dir := t.TempDir()
	state := filepath.Join(dir, "state.db")
	env := []string{"SYNCD_STATE=" + state}
	base := identityConfig{srcTable: "public.orders", sinkTable: "public.orders_copy", cursor: "[updated_at, id]", key: "[id]"}
	cfg := writeConfig(t, dir, "orders.yaml", base.yaml(src, dst))
	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("first run: exit %d: %s", r.Code, r.Stderr)
	}
	// Make it an old state: the record as the previous build wrote it.
	store, err := watermark.Open(state, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := store.Get("orders")
	if err != nil || st.Identity == nil {
		t.Fatalf("the run recorded no identity (%v)", err)
	}
	cursor := st.Cursor
	st.Identity = nil
	if err := store.Put("orders", st); err != nil {
		t.Fatal(err)
	}
	store.Close()

	src.Exec(t, `INSERT INTO orders VALUES (113, 'c113', now(), now() - interval '1 minute', 'new')`)
	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("run on an old state: exit %d, want 0: %s", r.Code, r.Stderr)
	}
	if got, want := rowsText(t, dst, "orders_copy"), rowsText(t, src, "orders"); got != want {
		t.Fatalf("copy differs from the source after the run on an old state")
	}
	r := bin.Run(t, env, "status", "--config", cfg, "--json")
	if r.Code != 0 || !strings.Contains(r.Stdout, `"rows_applied_last_run": 1,`) {
		t.Fatalf("the run on an old state did not continue from its watermark %v (want 1 row applied):\n%s%s", cursor, r.Stdout, r.Stderr)
	}
	store, err = watermark.Open(state, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st, _, err = store.Get("orders")
	store.Close()
	if err != nil || st.Identity == nil || st.Identity.Settings["sink.table"] != "public.orders_copy" {
		t.Fatalf("the old state did not adopt the current identity: %+v (%v)", st.Identity, err)
	}
	changed := base
	changed.sinkTable = "public.other_copy"
	writeConfig(t, dir, "orders.yaml", changed.yaml(src, dst))
	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 2 || !strings.Contains(r.Stderr, `sink.table "public.orders_copy" → "public.other_copy"`) {
		t.Fatalf("a change after the adoption: exit %d, want 2 naming sink.table:\n%s", r.Code, r.Stderr)
	}
}

// A copy emptied (TRUNCATE) or dropped while the watermark stays is
// refused with exit 2 and the resync that rebuilds it, not resumed: the
// copy would hold only the rows after the watermark. After the resync the
// copy equals the source. (Before: exit 0 and an empty copy.)
func TestEmptiedOrDroppedCopyIsRefused(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	env := []string{"SYNCD_STATE=" + filepath.Join(dir, "state.db")}
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, ""))
	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("run: exit %d: %s", r.Code, r.Stderr)
	}
	for _, tc := range []struct{ sql, state string }{{"TRUNCATE orders_copy", "empty"}, {"DROP TABLE orders_copy", "missing"}} {
		dst.Exec(t, tc.sql)
		r := bin.Run(t, env, "run", "--config", cfg, "--once")
		want := "sink.table: the copy public.orders_copy is " + tc.state + ", but the watermark of source orders"
		if r.Code != 2 || !strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "run `syncd resync --source orders --from-start`") {
			t.Fatalf("run after %s: exit %d, want 2 with %q:\n%s", tc.sql, r.Code, want, r.Stderr)
		}
		if n := count(t, dst, "SELECT count(*) FROM pg_class WHERE relname = 'orders_copy'"); tc.state == "missing" && n != 0 {
			t.Fatalf("the refused run created the copy again")
		}
	}
	if r := bin.Run(t, env, "resync", "--config", cfg, "--source", "orders", "--from-start"); r.Code != 0 {
		t.Fatalf("resync: exit %d: %s", r.Code, r.Stderr)
	}
	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("run after resync: exit %d: %s", r.Code, r.Stderr)
	}
	if got, want := rowsText(t, dst, "orders_copy"), rowsText(t, src, "orders"); got != want {
		t.Fatal("after the resync the copy differs from the source")
	}
}
