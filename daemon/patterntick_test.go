package daemon_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/source"
)

// maxIdleMatchRoundTrips bounds what the tick of a pattern source whose
// catalog did not change costs, whatever the number of its tables: the
// tables' catalog fingerprints in one query (prepared on a session that
// had not run it yet) and the reset of the pooled session. It described
// every table: about 30 statements a table.
const maxIdleMatchRoundTrips = 3

// A pattern source of 50 unchanged tables ticks in a few round trips on
// a pooled session and describes no table; each kind of DDL between two
// ticks is picked up by the next one: a new table, a dropped one, a
// renamed one, one moved out of the schema and one moved in, one that
// gains its cursor column, one that gains a primary key, one that loses
// its cursor column. The new tables' copies equal them row by row.
func TestPatternTickOfUnchangedCatalogIsCheapAndSeesDDL(t *testing.T) {
	f := newFixture(t)
	var ddl, entries strings.Builder
	ddl.WriteString("CREATE SCHEMA app; CREATE SCHEMA copy; CREATE SCHEMA other;\n")
	const n = 50
	for i := range n {
		fmt.Fprintf(&ddl, `CREATE TABLE app.t%03[1]d (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), v text);
INSERT INTO app.t%03[1]d (id, v) SELECT g, 'v' || g FROM generate_series(1, 3) g;
`, i)
		// The tables' own runs tick far later than the pattern's match:
		// each hour of the test clock is one tick of the match alone.
		fmt.Fprintf(&entries, "  t%03d: {schedule: \"@every 1000h\"}\n", i)
	}
	ddl.WriteString(`CREATE TABLE app.nocursor (id bigint PRIMARY KEY, v text);
CREATE TABLE app.nokey (id bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), v text);
CREATE TABLE other.moved (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), v text);
INSERT INTO app.nocursor SELECT g, 'n' || g FROM generate_series(1, 4) g;
INSERT INTO app.nokey (id, v) SELECT g, 'k' || g FROM generate_series(1, 5) g;
INSERT INTO other.moved (id, v) SELECT g, 'm' || g FROM generate_series(1, 6) g`)
	f.db.Exec(t, ddl.String())
	path := filepath.Join(f.dir, "app.yaml")
	writeFile(t, path, fmt.Sprintf(`name: app
schedule: "@every 1h"
source:
  dsn: %s
  table: app.*
  cursor: [updated_at, id]
sink:
  dsn: %s
  table: copy.*
tables:
%s`, f.dsn(), f.dsn(), entries.String()))
	var ctr pgutil.Counter
	clock := newFakeClock()
	d := startDaemonCtx(t, pgutil.WithCounter(context.Background(), &ctr), path, func(o *daemon.Options) {
		o.Clock = clock
		o.Expand = source.Expand
	})
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("app.t%03d", i)
	}
	awaitRuns(t, d, 1, names...) // the first loads, at the first match
	series := func(key string) float64 { return testutil.Scrape(t, d.addr).Series[key] }
	const (
		unchanged = `syncd_pattern_matches_total{catalog="unchanged",source="app"}`
		changed   = `syncd_pattern_matches_total{catalog="changed",source="app"}`
		described = `syncd_pattern_tables_described_total{source="app"}`
	)
	if got := series(described); got != n+2 {
		t.Fatalf("the first match described %v tables, want %d", got, n+2)
	}
	// tick moves the clock to the match's next tick and waits for it.
	tick := func(what string) {
		t.Helper()
		before := series(unchanged) + series(changed)
		clock.advance(t, time.Hour)
		testutil.Eventually(t, 30*time.Second, "the pattern's tick after "+what, func() bool {
			return series(unchanged)+series(changed) > before
		})
	}

	before := ctr.Snapshot()
	tick("nothing")
	got := ctr.Snapshot().Since(before)
	if series(unchanged) != 1 || series(described) != n+2 {
		t.Errorf("the idle tick counted %v unchanged matches and %v tables described in all; want 1 and %d", series(unchanged), series(described), n+2)
	}
	if got.Connects != 0 || got.RoundTrips > maxIdleMatchRoundTrips {
		t.Errorf("the idle tick of %d tables opened %d sessions and took %d round trips; want 0 and at most %d:\n%s",
			n, got.Connects, got.RoundTrips, maxIdleMatchRoundTrips, strings.Join(got.Statements, "\n"))
	}
	t.Logf("idle tick of %d tables: %d round trips %q", n, got.RoundTrips, got.Statements)

	for _, step := range []struct {
		ddl       string
		described int
		copyOf    string // a table whose copy must appear and equal it
		gone      string // a source that must stop
	}{
		{ddl: `CREATE TABLE app.fresh (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), v text);
INSERT INTO app.fresh (id, v) SELECT g, 'f' || g FROM generate_series(1, 7) g`, described: 1, copyOf: "fresh"},
		{ddl: `DROP TABLE app.t001`, gone: "app.t001"},
		{ddl: `ALTER TABLE app.t002 RENAME TO renamed`, described: 1, copyOf: "renamed", gone: "app.t002"},
		{ddl: `ALTER TABLE app.t003 SET SCHEMA other`, gone: "app.t003"},
		{ddl: `ALTER TABLE other.moved SET SCHEMA app`, described: 1, copyOf: "moved"},
		{ddl: `ALTER TABLE app.nocursor ADD COLUMN updated_at timestamptz NOT NULL DEFAULT clock_timestamp()`, described: 1, copyOf: "nocursor"},
		{ddl: `ALTER TABLE app.nokey ADD PRIMARY KEY (id)`, described: 1, copyOf: "nokey"},
		{ddl: `ALTER TABLE app.t004 DROP COLUMN updated_at`, described: 1, gone: "app.t004"},
	} {
		was := series(described)
		f.db.Exec(t, step.ddl)
		tick(step.ddl)
		if got := series(described) - was; got != float64(step.described) {
			t.Errorf("after %s the tick described %v tables, want %d", step.ddl, got, step.described)
		}
		if step.copyOf != "" {
			src, dst := "app."+step.copyOf, "copy."+step.copyOf
			testutil.Eventually(t, 30*time.Second, dst+" equal to "+src+" after "+step.ddl, func() bool { return f.diff(t, src, dst) == 0 })
			f.requireEqual(t, src, dst)
		}
		if step.gone != "" && !d.logs.Contains(`"removed":["`+step.gone+`"]`) {
			t.Errorf("after %s no log line says the pattern removed %s", step.ddl, step.gone)
		}
	}
	if got := series(`syncd_pattern_tables{source="app",state="synced"}`); got != n+1 {
		t.Errorf("syncd_pattern_tables{state=synced} is %v, want %d", got, n+1)
	}
	if got := series(`syncd_pattern_tables{source="app",state="skipped"}`); got != 1 {
		t.Errorf("syncd_pattern_tables{state=skipped} is %v, want 1 (t004, without its cursor column)", got)
	}
}
