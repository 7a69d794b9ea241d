package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/cli"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// fleetTables is how many tables the fleet's pattern source matches.
const fleetTables = 60

// A fleet: replicas started with the same configuration, each with its own
// state file, share the sources by the run lock and the sink's record.
// Three daemons run 60 sources under writes; one is killed with SIGKILL,
// a fourth is added, two are stopped. Every copy ends equal to its source
// row by row, the sources of the killed and the stopped replicas were
// taken over, and the record the sink kept of each page's writer (a
// statement trigger on every copy) proves that no two sessions ever
// applied pages of one source at once: every page was applied by a
// session holding the source's run lock, and in the order the pages were
// applied (a sequence taken in each page's transaction) the pages of each
// session are contiguous.
func TestFleetSharesSources(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE SCHEMA src; CREATE SCHEMA copy`)
	db.Exec(t, `CREATE SEQUENCE page_seq`)
	db.Exec(t, `CREATE TABLE page_log (copy text, seq bigint, txid bigint, pid int, backend_start timestamptz, stage oid, writer text, held boolean)`)
	// The record of each page's writer: the backend, its session, the
	// run's staging table (each run creates its own: a daemon's sessions
	// are pooled, and a session lent to a later run has had its temporary
	// tables discarded), the replica the sink's catalog names as the
	// copy's claimer, and whether the backend holds the source's run lock
	// (runlock.Key).
	db.Exec(t, `CREATE FUNCTION log_page() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  k bigint := hashtextextended('syncd:p.' || TG_TABLE_NAME || ':copy.' || TG_TABLE_NAME, 0);
BEGIN
  INSERT INTO public.page_log (copy, seq, txid, pid, backend_start, stage, writer, held)
  SELECT TG_TABLE_NAME, nextval('public.page_seq'), txid_current(), pg_backend_pid(),
    (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()),
    (SELECT c.oid FROM pg_class c WHERE c.relname = 'syncd_stage' AND c.relnamespace = pg_my_temp_schema()),
    (SELECT writer FROM syncd.copies WHERE copy_table = 'copy.' || TG_TABLE_NAME),
    EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = pg_backend_pid() AND l.locktype = 'advisory' AND l.granted
      AND l.objsubid = 1 AND l.classid::bigint = (k >> 32) & 4294967295 AND l.objid::bigint = k & 4294967295);
  RETURN NULL;
END $$`)
	names := make([]string, fleetTables)
	for i := range names {
		n := fmt.Sprintf("t%02d", i+1)
		names[i] = n
		db.Exec(t, fmt.Sprintf(`CREATE TABLE src.%[1]s (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), v text);
CREATE INDEX ON src.%[1]s (updated_at, id);
INSERT INTO src.%[1]s (id, v) SELECT g, 'v' || g FROM generate_series(1, 20) g;
CREATE TABLE copy.%[1]s (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, v text);
CREATE TRIGGER log_page AFTER INSERT OR UPDATE OR DELETE ON copy.%[1]s FOR EACH STATEMENT EXECUTE FUNCTION public.log_page()`, n))
	}
	dir := t.TempDir()
	cfg := writeFile(t, dir, "fleet.yaml", fmt.Sprintf(`name: p
schedule: "@every 1s"
source:
  dsn: %s
  table: src.t*
  cursor: [updated_at, id]
  page_size: 10
  lookback: 1s
sink:
  dsn: %s
  table: copy.*
