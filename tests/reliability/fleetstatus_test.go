package reliability

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/cli"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// Any replica shows how fresh a copy is that another replica runs, from
// the sink's record: replica b runs the source every second (recording an
// idle run at most every 2 s), replica a, on an hourly schedule, does not
// take the source while b lives. a's GET /status?fleet=1 and status
// --fleet show b as the writer, its last run moving on while it runs idle,
// caught up, the copy's freshness; once b is killed (SIGKILL) the record
// goes stale (a's hourly schedule leaves it there, as a lost node's
// replicas would until their next tick); once a runs every second too (a
// reload), it takes the source over and shows itself.
func TestFleetStatusShowsAnotherReplicasRuns(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE SCHEMA src; CREATE SCHEMA copy;
CREATE TABLE src.orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), v text);
INSERT INTO src.orders (id, v) SELECT g, 'v' || g FROM generate_series(1, 20) g`)
	dir := t.TempDir()
	config := func(schedule string) string {
		return fmt.Sprintf("name: orders\nschedule: %q\nsource:\n  dsn: %s\n  table: src.orders\n  cursor: [updated_at, id]\nsink:\n  dsn: %s\n  table: copy.orders\n", schedule, db.URL, db.URL)
	}
	cfgA := writeFile(t, filepath.Join(dir), "a.yaml", config("@every 1h"))
	cfgB := writeFile(t, filepath.Join(dir), "b.yaml", config("@every 1s"))
	// writerIs is true once d has claimed the copy and recorded a run's
	// end of its own (the claim comes first and keeps the last writer's
	// run until then): every is the interval d records at, in seconds.
	writerIs := func(d *daemon, every int) (bool, string) {
		if count(t, db, "syncd.copies") < 0 {
			return false, "no catalog yet"
		}
		w := column[string](t, db, `SELECT writer || ' every ' || extract(epoch FROM run_every)::int FROM syncd.copies WHERE copy_table = 'copy.orders' AND run_at IS NOT NULL`)
		return len(w) == 1 && strings.HasSuffix(w[0], " pid "+strconv.Itoa(d.p.Pid())+" every "+strconv.Itoa(every)), fmt.Sprint(w)
	}

	a := startDaemon(t, cfgA, filepath.Join(dir, "a.db"), nil)
	testutil.EventuallyState(t, 60*time.Second, "replica a's run at its start to be recorded", func() (bool, string) { return writerIs(a, 3600) })
	b := startDaemon(t, cfgB, filepath.Join(dir, "b.db"), []string{"SYNCD_RECORD_EVERY=2s"})
	testutil.EventuallyState(t, 60*time.Second, "replica b to take the source over", func() (bool, string) { return writerIs(b, 2) })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replica a:\n%s\nreplica b:\n%s", a.out, b.out)
		}
	})
	bWriter := column[string](t, db, `SELECT writer FROM syncd.copies`)[0]
	aWriter := strings.Replace(bWriter, " pid "+strconv.Itoa(b.p.Pid()), " pid "+strconv.Itoa(a.p.Pid()), 1)

	// view is the source as replica a's GET /status?fleet=1 shows it.
	view := func() (cli.FleetSource, string) {
		code, body := a.get(t, "/status?fleet=1")
		var fl cli.FleetStatus
		if err := json.Unmarshal([]byte(body), &fl); code != 200 || err != nil || len(fl.Sources) != 1 || fl.Replica != aWriter {
			t.Fatalf("replica a: GET /status?fleet=1: %d %v: %s", code, err, body)
		}
		return fl.Sources[0], body
	}
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatalf("time %q: %v", s, err)
		}
		return v
	}
	// byB checks the view of a copy replica b runs, recorded by an idle
	// run: every field exactly, the times present.
	byB := func(s cli.FleetSource, body string) {
		t.Helper()
		if s.Name != "orders" || s.Sink != "copy.orders" || !s.Found || s.Error != "" || s.Writer != bWriter || s.Rows != 20 ||
			s.RunAt == "" || s.SinceRunSeconds == nil || s.RunBound == "" || s.RunCaughtUp == nil || !*s.RunCaughtUp ||
			s.CaughtUp == "" || s.LagSeconds == nil || s.RecordEverySeconds != 2 || s.StaleAfterSeconds != 6 ||
			s.LastRunAt != "" || s.LastStatus != "" || s.FreshnessSeconds != nil {
			t.Fatalf("replica a's view of replica b's source: %s", body)
		}
	}
	first, body := view()
	byB(first, body)
	if first.Stale {
		t.Fatalf("a record b wrote within 2 s is stale: %s", body)
	}
	// b runs idle every second: the record's last run and freshness move
	// on, no page is written.
	testutil.EventuallyState(t, 60*time.Second, "replica a to see b's last run move on", func() (bool, string) {
		s, body := view()
		byB(s, body)
		return at(s.RunAt).After(at(first.RunAt)) && at(s.CaughtUp).After(at(first.CaughtUp)) && !s.Stale, body
	})
	if s, body := view(); s.Pages != first.Pages {
		t.Fatalf("idle runs wrote pages: %s, was %d pages", body, first.Pages)
	}
	// status --fleet, from any host with the config, says the same.
	r := bin.Run(t, nil, "status", "--fleet", "--json", "--config", cfgA)
	var fl cli.FleetStatus
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &fl) != nil || len(fl.Sources) != 1 || fl.Replica != "" {
		t.Fatalf("status --fleet --json: %s", r)
	}
	byB(fl.Sources[0], r.Stdout)
	r = bin.Run(t, nil, "status", "--fleet", "--config", cfgA)
	// The last columns: LAST RUN ("N ago"), CAUGHT UP, LAG.
	if l := lines(r.Stdout); r.Code != 0 || len(l) != 2 || strings.Join(strings.Fields(l[0]), " ") != "SOURCE WRITER RUNNING CURSOR PAGES LAST UPDATE LAST RUN CAUGHT UP LAG" ||
		!strings.HasPrefix(l[1], "orders ") || !strings.Contains(l[1], " "+bWriter+" ") || !strings.HasSuffix(strings.Join(strings.Fields(l[1])[len(strings.Fields(l[1]))-3:len(strings.Fields(l[1]))-1], " "), "ago yes") {
		t.Fatalf("status --fleet: %s", r)
	}

	// b is killed: nothing moves its record any more, which goes stale
	// after 3 × 2 s; the writer stays b until another replica runs it.
	b.p.Kill(t)
	testutil.EventuallyState(t, 60*time.Second, "replica a to see b's record go stale", func() (bool, string) {
		s, body := view()
		byB(s, body)
		return s.Stale && *s.SinceRunSeconds > 6, body
	})
	r = bin.Run(t, nil, "status", "--fleet", "--config", cfgA)
	if l := lines(r.Stdout); r.Code != 0 || len(l) != 3 || !strings.Contains(l[1], " ago, stale ") ||
		!strings.HasPrefix(l[2], "orders: stale: nothing moved its record for more than 6s (3 × the 2s its writer records an idle run at most): the writer "+bWriter+" has stopped") {
		t.Fatalf("status --fleet of a stale record: %s", r)
	}

	// a runs the source every second from now on: it takes it over.
	stale, _ := view()
	writeFile(t, dir, "a.yaml", config("@every 1s"))
	a.p.Signal(t, syscall.SIGHUP)
	testutil.EventuallyState(t, 60*time.Second, "replica a to take the source over and show itself", func() (bool, string) {
		s, body := view()
		// Between a's claim and the end of its first run the record has
		// no run (RunAt empty, as writerIs allows): not yet.
		return s.Writer == aWriter && !s.Stale && s.RunAt != "" && at(s.RunAt).After(at(stale.RunAt)) && s.RunCaughtUp != nil && *s.RunCaughtUp &&
			s.RecordEverySeconds == 30 && s.StaleAfterSeconds == 90 && s.LastRunAt != "" && s.LastStatus == "ok" && s.FreshnessSeconds != nil, body
	})
	db.Exec(t, `INSERT INTO src.orders (id, v) SELECT g, 'new' FROM generate_series(21, 30) g`)
	testutil.EventuallyState(t, 60*time.Second, "the copy to hold the new rows", func() (bool, string) {
		n := count(t, db, "copy.orders")
		return n == 30, fmt.Sprint(n, " rows")
	})
	testutil.RequireEqual(t, db.Pool, "src.orders", db.Pool, "copy.orders")
	a.stop(t)
}
