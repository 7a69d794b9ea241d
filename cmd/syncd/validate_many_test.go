package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// manyTables adds the tables from..to-1 of a schema like a real
// application's to db's schema app: by i%6, a table with a cursor column
// and its index; one without (compare mode under mode: auto); one without
// a primary key (skipped); a partitioned table with rows; one whose
// cursor column is nullable, unindexed and NULL in two rows (a warning);
// one whose copy exists already.
func manyTables(t *testing.T, db *pgtest.DB, from, to int) {
	t.Helper()
	var b strings.Builder
	for i := from; i < to; i++ {
		n := fmt.Sprintf("app.t%03d", i)
		switch i % 6 {
		case 0:
			fmt.Fprintf(&b, `CREATE TABLE %[1]s (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT '2026-01-01', v text); CREATE INDEX ON %[1]s (updated_at, id);
INSERT INTO %[1]s (id, v) SELECT g, 'v' || g FROM generate_series(1, 20) g;`, n)
		case 1:
			fmt.Fprintf(&b, `CREATE TABLE %s (id int PRIMARY KEY, code text NOT NULL, label text);`, n)
		case 2:
			fmt.Fprintf(&b, `CREATE TABLE %s (a int, updated_at timestamptz NOT NULL DEFAULT now(), b text);`, n)
		case 3:
			fmt.Fprintf(&b, `CREATE TABLE %[1]s (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT '2026-01-01', v text) PARTITION BY RANGE (id);
CREATE TABLE %[1]s_p1 PARTITION OF %[1]s FOR VALUES FROM (MINVALUE) TO (100); CREATE TABLE %[1]s_p2 PARTITION OF %[1]s FOR VALUES FROM (100) TO (MAXVALUE);
CREATE INDEX ON %[1]s (updated_at, id); INSERT INTO %[1]s (id, v) SELECT g, 'v' || g FROM generate_series(1, 200) g;`, n)
		case 4:
			fmt.Fprintf(&b, `CREATE TABLE %[1]s (id bigint PRIMARY KEY, updated_at timestamptz, v text);
INSERT INTO %[1]s SELECT g, CASE WHEN g %% 50 = 0 THEN NULL ELSE '2026-01-01'::timestamptz + g * interval '1 second' END, 'v' || g FROM generate_series(1, 100) g;`, n)
		case 5:
			fmt.Fprintf(&b, `CREATE TABLE %[1]s (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT '2026-01-01', v text); CREATE INDEX ON %[1]s (updated_at, id);
CREATE TABLE copy.t%03[2]d (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, v text);`, n, i)
		}
		b.WriteString("\n")
	}
	db.Exec(t, b.String())
}

// appConfig is the pattern source of the tables of manyTables: schema app
// into schema copy of the same database.
func appConfig(t *testing.T, dir string, db *pgtest.DB) string {
	return writeConfig(t, dir, "app.yaml", fmt.Sprintf(`name: app
mode: auto
source:
  dsn: %s
  table: app.t*
  cursor: [updated_at]
sink:
  dsn: %s
  table: copy.*
`, db.URL, db.URL))
}

// sessionsOf is how many sessions the server has opened to db so far, once
// every syncd session of it has ended (a backend flushes its statistics
// when it exits); the test's own pool session flushes its own first.
func sessionsOf(t *testing.T, db *pgtest.DB) int64 {
	n, _ := statsOf(t, db)
	return n
}

