package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/ops"
)

// A permanent error (a missing table) marks that source failed in status,
// metrics and the body of /readyz (which stays 200) without retries, while the other source keeps
// syncing; once the table exists the source recovers at its next tick.
func TestPermanentErrorLeavesOtherSourcesSyncing(t *testing.T) {
	f := newFixture(t)
	f.table(t, "good_src", 300)
	f.source(t, "good.yaml", "good", "good_src", "good_copy", "page_size: 100\n^schedule: \"@every 1s\"")
	f.source(t, "bad.yaml", "bad", "missing_src", "bad_copy", "page_size: 100\n^schedule: \"@every 1s\"")
	d := startDaemon(t, f.dir, nil)
	defer func() {
		if strings.Contains(d.logs.String(), secret) {
			t.Error("the daemon logged a DSN password")
		}
	}()

	testutil.Eventually(t, 20*time.Second, "the good source's copy", func() bool { return f.diff(t, "good_src", "good_copy") == 0 })
	testutil.Eventually(t, 10*time.Second, "the bad source marked failed", func() bool {
		return testutil.Scrape(t, d.addr).Series[`syncd_source_failed{source="bad"}`] == 1
	})
	f.insert(t, "good_src", 301, 450)
	testutil.Eventually(t, 20*time.Second, "the good source to keep syncing", func() bool { return f.diff(t, "good_src", "good_copy") == 0 })

	m := testutil.Scrape(t, d.addr).Series
	if m[`syncd_runs_total{outcome="failed",source="bad"}`] < 1 || m[`syncd_errors_total{kind="config",source="bad"}`] < 1 {
		t.Errorf("bad: failed runs %v, config errors %v", m[`syncd_runs_total{outcome="failed",source="bad"}`], m[`syncd_errors_total{kind="config",source="bad"}`])
	}
	if m[`syncd_retries_total{source="bad"}`] != 0 {
		t.Errorf("a permanent error was retried %v times", m[`syncd_retries_total{source="bad"}`])
	}
	if m[`syncd_source_failed{source="good"}`] != 0 {
		t.Error("good source marked failed")
	}
	code, body := httpGet(t, "http://"+d.addr+"/readyz")
	// One source failing does not make the daemon unready (it is an
	// alert, not a reason to stop a rollout): the body names it.
	if code != 200 || !strings.HasPrefix(body, "ready\n") || !strings.Contains(body, "source bad: last run failed") || !strings.Contains(body, "missing_src does not exist") {
		t.Errorf("/readyz = %d %q, want 200 naming source bad and its missing table", code, body)
	}
	_, body = httpGet(t, "http://"+d.addr+"/status")
	var st ops.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Sources {
		want := map[string]string{"bad": "failed", "good": "ok"}[s.Name]
		if s.LastStatus != want {
			t.Errorf("status of %s = %q (%s), want %q", s.Name, s.LastStatus, s.LastError, want)
		}
	}

	f.table(t, "missing_src", 50)
	testutil.Eventually(t, 20*time.Second, "the bad source to recover", func() bool { return f.diff(t, "missing_src", "bad_copy") == 0 })
	testutil.Eventually(t, 10*time.Second, "/readyz to stop naming the source", func() bool {
		code, body := httpGet(t, "http://"+d.addr+"/readyz")
		return code == 200 && body == "ready\n"
	})
}

// Connections lost mid-run (pg_terminate_backend: the sink's, which holds
// the run lock, and the source's) are retried with backoff; the run
// completes from the last committed page and nothing is lost.
func TestConnectionLossMidRunIsRetried(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 600)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "page_size: 30\nwhere: slow(5)\n^schedule: \"@every 1h\"")
	d := startDaemon(t, path, nil)
	testutil.Eventually(t, 20*time.Second, "a few pages", func() bool { return f.count(t, "copy") >= 90 })
	var killed int
	err := f.db.Pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'syncd' AND pid <> pg_backend_pid()`).Scan(&killed)
	if err != nil || killed == 0 {
		t.Fatalf("terminated %d syncd sessions: %v", killed, err)
	}
	testutil.Eventually(t, 30*time.Second, "the run to complete", func() bool {
		return testutil.Scrape(t, d.addr).Series[`syncd_runs_total{outcome="ok",source="orders"}`] == 1
	})
	f.requireEqual(t, "src", "copy")
	m := testutil.Scrape(t, d.addr).Series
	if m[`syncd_retries_total{source="orders"}`] < 1 || m[`syncd_errors_total{kind="admin_shutdown",source="orders"}`]+m[`syncd_errors_total{kind="connection",source="orders"}`] < 1 {
		t.Errorf("retries %v, errors %v", m[`syncd_retries_total{source="orders"}`], m)
	}
	if !strings.Contains(d.logs.String(), "transient fault: the run is tried again from the last committed page") {
		t.Error("no log line reports the retry")
	}
}

// The source server restarted mid-run: the run is retried until the server
// is back and then completes.
func TestSourceRestartMidRunIsRetried(t *testing.T) {
	ctx := context.Background()
	cl, err := pgtest.StartCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Destroy(context.WithoutCancel(ctx)) })
	f := newFixture(t)
	srcURL := cl.URL()
	exec := func(sql string) {
		t.Helper()
		if err := execURL(srcURL, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec(slowSQL)
	exec(`CREATE TABLE src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), v text)`)
	exec(`CREATE INDEX ON src (updated_at, id)`)
	exec(`INSERT INTO src (id, v) SELECT g, 'v' || g FROM generate_series(1, 600) g`)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "page_size: 30\nwhere: slow(5)\n^schedule: \"@every 1h\"")
	writeFile(t, path, strings.Replace(readFile(t, path), "dsn: "+f.dsn(), "dsn: "+srcURL, 1))
	d := startDaemon(t, path, nil)

	testutil.Eventually(t, 20*time.Second, "a few pages", func() bool { return f.count(t, "copy") >= 60 })
	if err := cl.Stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	// The server stays down until the run has met the outage twice (its
	// first attempt and a retry failed against it): the retries must
	// outlast it.
	const retried = "transient fault: the run is tried again from the last committed page"
	if !d.logs.AwaitCount(20*time.Second, 2, retried, "source", "orders") {
		t.Fatalf("the run did not retry twice while the source was down; log:\n%s", d.logs)
	}
	if err := cl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 40*time.Second, "the run to complete", func() bool {
		return testutil.Scrape(t, d.addr).Series[`syncd_runs_total{outcome="ok",source="orders"}`] == 1
	})
	var n int
	if err := queryURL(srcURL, "SELECT count(*) FROM src", &n); err != nil || n != 600 {
		t.Fatalf("source rows %d: %v", n, err)
	}
	if got := f.count(t, "copy"); got != 600 {
		t.Fatalf("copy has %d rows, want 600", got)
	}
	// Compare values across the two servers.
	var sum, copySum string
	q := "SELECT md5(string_agg(id || ',' || updated_at || ',' || v, ';' ORDER BY id)) FROM %s"
	if err := queryURL(srcURL, fmt.Sprintf(q, "src"), &sum); err != nil {
		t.Fatal(err)
	}
	if err := f.db.Pool.QueryRow(ctx, fmt.Sprintf(q, "copy")).Scan(&copySum); err != nil {
		t.Fatal(err)
	}
	if sum != copySum {
		t.Fatalf("copy differs from the source (md5 %s vs %s)", copySum, sum)
	}
	m := testutil.Scrape(t, d.addr).Series
	if m[`syncd_retries_total{source="orders"}`] < 1 {
		t.Errorf("retries = %v, want >= 1", m[`syncd_retries_total{source="orders"}`])
	}
}
