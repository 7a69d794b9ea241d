package reliability

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// TestHostileIdentifiers syncs a table whose schema, table and column names
// hold quotes, semicolons, spaces, upper case, non-ASCII and SQL comments.
// They must be quoted everywhere: the copy equals the source and the canary
// table the names try to drop still exists.
func TestHostileIdentifiers(t *testing.T) {
	db := pgtest.NewDB(t)
	const (
		schema = `Sales Ünï "co"; DROP TABLE canary; --`
		table  = `Order "Lines"; DROP TABLE canary; --`
		sinkT  = `Copy.Of "Lines"; DROP TABLE canary; --`
		id     = `Id "pk"; DROP TABLE canary; --`
		ts     = `Updated At ñ`
		note   = `note'); DROP TABLE canary; --`
		upper  = `UPPER\tCase` // a backslash and a t, not a tab
	)
	q := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	db.Exec(t, `CREATE TABLE canary (x int)`)
	db.Exec(t, `CREATE SCHEMA `+q(schema))
	db.Exec(t, `CREATE TABLE `+q(schema)+`.`+q(table)+` (`+q(id)+` bigint PRIMARY KEY, `+q(ts)+` timestamptz NOT NULL, `+q(note)+` text, `+q(upper)+` int)`)
	db.Exec(t, `CREATE UNIQUE INDEX ON `+q(schema)+`.`+q(table)+` (`+q(ts)+`, `+q(id)+`)`)
	db.Exec(t, `INSERT INTO `+q(schema)+`.`+q(table)+` SELECT g, timestamptz '2026-01-01' + (g/7) * interval '1 us', $1 || g, g FROM generate_series(1, 1000) g`, "'; DROP TABLE canary; -- \"")

	// In a config, a table part with a dot or a quote is double-quoted
	// with "" for a quote, like SQL.
	dir := t.TempDir()
	cfg := writeFile(t, dir, "hostile.yaml", tableConfig{
		Name: "hostile", SourceDSN: db.URL, Table: q(schema) + "." + q(table),
		Cursor: "[" + yamlQuote(ts) + ", " + yamlQuote(id) + "]", SinkDSN: db.URL,
		SinkTable: q(schema) + "." + q(sinkT), PageSize: 97,
		Extra: "  columns: [" + strings.Join([]string{yamlQuote(id), yamlQuote(ts), yamlQuote(note), yamlQuote(upper)}, ", ") + "]\n",
	}.YAML())
	state := filepath.Join(dir, "state.db")
	for _, args := range [][]string{
		{"validate", "--config", cfg},
		{"run", "--once", "--config", cfg, "--state", state},
	} {
		if r := bin.Run(t, nil, args...); r.Code != 0 {
			t.Fatalf("%s: %s", args[0], r)
		}
	}
	db.Exec(t, `UPDATE `+q(schema)+`.`+q(table)+` SET `+q(ts)+` = now(), `+q(note)+` = 'changed "; --' WHERE `+q(id)+` % 10 = 0`)
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("second run: %s", r)
	}
	if r := bin.Run(t, nil, "resync", "--config", cfg, "--state", state, "--source", "hostile", "--from-start"); r.Code != 0 {
		t.Fatalf("resync: %s", r)
	}
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("run after resync: %s", r)
	}
	missing, extra := diff(t, db, q(schema)+"."+q(table), q(schema)+"."+q(sinkT))
	if missing != 0 || extra != 0 {
		t.Fatalf("copy differs: %d missing, %d extra", missing, extra)
	}
	if n := count(t, db, q(schema)+"."+q(sinkT)); n != 1000 {
		t.Fatalf("copy has %d rows, want 1000", n)
	}
	if n := count(t, db, "public.canary"); n != 0 {
		t.Fatalf("canary table is gone or changed (count %d): a name was executed as SQL", n)
	}
	cols := column[string](t, db, `SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 ORDER BY attnum`, q(schema)+"."+q(sinkT))
	if got, want := strings.Join(cols, "|"), strings.Join([]string{id, ts, note, upper}, "|"); got != want {
		t.Fatalf("copy columns %q, want %q", got, want)
	}
}