`, db.URL, db.URL))

	// The writes: an update of a random row and an insert, in a random
	// table, until stopWrites.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		next := make([]int, fleetTables)
		for i := range next {
			next[i] = 21
		}
		for ctx.Err() == nil {
			i := rand.IntN(fleetTables)
			_, _ = db.Pool.Exec(ctx, `UPDATE src.`+names[i]+` SET v = v || '+', updated_at = clock_timestamp() WHERE id = $1`, rand.IntN(next[i]-1)+1)
			if _, err := db.Pool.Exec(ctx, `INSERT INTO src.`+names[i]+` (id, v) VALUES ($1, 'new')`, next[i]); err == nil {
				next[i]++
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	stopWrites := sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(stopWrites)

	replicas := map[string]*daemon{}
	writerOf := map[string]string{} // catalog writer -> replica
	startReplica := func(name string) *daemon {
		d := startDaemon(t, cfg, filepath.Join(dir, name+".db"), nil)
		replicas[name] = d
		writerOf["pid "+strconv.Itoa(d.p.Pid())] = name
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("replica %s:\n%s", name, d.out)
			}
		})
		return d
	}
	// claimedBy counts the copies whose sink record names each replica as
	// its last claimer.
	claimedBy := func() map[string]int {
		out := map[string]int{}
		for _, w := range column[string](t, db, `SELECT writer FROM syncd.copies`) {
			out[replicaOf(writerOf, w)]++
		}
		return out
	}
	copies := func() int64 { return count(t, db, "syncd.copies") }

	// pagesBy counts the pages each replica applied.
	pagesBy := func() map[string]int {
		out := map[string]int{}
		for _, w := range column[string](t, db, `SELECT writer FROM page_log`) {
			out[replicaOf(writerOf, w)]++
		}
		return out
	}

	a, b, c := startReplica("a"), startReplica("b"), startReplica("c")
	testutil.EventuallyState(t, 60*time.Second, "every copy recorded, and pages applied by each of the three replicas", func() (bool, string) {
		if copies() < fleetTables {
			return false, fmt.Sprintf("%d copies recorded", copies())
		}
		by := pagesBy()
		return by["a"] > 0 && by["b"] > 0 && by["c"] > 0, fmt.Sprint(by)
	})

	// A lost node: a's sources are taken over by b and c.
	a.p.Kill(t)
	testutil.EventuallyState(t, 60*time.Second, "every source claimed since by another replica than the killed one", func() (bool, string) {
		by := claimedBy()
		return by["a"] == 0, fmt.Sprint(by, " ", column[string](t, db, `SELECT copy_table FROM syncd.copies WHERE writer LIKE $1`, "% pid "+strconv.Itoa(a.p.Pid())))
	})

	// A fourth replica joins and gets its share.
	d := startReplica("d")
	testutil.EventuallyState(t, 30*time.Second, "the new replica to run sources", func() (bool, string) {
		by := claimedBy()
		return by["d"] > 0, fmt.Sprint(by)
	})

	// Two leave: the last one runs every source.
	b.stop(t)
	c.stop(t)
	testutil.EventuallyState(t, 30*time.Second, "every source claimed by the replica left", func() (bool, string) {
		by := claimedBy()
		return by["d"] == fleetTables, fmt.Sprint(by)
	})

	stopWrites()
	testutil.EventuallyState(t, 60*time.Second, "every copy equal to its source", func() (bool, string) {
		var behind []string
		for _, n := range names {
			if d := testutil.DiffTables(t, db.Pool, "src."+n, db.Pool, "copy."+n); !d.Equal() {
				behind = append(behind, n)
			}
		}
		return len(behind) == 0, strings.Join(behind, ", ")
	})
	for _, n := range names {
		testutil.RequireEqual(t, db.Pool, "src."+n, db.Pool, "copy."+n)
	}
	// status --fleet, from any host with the config: every source, the
	// replica that runs it, where its copy is and how long ago it moved.
	// (Exit 1 names a sink it could not read: here, at worst, the test
	// server's connection slots all taken by the replica's runs.)
	var r result
	var fleet cli.FleetStatus
	testutil.EventuallyState(t, 30*time.Second, "status --fleet --json to read the sink", func() (bool, string) {
		r = bin.Run(t, nil, "status", "--fleet", "--json", "--config", cfg)
		return r.Code == 0 && json.Unmarshal([]byte(r.Stdout), &fleet) == nil, r.String()
	})
	if len(fleet.Sources) != fleetTables {
		t.Errorf("status --fleet shows %d sources, want %d", len(fleet.Sources), fleetTables)
	}
	for _, s := range fleet.Sources {
		if !s.Found || replicaOf(writerOf, s.Writer) != "d" || len(s.Cursor) != 2 || s.Pages == 0 || s.SinceUpdateSeconds == nil {
			t.Errorf("status --fleet: %+v, want the record of a copy last claimed by replica d", s)
		}
	}
	d.stop(t)
	r = bin.Run(t, nil, "status", "--fleet", "--config", cfg) // no replica left: the slots are free
	if lines := lines(r.Stdout); r.Code != 0 || len(lines) != fleetTables+1 || !strings.HasPrefix(lines[0], "SOURCE") ||
		!strings.Contains(lines[1], "p.t01") || !strings.Contains(lines[1], " pid "+strconv.Itoa(d.p.Pid())+" ") || !strings.Contains(lines[1], " no ") {
		t.Errorf("status --fleet after the last replica stopped: %s", r)
	}

	// Exclusivity, from the sink's record of each page's writer.
	if n := count(t, db, "page_log"); n < fleetTables {
		t.Fatalf("only %d pages recorded", n)
	}
	if bad := column[string](t, db, `SELECT DISTINCT copy || ' txid ' || txid || ' pid ' || pid FROM page_log WHERE NOT held`); len(bad) > 0 {
		t.Errorf("pages applied by a session not holding the source's run lock: %v", bad)
	}
	// In the order pages were applied, one run's pages of one copy (its
	// session and its staging table) are consecutive: were two runs ever
	// writing one copy at once, their pages would interleave, and the
	// copy would have more stretches of one run's pages than runs.
	interleaved := column[string](t, db, `
