package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/ops"
)

// schemaRows returns each row of table as text, key first, columns cols,
// ordered by id; NULL is shown as ∅. A table without one of cols gives nil.
func schemaRows(t *testing.T, pool *pgxpool.Pool, table string, cols []string) []string {
	t.Helper()
	var have bool
	if err := pool.QueryRow(context.Background(), `SELECT count(*) = cardinality($2::text[]) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = ANY($2) AND NOT attisdropped`, table, cols).Scan(&have); err != nil {
		t.Fatal(err)
	}
	if !have {
		return nil
	}
	var parts []string
	for _, c := range cols {
		parts = append(parts, fmt.Sprintf("coalesce(%s::text, '∅')", c))
	}
	rows, err := pool.Query(context.Background(), "SELECT concat_ws('|', "+strings.Join(parts, ", ")+") FROM "+table+" ORDER BY id")
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return out
}

// copyColumns lists a table's columns and types.
func copyColumns(t *testing.T, pool *pgxpool.Pool, table string) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var n, ty string
		if err := rows.Scan(&n, &ty); err != nil {
			t.Fatal(err)
		}
		out[n] = ty
	}
	return out
}

// TestSchemaChangesWhileDaemonRuns applies each kind of schema change to
// its own source table while one daemon syncs them all, and checks what
// docs/SCHEMA-CHANGES.md promises: under schema_changes: evolve an added
// column (with a default, or filled by UPDATE in the migration) reaches
// every row of the copy by one backfill and no resync; a dropped column is
// kept with NULL in new rows and said once; widened types are widened in
// the copy; a narrowing, a rename and a primary key change stop only their
// source with the named change and its fix; schema_changes: fail stops at
// an added column and leaves the copy as it was; a source without a change
// keeps syncing meanwhile.
func TestSchemaChangesWhileDaemonRuns(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t)
	const n = 2000
	names := []string{"add_default", "add_update", "drop", "widen", "narrow", "rename", "key", "fail", "bystander"}
	dir := t.TempDir()
	cfgDir := filepath.Join(dir, "conf")
	if err := os.Mkdir(cfgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		_, err := db.Pool.Exec(ctx, fmt.Sprintf(`
CREATE TABLE %[1]s_src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name varchar(50) NOT NULL, qty integer NOT NULL, price numeric(10,2) NOT NULL);
INSERT INTO %[1]s_src SELECT i, now() - interval '1 hour' + i * interval '1 s', 'name-' || i, i, i / 100.0 FROM generate_series(1, %[2]d) i`, name, n))
		if err != nil {
			t.Fatal(err)
		}
		extra := ""
		if name == "fail" {
			extra = "schema_changes: fail\n"
		}
		writeFile(t, cfgDir, name+".yaml", tableConfig{Name: name, SourceDSN: db.URL, Table: "public." + name + "_src",
			Cursor: "[updated_at, id]", SinkDSN: db.URL, SinkTable: "public." + name + "_copy", PageSize: 300,
		}.YAML()+"schedule: \"@every 1s\"\n"+extra)
	}
	state := filepath.Join(dir, "state.db")
	d := startDaemon(t, cfgDir, state, nil)
	cols := []string{"id", "updated_at", "name", "qty", "price"}
	waitEqual := func(name string, cols []string) {
		t.Helper()
		d.p.Eventually(t, 60*time.Second, fmt.Sprintf("%s: the copy equal to the source on %v", name, cols), func() bool {
			var exists bool
			_ = db.Pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", name+"_copy").Scan(&exists)
			if !exists {
				return false
			}
			dst := schemaRows(t, db.Pool, name+"_copy", cols)
			return dst != nil && slices.Equal(schemaRows(t, db.Pool, name+"_src", cols), dst)
		})
	}
	for _, name := range names {
		waitEqual(name, cols)
	}
	sourceStatus := func(name string) ops.SourceStatus {
		t.Helper()
		_, body := d.get(t, "/status")
		var st ops.Status
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("status: %v: %s", err, body)
		}
		for _, s := range st.Sources {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("no source %s in status", name)
		return ops.SourceStatus{}
	}
	before := map[string]ops.SourceStatus{}
	for _, name := range names {
		before[name] = sourceStatus(name)
	}

	exec := func(q string) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The changes, as a team's migrations would make them.
	exec(`ALTER TABLE add_default_src ADD COLUMN region text NOT NULL DEFAULT 'eu', ADD COLUMN score integer DEFAULT (random() * 1000)::integer`)
	exec(`BEGIN; ALTER TABLE add_update_src ADD COLUMN note text; UPDATE add_update_src SET note = 'n' || id; COMMIT`)
	exec(`ALTER TABLE drop_src DROP COLUMN qty`)
	exec(`ALTER TABLE widen_src ALTER COLUMN name TYPE varchar(200), ALTER COLUMN qty TYPE bigint, ALTER COLUMN price TYPE numeric(12,2)`)
	exec(`ALTER TABLE narrow_src ALTER COLUMN name TYPE varchar(20)`)
	exec(`ALTER TABLE rename_src RENAME COLUMN name TO title`)
	exec(`CREATE UNIQUE INDEX ON key_src (id); ALTER TABLE key_src DROP CONSTRAINT key_src_pkey, ADD PRIMARY KEY (id, qty)`)
	exec(`ALTER TABLE fail_src ADD COLUMN extra integer DEFAULT 1`)
	// Later writes: new rows, and updates that bump updated_at.
	for _, name := range []string{"add_default", "add_update", "widen", "bystander"} {
		exec(fmt.Sprintf(`INSERT INTO %[1]s_src (id, updated_at, name, qty, price) SELECT i, now(), 'new-' || i, i, 1.5 FROM generate_series(%[2]d, %[2]d + 49) i`, name, n+1))
	}
	exec(fmt.Sprintf(`INSERT INTO drop_src (id, updated_at, name, price) SELECT i, now(), 'new-' || i, 1.5 FROM generate_series(%[1]d, %[1]d + 49) i`, n+1))
	exec(`UPDATE widen_src SET name = repeat('w', 150), qty = 1099511627776, price = 1234567890.12, updated_at = now() WHERE id % 100 = 0`)

	waitEqual("add_default", append(slices.Clone(cols), "region", "score"))
	waitEqual("add_update", append(slices.Clone(cols), "note"))
	exec(`UPDATE add_update_src SET note = 'm' || id, updated_at = now() WHERE id % 10 = 0`)
	waitEqual("add_update", append(slices.Clone(cols), "note"))
	waitEqual("drop", []string{"id", "updated_at", "name", "price"})
	waitEqual("widen", cols)
	waitEqual("bystander", cols)

	// One backfill per added column set, over the table once; no resync:
	// the watermark only moved forward and the rows read are the new ones.
	for _, name := range []string{"add_default", "add_update"} {
		s := sourceStatus(name)
		// The rows inserted meanwhile may be read too.
		if s.LastBackfill == nil || s.LastBackfill.Rows < n || s.LastBackfill.Rows > n+50 || s.Backfill != nil {
			t.Errorf("%s: backfill %+v (unfinished %+v), want one finished over %d to %d rows", name, s.LastBackfill, s.Backfill, n, n+50)
		}
		if got := d.out.Count("backfill done", "source", name); got != 1 {
			t.Errorf("%s: %d backfills done, want 1", name, got)
		}
		if s.RowsRead-before[name].RowsRead >= n {
			t.Errorf("%s: %d rows read since the change: a resync, not a backfill", name, s.RowsRead-before[name].RowsRead)
		}
		if compareCursor(t, s.Cursor, before[name].Cursor) <= 0 {
			t.Errorf("%s: watermark %v did not move forward from %v", name, s.Cursor, before[name].Cursor)
		}
	}
	// The dropped column: kept with its values, NULL in new rows, said once.
	var kept, nulls int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE qty = id), count(*) FILTER (WHERE qty IS NULL) FROM drop_copy`).Scan(&kept, &nulls); err != nil {
		t.Fatal(err)
	}
	if kept != n || nulls != 50 {
		t.Errorf("drop_copy: %d rows keep qty, %d have NULL; want %d and 50", kept, nulls, n)
	}
	if s := sourceStatus("drop"); !slices.Equal(s.DroppedColumns, []string{"qty"}) {
		t.Errorf("status of drop: dropped columns %v, want [qty]", s.DroppedColumns)
	}
	if got := d.out.Count("", "source", "drop", "change", "column_dropped"); got != 1 {
		t.Errorf("the drop was logged %d times, want once", got)
	}
	// Widened in the copy.
	if got := copyColumns(t, db.Pool, "widen_copy"); got["name"] != "character varying(200)" || got["qty"] != "bigint" || got["price"] != "numeric(12,2)" {
		t.Errorf("widen_copy types %v", got)
	}
	// Refused changes stop only their source, naming the change and the fix.
	want := map[string][]string{
		"narrow": {`column "name" changed type from character varying(50) to character varying(20)`, `ALTER TABLE "public"."narrow_copy" ALTER COLUMN "name" TYPE character varying(20)`},
		"rename": {`column "name" was renamed to "title"`, `ALTER TABLE "public"."rename_copy" RENAME COLUMN "name" TO "title"`},
		"key":    {"the primary key of public.key_src changed from (id) to (id, qty)", "syncd resync --source key --from-start"},
		"fail":   {`column "extra" (integer) was added`, "schema_changes is fail", "set schema_changes: evolve"},
	}
	for name, parts := range want {
		testutil.EventuallyState(t, 60*time.Second, name+": a failed run naming "+fmt.Sprint(parts), func() (bool, string) {
			s := sourceStatus(name)
			state := fmt.Sprintf("status %q %q", s.LastStatus, s.LastError)
			if s.LastStatus != "failed" || strings.Contains(s.LastError, "\n") {
				return false, state
			}
			for _, p := range parts {
				if !strings.Contains(s.LastError, p) {
					return false, state
				}
			}
			return true, state
		})
	}
	if got := copyColumns(t, db.Pool, "fail_copy"); len(got) != len(cols) {
		t.Errorf("schema_changes: fail altered the copy: %v", got)
	}
	if got := copyColumns(t, db.Pool, "rename_copy"); got["title"] != "" {
		t.Errorf("a refused rename altered the copy: %v", got)
	}
	// The bystander still syncs after the others stopped.
	exec(`UPDATE bystander_src SET name = 'late', updated_at = now() WHERE id <= 10`)
	waitEqual("bystander", cols)
	m := testutil.Scrape(t, d.addr)
	for series, want := range map[string]float64{
		`syncd_schema_changes_total{change="column_added",source="add_default"}`: 2,
		`syncd_schema_changes_total{change="column_dropped",source="drop"}`:      1,
		`syncd_schema_changes_total{change="type_widened",source="widen"}`:       3,
	} {
		if got, ok := m.Series[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	// The refused rename is counted on every tick that meets it: at least
	// once (the series itself exists from the start, at 0).
	if n, ok := m.Series[`syncd_schema_changes_total{change="column_renamed",source="rename"}`]; !ok || n < 1 {
		t.Errorf("column_renamed of source rename counted %v times (present %v), want at least 1", n, ok)
	}
	d.stop(t)
}

// TestSchemaChangesValidateAndRunOnce: after a column is added to and
// another dropped from the source, validate names both differences and
// still says ok; run --once under schema_changes: fail exits 1 naming the
// change and the key, with the copy untouched; under evolve it adds the
// column, backfills it into every existing row without re-reading them,
// and the copy equals the source.
func TestSchemaChangesValidateAndRunOnce(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.Pool.Exec(ctx, `
CREATE TABLE o_src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text NOT NULL, gone integer NOT NULL);
INSERT INTO o_src SELECT i, now() - interval '1 hour' + i * interval '1 s', 'n' || i, i FROM generate_series(1, 700) i`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	base := tableConfig{Name: "o", SourceDSN: db.URL, Table: "public.o_src", Cursor: "[updated_at, id]",
		SinkDSN: db.URL, SinkTable: "public.o_copy", PageSize: 200}.YAML()
	cfg := writeFile(t, dir, "o.yaml", base)
	state := filepath.Join(dir, "state.db")
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("first run: %s", r)
	}
	if _, err := db.Pool.Exec(ctx, `ALTER TABLE o_src ADD COLUMN tier text NOT NULL DEFAULT 'gold', DROP COLUMN gone`); err != nil {
		t.Fatal(err)
	}
	// validate reads the state file the runs write: a column is "added"
	// only to a copy syncd has followed.
	r := bin.Run(t, nil, "validate", "--config", cfg, "--state", state)
	if r.Code != 0 || !strings.Contains(r.Stdout, `column "tier" (text) of the source is not in the copy public.o_copy: the next run adds it and backfills it`) ||
		!strings.Contains(r.Stdout, `column "gone" of the copy public.o_copy is not in the source public.o_src (dropped there?)`) {
		t.Fatalf("validate: %s", r)
	}
	failCfg := writeFile(t, dir, "o.yaml", base+"schema_changes: fail\n")
	r = bin.Run(t, nil, "validate", "--config", failCfg, "--state", state)
	if r.Code != 2 || !strings.Contains(r.Stderr, failCfg+":"+strconv.Itoa(strings.Count(base, "\n")+1)+`: schema_changes: source o: column "tier" (text) of the source is not in the copy public.o_copy; the copy is not changed because schema_changes is fail`) ||
		strings.Count(strings.TrimSpace(r.Stderr), "\n") > 0 {
		t.Fatalf("validate under fail: %s", r)
	}
	// The run stops this source alone: exit 1, one line naming the change,
	// and the state says the source failed.
	r = bin.Run(t, nil, "run", "--once", "--config", failCfg, "--state", state)
	if last := lines(r.Stderr); r.Code != 1 || !strings.Contains(last[len(last)-1], `column "tier" (text) was added`) || !strings.Contains(last[len(last)-1], "schema_changes is fail") {
		t.Fatalf("run under fail: %s", r)
	}
	for _, s := range status(t, failCfg, state).Sources {
		if s.Name == "o" && s.LastStatus != "failed" {
			t.Fatalf("status after the refused run: %q, want failed", s.LastStatus)
		}
	}
	if got := copyColumns(t, db.Pool, "o_copy"); len(got) != 4 || got["tier"] != "" {
		t.Fatalf("schema_changes: fail altered the copy: %v", got)
	}
	cfg = writeFile(t, dir, "o.yaml", base)
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("run under evolve: %s", r)
	}
	cols := []string{"id", "updated_at", "name", "tier"}
	if src, dst := schemaRows(t, db.Pool, "o_src", cols), schemaRows(t, db.Pool, "o_copy", cols); len(src) != 700 || !slices.Equal(src, dst) {
		t.Fatalf("copy differs from the source on %v: %d source rows, %d copy rows", cols, len(src), len(dst))
	}
	for _, s := range status(t, cfg, state).Sources {
		if s.LastBackfill == nil || s.LastBackfill.Rows != 700 || s.RowsLastRun > 10 || !slices.Equal(s.DroppedColumns, []string{"gone"}) {
			t.Fatalf("status after the evolve run: backfill %+v, rows last run %d, dropped %v", s.LastBackfill, s.RowsLastRun, s.DroppedColumns)
		}
	}
}

// TestSchemaRefusedChangeNamesSourceOnce: a type change the copy cannot
// follow (integer narrowed to smallint) stops run --once with exit 1 and one
// error line that names the source once, the change and the ALTER to run.
func TestSchemaRefusedChangeNamesSourceOnce(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.Pool.Exec(ctx, `
CREATE TABLE n_src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, v integer NOT NULL);
CREATE INDEX ON n_src (updated_at, id); -- else the run also warns of the missing cursor index
INSERT INTO n_src SELECT i, now() - interval '1 hour' + i * interval '1 s', i FROM generate_series(1, 50) i`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeFile(t, dir, "n.yaml", tableConfig{Name: "n", SourceDSN: db.URL, Table: "public.n_src", Cursor: "[updated_at, id]",
		SinkDSN: db.URL, SinkTable: "public.n_copy", PageSize: 20}.YAML())
	state := filepath.Join(dir, "state.db")
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("first run: %s", r)
	}
	if _, err := db.Pool.Exec(ctx, `ALTER TABLE n_src ALTER COLUMN v TYPE smallint`); err != nil {
		t.Fatal(err)
	}
	r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state)
	want := `syncd run: source n: source schema changed: column "v" changed type from integer to smallint`
	if r.Code != 1 || !strings.HasPrefix(r.Stderr, want) || strings.Count(r.Stderr, "source n:") != 1 ||
		!strings.Contains(r.Stderr, `ALTER TABLE "public"."n_copy" ALTER COLUMN "v" TYPE smallint`) ||
		strings.Count(strings.TrimSpace(r.Stderr), "\n") > 0 {
		t.Fatalf("run after a narrowing: want exit 1 and one line starting %q, got %s", want, r)
	}
	if got := copyColumns(t, db.Pool, "n_copy"); got["v"] != "integer" {
		t.Fatalf("the refused change altered the copy: %v", got)
	}
}
