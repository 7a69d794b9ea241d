package reliability

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// badCase is one bad input: the config files to write, what the single
// stderr line must name, and the exit code.
type badCase struct {
	name  string
	files map[string]string // file name -> content; "{{DSN}}" is the test database
	env   []string
	code  int
	want  []string // substrings of the one stderr line
	sink  string   // sink table that must stay as it was
}

// badSource creates the tables the bad-input cases point at.
func badSource(t *testing.T, db *pgtest.DB) {
	db.Exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, note text, doc jsonb NOT NULL DEFAULT '{}', ratio float8 NOT NULL DEFAULT 0, flag bool NOT NULL DEFAULT false)`)
	db.Exec(t, `CREATE UNIQUE INDEX ON orders (doc, id)`)
	db.Exec(t, `INSERT INTO orders (id, updated_at, note) SELECT g, now(), 'n' || g FROM generate_series(1, 50) g`)
	// A copy that lacks the note column, holding rows that must survive.
	db.Exec(t, `CREATE TABLE narrow_copy (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL)`)
	db.Exec(t, `INSERT INTO narrow_copy SELECT g, now() FROM generate_series(1, 7) g`)
	// A copy whose note column has another type.
	db.Exec(t, `CREATE TABLE typed_copy (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, note integer, doc jsonb, ratio float8, flag bool)`)
	db.Exec(t, `INSERT INTO typed_copy (id, updated_at) VALUES (1, now())`)
	// A copy with every column but no unique index on the key.
	db.Exec(t, `CREATE TABLE nokey_copy (id bigint, updated_at timestamptz, note text, doc jsonb, ratio float8, flag bool)`)
	db.Exec(t, `INSERT INTO nokey_copy (id) VALUES (1), (2)`)
}

func good(table, cursor, sinkTable, extra string) string {
	return "name: bad\nsource:\n  dsn: {{DSN}}\n  table: " + table + "\n  cursor: " + cursor + "\n" + extra +
		"sink:\n  dsn: {{DSN}}\n  table: " + sinkTable + "\n"
}

func badCases() []badCase {
	one := func(s string) map[string]string { return map[string]string{"bad.yaml": s} }
	return []badCase{
		{name: "malformed YAML", files: one("name: bad\nsource: [dsn: x\n  table: {\n"), code: 2, want: []string{"bad.yaml:", "malformed YAML"}},
		{name: "tab indentation", files: one("name: bad\nsource:\n\tdsn: x\n"), code: 2, want: []string{"bad.yaml:", "YAML"}},
		{name: "unknown key", files: one(good("public.orders", "[updated_at, id]", "public.c1", "  tabel: orders\n")), code: 2, want: []string{"bad.yaml:6", "source.tabel", "unknown key"}, sink: "public.c1"},
		{name: "unknown top-level key", files: one("sinks: {}\n" + good("public.orders", "[updated_at, id]", "public.c1", "")), code: 2, want: []string{"bad.yaml:1", "sinks", "unknown key"}, sink: "public.c1"},
		{name: "wrong type page_size", files: one(good("public.orders", "[updated_at, id]", "public.c1", "  page_size: ten\n")), code: 2, want: []string{"bad.yaml:", "source.page_size", "whole number"}, sink: "public.c1"},
		{name: "wrong type cursor scalar", files: one(good("public.orders", "{a: 1}", "public.c1", "")), code: 2, want: []string{"bad.yaml:", "source.cursor"}, sink: "public.c1"},
		{name: "wrong type lookback", files: one(good("public.orders", "[updated_at, id]", "public.c1", "  lookback: 5 apples\n")), code: 2, want: []string{"bad.yaml:", "source.lookback", "duration"}, sink: "public.c1"},
		{name: "negative page_size", files: one(good("public.orders", "[updated_at, id]", "public.c1", "  page_size: -3\n")), code: 2, want: []string{"bad.yaml:", "source.page_size"}, sink: "public.c1"},
		{name: "empty file", files: one(""), code: 2, want: []string{"bad.yaml", "empty"}},
		{name: "duplicate source names across files", files: map[string]string{
			"a.yaml": good("public.orders", "[updated_at, id]", "public.c1", ""),
			"b.yaml": good("public.orders", "[updated_at, id]", "public.c2", ""),
		}, code: 2, want: []string{"b.yaml", "a.yaml", "name", "bad"}, sink: "public.c1"},
		{name: "unset variable", files: one(strings.Replace(good("public.orders", "[updated_at, id]", "public.c1", ""), "{{DSN}}", "${SYNCD_RELIABILITY_UNSET}", 1)), code: 2, want: []string{"bad.yaml:", "source.dsn", "SYNCD_RELIABILITY_UNSET"}, sink: "public.c1"},
		{name: "table does not exist", files: one(good("public.nope", "[updated_at, id]", "public.c1", "")), code: 2, want: []string{"bad.yaml:", "source.table", "nope"}, sink: "public.c1"},
		{name: "table case differs", files: one(good("public.Orders", "[updated_at, id]", "public.c1", "")), code: 2, want: []string{"bad.yaml:", "source.table", "Orders"}, sink: "public.c1"},
		{name: "column does not exist", files: one(good("public.orders", "[updated_at, id]", "public.c1", "  columns: [id, updated_at, nope]\n")), code: 2, want: []string{"bad.yaml:", "source.columns", "nope"}, sink: "public.c1"},
		{name: "cursor column does not exist", files: one(good("public.orders", "[changed_at, id]", "public.c1", "")), code: 2, want: []string{"bad.yaml:", "source.cursor", "changed_at"}, sink: "public.c1"},
		{name: "key does not exist", files: one(good("public.orders", "[updated_at, id]", "public.c1", "") + "  key: [order_id]\n"), code: 2, want: []string{"bad.yaml:", "sink.key", "order_id"}, sink: "public.c1"},
		{name: "cursor last column not unique", files: one(good("public.orders", "[id, updated_at]", "public.c1", "")), code: 2, want: []string{"bad.yaml:", "source.cursor", "updated_at", "unique"}, sink: "public.c1"},
		{name: "cursor of one non-unique column", files: one(good("public.orders", "[updated_at]", "public.c1", "")), code: 2, want: []string{"bad.yaml:", "source.cursor", "unique"}, sink: "public.c1"},
		{name: "cursor type jsonb", files: one(good("public.orders", "[doc, id]", "public.c1", "")), code: 2, want: []string{"bad.yaml:", "source.cursor", "jsonb"}, sink: "public.c1"},
		{name: "cursor type float8", files: one(good("public.orders", "[ratio, id]", "public.c1", "")), code: 2, want: []string{"bad.yaml:", "source.cursor", "double precision"}, sink: "public.c1"},
		{name: "cursor type bool", files: one(good("public.orders", "[flag, id]", "public.c1", "")), code: 2, want: []string{"bad.yaml:", "source.cursor", "boolean"}, sink: "public.c1"},
		{name: "sink columns do not match", files: one(good("public.orders", "[updated_at, id]", "public.narrow_copy", "")), code: 2, want: []string{"bad.yaml:", "sink.table", "note"}, sink: "public.narrow_copy"},
		{name: "sink column of another type", files: one(good("public.orders", "[updated_at, id]", "public.typed_copy", "")), code: 2, want: []string{"bad.yaml:", "sink.table", "note", "integer", "text"}, sink: "public.typed_copy"},
		{name: "sink has no unique key", files: one(good("public.orders", "[updated_at, id]", "public.nokey_copy", "")), code: 2, want: []string{"bad.yaml:", "sink.key", "unique"}, sink: "public.nokey_copy"},
		{name: "sink table unparsable", files: one(good("public.orders", "[updated_at, id]", `'"unterminated'`, "")), code: 2, want: []string{"bad.yaml:", "sink.table"}},
		{name: "dsn_file missing", files: one(strings.Replace(good("public.orders", "[updated_at, id]", "public.c1", ""), "dsn: {{DSN}}", "dsn_file: /nonexistent/dsn", 1)), code: 2, want: []string{"bad.yaml:", "source.dsn_file", "/nonexistent/dsn"}, sink: "public.c1"},
		{name: "dsn and dsn_file both", files: one(strings.Replace(good("public.orders", "[updated_at, id]", "public.c1", ""), "dsn: {{DSN}}\n", "dsn: {{DSN}}\n  dsn_file: /etc/hostname\n", 1)), code: 2, want: []string{"bad.yaml:", "dsn_file"}, sink: "public.c1"},
	}
}

// TestBadInput runs each bad input through `run --once` and `validate`:
// exit 2, one stderr line naming the file and key, the sink table as it
// was (absent or same rows), and no state file.
func TestBadInput(t *testing.T) {
	db := pgtest.NewDB(t)
	badSource(t, db)
	for _, tc := range badCases() {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfgDir := filepath.Join(dir, "conf")
			if err := os.Mkdir(cfgDir, 0o700); err != nil {
				t.Fatal(err)
			}
			for name, body := range tc.files {
				writeFile(t, cfgDir, name, strings.ReplaceAll(body, "{{DSN}}", db.URL))
			}
			cfg := cfgDir
			if len(tc.files) == 1 {
				for name := range tc.files {
					cfg = filepath.Join(cfgDir, name)
				}
			}
			before := int64(-1)
			if tc.sink != "" {
				before = count(t, db, tc.sink)
			}
			state := filepath.Join(dir, "state.db")
			for _, args := range [][]string{
				{"run", "--once", "--config", cfg, "--state", state},
				{"validate", "--config", cfg},
			} {
				r := bin.Run(t, tc.env, args...)
				if r.Code != tc.code {
					t.Fatalf("%s: want exit %d: %s", args[0], tc.code, r)
				}
				ls := lines(r.Stderr)
				if len(ls) != 1 {
					t.Fatalf("%s: want one line on stderr, got %d:\n%s", args[0], len(ls), r.Stderr)
				}
				for _, w := range tc.want {
					if !strings.Contains(ls[0], w) {
						t.Errorf("%s: stderr %q does not name %q", args[0], ls[0], w)
					}
				}
				if r.Stdout != "" && args[0] == "run" {
					t.Errorf("run printed to stdout: %q", r.Stdout)
				}
			}
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Errorf("the state file was created (%v)", err)
			}
			if tc.sink != "" {
				if after := count(t, db, tc.sink); after != before {
					t.Errorf("sink table %s had %d rows, now %d", tc.sink, before, after)
				}
			}
		})
	}
	// No case created any other table.
	tables := column[string](t, db, `SELECT relname FROM pg_class WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace ORDER BY 1`)
	if got := strings.Join(tables, ","); got != "narrow_copy,nokey_copy,orders,typed_copy" {
		t.Errorf("tables after the bad inputs: %s; want only narrow_copy, nokey_copy, orders, typed_copy", got)
	}
}