WITH o AS (
  SELECT copy, pid, backend_start, stage, seq,
         lag((pid, backend_start, stage)) OVER w IS DISTINCT FROM (pid, backend_start, stage) AS new_run
  FROM page_log WINDOW w AS (PARTITION BY copy ORDER BY seq))
SELECT copy || ': ' || sum(new_run::int) || ' stretches of ' || count(DISTINCT (pid, backend_start, stage)) || ' runs'
FROM o GROUP BY copy HAVING sum(new_run::int) <> count(DISTINCT (pid, backend_start, stage))`)
	if len(interleaved) > 0 {
		t.Errorf("pages of two sessions interleaved: %v", interleaved)
	}
	// Each replica wrote pages, and sources moved between them.
	by := pagesBy()
	for _, r := range []string{"a", "b", "c", "d"} {
		if by[r] == 0 {
			t.Errorf("replica %s applied no page (pages by replica: %v)", r, by)
		}
	}
	moved := column[string](t, db, `SELECT copy FROM page_log GROUP BY copy HAVING count(DISTINCT writer) > 1`)
	if len(moved) == 0 {
		t.Error("no source moved between replicas")
	}
	// A run that met another replica's was skipped, said at info level:
	// never a failure, never taken for a collision of two sources. (The
	// test server's 100 connections are not enough for four replicas of
	// 60 sources ticking at once: a refused connection is a transient
	// fault, retried, and is not counted here.)
	skips := 0
	for name, r := range replicas {
		skips += r.out.Count("run skipped", "level", "INFO")
		for _, e := range r.out.Entries() {
			if e.Msg() == "run failed with a permanent error: the source is marked failed and is tried again at its next tick; fix the cause" ||
				strings.Contains(e.Text("err"), "running a source of the same name with other settings") {
				t.Errorf("replica %s: %s: %s", name, e.Msg(), e.Text("err"))
			}
		}
	}
	if skips == 0 {
		t.Error("no replica met another's run and skipped it")
	}
	t.Logf("%d pages: by replica %v; %d sources moved", count(t, db, "page_log"), by, len(moved))
}

// replicaOf names the replica of a catalog writer ("host pid N").
func replicaOf(writerOf map[string]string, writer string) string {
	for suffix, name := range writerOf {
		if strings.HasSuffix(writer, " "+suffix) {
			return name
		}
	}
	return "unknown:" + writer
}

// Any replica's GET /status?fleet=1 shows every source of the fleet: two
// daemons on one configuration, each source run once at their start (the
// hourly schedule keeps the records still afterwards). Each one's view
// lists all the sources, names as each copy's replica the writer the
// sink's catalog records, gives the last run and the freshness of the
// copies it ran itself from its state file, and those of every copy as
// the sink's record keeps them.
func TestFleetStatusFromAnyReplica(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE SCHEMA src; CREATE SCHEMA copy`)
	const tables = 12
	for i := range tables {
		db.Exec(t, fmt.Sprintf(`CREATE TABLE src.t%02[1]d (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), v text);
INSERT INTO src.t%02[1]d (id, v) SELECT g, 'v' || g FROM generate_series(1, 20) g`, i+1))
	}
	dir := t.TempDir()
	cfg := writeFile(t, dir, "fleet.yaml", fmt.Sprintf(`name: p
schedule: "@every 1h"
source:
  dsn: %s
  table: src.t*
  cursor: [updated_at, id]
sink:
  dsn: %s
  table: copy.*
`, db.URL, db.URL))
	replicas := map[string]*daemon{}
	writerOf := map[string]string{}
	for _, name := range []string{"a", "b"} {
		d := startDaemon(t, cfg, filepath.Join(dir, name+".db"), nil)
		replicas[name] = d
		writerOf["pid "+strconv.Itoa(d.p.Pid())] = name
	}
	// Each replica tried every source once: ran it, or skipped it while
	// the other held it.
	for name, d := range replicas {
		testutil.EventuallyState(t, 60*time.Second, "replica "+name+" to have tried every source", func() (bool, string) {
			resp, err := http.Get("http://" + d.addr + "/metrics")
			if err != nil {
				return false, err.Error() // not serving yet
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			tried, failed := 0, 0
			for _, l := range strings.Split(string(b), "\n") {
				done := strings.HasPrefix(l, `syncd_runs_total{outcome="ok"`) || strings.HasPrefix(l, `syncd_runs_total{outcome="skipped"`)
				switch {
				case strings.HasSuffix(l, "} 0"):
				case done:
					tried++
				case strings.HasPrefix(l, `syncd_runs_total{outcome="failed"`):
					failed++
				}
			}
			return tried == tables && failed == 0, fmt.Sprintf("%d tried, %d failed", tried, failed)
		})
	}
	recorded := map[string]string{} // source -> replica, by the sink's catalog
	rows, err := db.Pool.Query(context.Background(), `SELECT source_name, writer FROM syncd.copies`)
	if err != nil {
		t.Fatal(err)
	}
	var src, writer string
	if _, err := pgx.ForEachRow(rows, []any{&src, &writer}, func() error {
		recorded[src] = replicaOf(writerOf, writer)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(recorded) != tables {
		t.Fatalf("the sink records %d copies, want %d: %v", len(recorded), tables, recorded)
	}
	for _, name := range []string{"a", "b"} {
		code, body := replicas[name].get(t, "/status?fleet=1")
		var fl cli.FleetStatus
		if err := json.Unmarshal([]byte(body), &fl); code != 200 || err != nil {
			t.Fatalf("replica %s: GET /status?fleet=1: %d %v: %s", name, code, err, body)
		}
		if replicaOf(writerOf, fl.Replica) != name {
			t.Errorf("replica %s answers as %q", name, fl.Replica)
		}
		if len(fl.Sources) != tables {
			t.Errorf("replica %s's fleet view lists %d sources, want %d: %s", name, len(fl.Sources), tables, body)
		}
		for _, s := range fl.Sources {
			runs := replicaOf(writerOf, s.Writer)
			own := runs == name
			switch {
			case s.Error != "" || !s.Found || runs != recorded[s.Name] || s.Running || s.SinceUpdateSeconds == nil || s.Pages == 0:
				t.Errorf("replica %s's fleet view: %+v, want the copy recorded, run by replica %s, not running now", name, s, recorded[s.Name])
			case own && (s.LastRunAt == "" || s.LastStatus != "ok" || s.FreshnessSeconds == nil):
				t.Errorf("replica %s's fleet view of its own source: %+v, want its last run (ok) and freshness", name, s)
			case !own && (s.LastRunAt != "" || s.FreshnessSeconds != nil):
				t.Errorf("replica %s's fleet view of replica %s's source: %+v, want no last run of its own", name, runs, s)
			case s.RunAt == "" || s.SinceRunSeconds == nil || s.RunBound == "" || s.RunCaughtUp == nil || !*s.RunCaughtUp || s.CaughtUp == "" || s.LagSeconds == nil ||
				s.RecordEverySeconds != 3600 || s.StaleAfterSeconds != 3*3600 || s.Stale:
				// Whichever replica ran it: the sink's record of the run.
				t.Errorf("replica %s's fleet view of replica %s's source: %+v, want its run recorded by the sink, caught up, recorded every hour, not stale", name, runs, s)
			}
		}
	}
	// The plain /status is unchanged: this replica's state file.
	if code, body := replicas["a"].get(t, "/status"); code != 200 || !strings.Contains(body, `"state": `) || strings.Contains(body, `"replica"`) {
		t.Errorf("GET /status: %d %s", code, body)
	}
}