// statsOf is sessionsOf with the transactions run in db so far (each
// statement outside a transaction block is one).
func statsOf(t *testing.T, db *pgtest.DB) (sessions, xacts int64) {
	t.Helper()
	ctx := context.Background()
	testutil.Eventually(t, 30*time.Second, "the syncd sessions to end", func() bool {
		return count(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'syncd'`) == 0
	})
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT pg_stat_clear_snapshot(), s.sessions, s.xact_commit + s.xact_rollback
FROM pg_stat_database s WHERE datname = current_database()`).Scan(nil, &sessions, &xacts); err != nil {
		t.Fatal(err)
	}
	return sessions, xacts
}

// validate on a pattern source opens a few sessions per database whatever
// the number of tables: 12 tables and then 48 take the same number (it
// took two per table, 24 and then 96), and its output for the first 12
// tables is what it was when each table had sessions of its own.
func TestValidateSessionsDoNotGrowWithTables(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE SCHEMA app; CREATE SCHEMA copy`)
	manyTables(t, db, 0, 12)
	dir := t.TempDir()
	cfg := appConfig(t, dir, db)
	state := filepath.Join(dir, "state.db")
	validate := func() (testutil.Result, int64) {
		before := sessionsOf(t, db)
		r := bin.Run(t, nil, "validate", "--config", cfg, "--state", state)
		return r, sessionsOf(t, db) - before
	}
	r, few := validate()
	// Exit 1: the tables without a primary key are skipped.
	if r.Code != 1 || !strings.Contains(r.Stderr, "2 tables matched by a pattern source would be skipped") {
		t.Fatalf("validate of 12 tables: %d %s", r.Code, r.Stderr)
	}
	golden := filepath.Join("testdata", "validate_many.golden")
	if os.Getenv("SYNCD_UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(golden, []byte(r.Stdout), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != string(want) {
		t.Errorf("validate's output of the 12 tables changed:\n%s\nwant:\n%s", r.Stdout, want)
	}

	manyTables(t, db, 12, 48)
	r, many := validate()
	if r.Code != 1 || !strings.Contains(r.Stderr, "8 tables matched by a pattern source would be skipped") {
		t.Fatalf("validate of 48 tables: %d %s", r.Code, r.Stderr)
	}
	if oks := strings.Count(r.Stdout, ": ok ("); oks != 40 {
		t.Errorf("validate of 48 tables: %d ok lines, want 40:\n%s", oks, r.Stdout)
	}
	// At most one session per worker and role (4 workers, source and sink
	// in one database), the expansion's and the state file's checks: a
	// constant; one more is a backend's statistics flushed late.
	if few > 12 || many > few+1 {
		t.Errorf("validate opened %d sessions for 12 tables and %d for 48, want the same few", few, many)
	}
	t.Logf("sessions: %d for 12 tables, %d for 48", few, many)
}

// `run --once --source NAME.TABLE` of a pattern source describes that
// table only: its idle run costs the same statements with 12 tables in the
// schema and with 48 (it described every table of the pattern: about 30
// statements more per table).
func TestRunOneTableOfAPatternDescribesItAlone(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE SCHEMA app; CREATE SCHEMA copy`)
	manyTables(t, db, 0, 12)
	dir := t.TempDir()
	cfg := appConfig(t, dir, db)
	state := filepath.Join(dir, "state.db")
	idle := func() int64 {
		if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state, "--source", "app.t000"); r.Code != 0 {
			t.Fatalf("run --once --source app.t000: %d %s", r.Code, r.Stderr)
		}
		_, before := statsOf(t, db)
		if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state, "--source", "app.t000"); r.Code != 0 {
			t.Fatalf("idle run --once --source app.t000: %d %s", r.Code, r.Stderr)
		}
		_, after := statsOf(t, db)
		return after - before - 1 // the first statsOf's own read
	}
	few := idle()
	if got, want := rowsText(t, db, "copy.t000"), rowsText(t, db, "app.t000"); got != want {
		t.Fatalf("copy.t000:\n%s\nwant:\n%s", got, want)
	}
	if n := count(t, db, `SELECT count(*) FROM pg_tables WHERE schemaname = 'copy'`); n != 3 { // t000 and the two made by hand
		t.Errorf("%d copies exist, want t000's and the two made by hand", n)
	}
	manyTables(t, db, 12, 48)
	many := idle()
	if many > few+2 {
		t.Errorf("an idle run of one table ran %d statements with 12 tables in the pattern and %d with 48, want the same", few, many)
	}
	t.Logf("statements of an idle run of one table: %d with 12 tables, %d with 48", few, many)
}
