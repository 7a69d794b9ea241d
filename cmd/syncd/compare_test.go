package main_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/watermark"
)

// compareConfig is a plain source in compare mode: no cursor, no key (the
// primary key is used).
const compareConfig = `name: codes
mode: compare
source:
  dsn: %s
  table: public.codes
  page_size: 7
sink:
  dsn: %s
  table: public.codes_copy
`

// sameRows fails unless table in src and table_copy in dst hold the same
// rows, compared as text in key order: a comparison of the test's own,
// not reconcile's.
func sameRows(t *testing.T, src, dst *pgtest.DB, table string) {
	t.Helper()
	a, b := rowsText(t, src, table), rowsText(t, dst, table+"_copy")
	if a != b {
		t.Fatalf("%s_copy differs from %s:\nsource:\n%s\ncopy:\n%s", table, table, a, b)
	}
}

// runCompare runs the source once and returns what the state file says
// the run did in compare mode.
func runCompare(t *testing.T, env []string, cfg, state, name string) watermark.CompareResult {
	t.Helper()
	r := bin.Run(t, env, "run", "--once", "--config", cfg)
	if r.Code != 0 {
		t.Fatalf("run --once: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	st := readState(t, state, name)
	if st.Mode != watermark.ModeCompare || st.LastCompare == nil || st.LastStatus != "ok" {
		t.Fatalf("state after a compare run: mode %q, last_compare %v, status %q", st.Mode, st.LastCompare, st.LastStatus)
	}
	return *st.LastCompare
}

// A table without any timestamp is synced with mode: compare: the first
// run creates and fills the copy; inserts, updates that change no
// timestamp and hard deletes in the source are then written by the next
// run, and only they (3 inserted, 2 updated, 1 deleted); a run with
// nothing changed writes nothing. validate and status name the mode.
func TestCompareModePlainSource(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE codes (id int PRIMARY KEY, code text NOT NULL, label text)`)
	src.Exec(t, `INSERT INTO codes SELECT g, 'c' || g, 'label ' || g FROM generate_series(1, 500) g`)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "codes.yaml", fmt.Sprintf(compareConfig, src.URL, dst.URL))
	state := filepath.Join(dir, "state.db")
	env := []string{"SYNCD_STATE=" + state}

	r := bin.Run(t, env, "validate", "--config", cfg)
	if r.Code != 0 || !strings.Contains(r.Stdout, "codes: ok (public.codes, 3 columns, compare mode: each run compares the whole table by key id and repairs the differences") {
		t.Fatalf("validate: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}

	first := runCompare(t, env, cfg, state, "codes")
	if first.Inserted != 500 || first.Updated != 0 || first.Deleted != 0 {
		t.Fatalf("first run: %+v, want 500 inserted", first)
	}
	sameRows(t, src, dst, "codes")

	src.Exec(t, `INSERT INTO codes VALUES (501, 'c501', 'new'), (502, 'c502', NULL), (1000, 'c1000', 'far')`)
	src.Exec(t, `UPDATE codes SET label = 'renamed' WHERE id IN (7, 250)`)
	src.Exec(t, `DELETE FROM codes WHERE id = 42`)
	got := runCompare(t, env, cfg, state, "codes")
	if got.Inserted != 3 || got.Updated != 2 || got.Deleted != 1 || got.Remaining != 0 {
		t.Fatalf("run after 3 inserts, 2 updates and 1 delete: %+v", got)
	}
	sameRows(t, src, dst, "codes")

	idle := runCompare(t, env, cfg, state, "codes")
	if idle.Inserted+idle.Updated+idle.Deleted != 0 || idle.Compared != 502 {
		t.Fatalf("run with nothing changed: %+v, want nothing written of 502 compared", idle)
	}
	st := readState(t, state, "codes")
	if st.LastRows != 0 || st.TotalWritten != 505 || st.TotalDeleted != 1 || st.Cursor != nil {
		t.Fatalf("state: last_rows %d, total_written %d, total_deleted %d, cursor %v", st.LastRows, st.TotalWritten, st.TotalDeleted, st.Cursor)
	}

	// The sink's catalog keeps one writer per copy, as for a cursor run:
	// another source (here in another state file) writing the same copy
	// is refused (exit 2) and writes nothing.
	other := writeConfig(t, t.TempDir(), "other.yaml", strings.Replace(fmt.Sprintf(compareConfig, src.URL, dst.URL), "name: codes", "name: others", 1))
	src.Exec(t, `DELETE FROM codes WHERE id = 43`)
	r = bin.Run(t, []string{"SYNCD_STATE=" + filepath.Join(t.TempDir(), "other.db")}, "run", "--once", "--config", other)
	if r.Code != 2 || !strings.Contains(r.Stderr, "the copy public.codes_copy is written by source codes") {
		t.Fatalf("a second writer of the copy in compare mode: exit %d, want 2\n%s", r.Code, r.Stderr)
	}
	if n := count(t, dst, "SELECT count(*) FROM codes_copy WHERE id = 43"); n != 1 {
		t.Fatal("the refused second writer wrote to the copy")
	}
	src.Exec(t, `INSERT INTO codes VALUES (43, 'c43', 'label 43')`)

	r = bin.Run(t, env, "status", "--json", "--config", cfg)
	var out struct {
		Sources []struct {
			Name        string                   `json:"name"`
			Mode        string                   `json:"mode"`
			LastCompare *watermark.CompareResult `json:"last_compare"`
		} `json:"sources"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || r.Code != 0 {
		t.Fatalf("status --json: exit %d, %v\n%s%s", r.Code, err, r.Stdout, r.Stderr)
	}
	if len(out.Sources) != 1 || out.Sources[0].Mode != "compare" || out.Sources[0].LastCompare == nil {
		t.Fatalf("status --json does not say the mode: %s", r.Stdout)
	}
	r = bin.Run(t, env, "status", "--config", cfg)
	if r.Code != 0 || !strings.Contains(r.Stdout, "compare mode") {
		t.Fatalf("status does not say the mode: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}

// A pattern source with mode: auto syncs a table that lacks the cursor
// column by comparing it (not skipping it), and validate names each
// table's mode; without mode: auto the table is skipped as before, and the
// skip says how to sync it.
func TestCompareModePattern(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, v text)`)
	src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-01 09:00:00+00', 'o' || g FROM generate_series(1, 100) g`)
	src.Exec(t, `CREATE TABLE audit_log (id bigint PRIMARY KEY, what text NOT NULL)`)
	src.Exec(t, `INSERT INTO audit_log SELECT g, 'did ' || g FROM generate_series(1, 60) g`)
	dir := t.TempDir()
	body := `name: shop
source:
  dsn: ${SYNCD_TEST_SRC}
  table: public.*
  cursor: [updated_at, id]
  lookback: 0s
sink:
  dsn: ${SYNCD_TEST_DST}
  table: public.*_copy
`
	state := filepath.Join(dir, "state.db")
	env := []string{"SYNCD_TEST_SRC=" + src.URL, "SYNCD_TEST_DST=" + dst.URL, "SYNCD_STATE=" + state}

	// Today's behaviour without mode: the table is skipped, with the hint.
	cfg := writeConfig(t, dir, "shop.yaml", body)
	r := bin.Run(t, env, "validate", "--config", cfg)
	if r.Code == 0 || !strings.Contains(r.Stdout, `shop.audit_log: skipped: source.cursor: column "updated_at" does not exist in public.audit_log (exclude it with source.exclude, or give it a cursor under tables:, such as tables: {audit_log: {cursor: [...]}}) (or set mode: auto to sync it in compare mode`) {
		t.Fatalf("validate without mode: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}

	cfg = writeConfig(t, dir, "shop.yaml", "mode: auto\n"+body)
	r = bin.Run(t, env, "validate", "--config", cfg)
	for _, want := range []string{
		"shop: pattern public.* matches 2 tables to sync: shop.audit_log (compare mode), shop.orders",
		`shop.audit_log: ok (public.audit_log, 2 columns, compare mode: no usable cursor (column "updated_at" does not exist in public.audit_log); each run compares the whole table by key id and repairs the differences`,
		"shop.orders: ok (public.orders, 3 columns, cursor updated_at, id,",
	} {
		if r.Code != 0 || !strings.Contains(r.Stdout, want) {
			t.Fatalf("validate with mode: auto: exit %d, stdout lacks %q\n%s%s", r.Code, want, r.Stdout, r.Stderr)
		}
	}
	r = bin.Run(t, env, "run", "--once", "--config", cfg)
	if r.Code != 0 {
		t.Fatalf("run --once: exit %d\n%s", r.Code, r.Stderr)
	}
	sameRows(t, src, dst, "orders")
	sameRows(t, src, dst, "audit_log")
	src.Exec(t, `INSERT INTO audit_log VALUES (61, 'late')`)
	src.Exec(t, `DELETE FROM audit_log WHERE id < 3`)
	src.Exec(t, `UPDATE audit_log SET what = 'edited' WHERE id = 10`)
	r = bin.Run(t, env, "run", "--once", "--config", cfg)
	if r.Code != 0 {
		t.Fatalf("second run --once: exit %d\n%s", r.Code, r.Stderr)
	}
	sameRows(t, src, dst, "audit_log")
	st := readState(t, state, "shop.audit_log")
	if c := st.LastCompare; st.Mode != watermark.ModeCompare || c == nil || c.Inserted != 1 || c.Updated != 1 || c.Deleted != 2 {
		t.Fatalf("shop.audit_log state: mode %q, last_compare %+v", st.Mode, st.LastCompare)
	}
	if st := readState(t, state, "shop.orders"); st.Mode != "" || st.Cursor == nil {
		t.Fatalf("shop.orders is not a cursor source: mode %q, cursor %v", st.Mode, st.Cursor)
	}
}

// The daemon runs a source in compare mode on its schedule: each run's
// inserts, updates and deletes are counted by the same series as a cursor
// run's (syncd_rows_written_total, syncd_rows_deleted_total); reconcile
// compares the whole table, and resync is refused (exit 2).
func TestCompareModeDaemon(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE codes (id int PRIMARY KEY, code text NOT NULL, label text)`)
	src.Exec(t, `INSERT INTO codes SELECT g, 'c' || g, 'label ' || g FROM generate_series(1, 300) g`)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "codes.yaml", "schedule: \"@every 1s\"\n"+fmt.Sprintf(compareConfig, src.URL, dst.URL))
	state := filepath.Join(dir, "state.db")
	addr := testutil.FreeAddr(t)
	d := bin.Start(t, nil, "run", "--config", cfg, "--state", state, "--listen", addr)
	counter := func(name string) float64 {
		mfs, err := testutil.TryScrape(addr)
		if err != nil {
			return -1
		}
		v, _ := mfs.Value(name, map[string]string{"source": "codes"})
		return v
	}
	waitFor(t, 30*time.Second, "the first run's 300 rows written", func() bool { return counter("syncd_rows_written_total") == 300 })
	src.Exec(t, `UPDATE codes SET label = NULL WHERE id = 5`)
	src.Exec(t, `DELETE FROM codes WHERE id IN (1, 2)`)
	waitFor(t, 30*time.Second, "1 row written and 2 deleted", func() bool {
		return counter("syncd_rows_deleted_total") == 2 && counter("syncd_rows_written_total") == 301
	})
	d.WaitLog(t, 30*time.Second, "run done", "source", "codes", "mode", "compare", "written", 0, "deleted", 0)
	if r := d.Stop(t, 20*time.Second); r.Code != 0 {
		t.Fatalf("daemon exit after SIGTERM: %s", r)
	}
	sameRows(t, src, dst, "codes")

	env := []string{"SYNCD_STATE=" + state}
	r := bin.Run(t, env, "reconcile", "--config", cfg, "--source", "codes")
	if r.Code != 0 {
		t.Fatalf("reconcile of a compare-mode source: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	r = bin.Run(t, env, "resync", "--config", cfg, "--source", "codes", "--from-start")
	if r.Code != 2 || !strings.Contains(r.Stderr, "is in compare mode") {
		t.Fatalf("resync of a compare-mode source: exit %d, want 2\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}
