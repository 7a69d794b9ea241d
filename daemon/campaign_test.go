package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/internal/testutil"
)

// Starting the daemon runs table sources at once to catch up, but never a
// coupon campaign: it waits for its schedule, so a restart cannot start a
// campaign early (and freeze its targets at the wrong moment).
func TestCampaignWaitsForItsSchedule(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 50)
	f.source(t, "orders.yaml", "orders", "src", "copy", "^schedule: \"@every 1h\"")
	f.db.Exec(t, `CREATE TABLE members (member_id bigint PRIMARY KEY, last_purchase_at timestamptz NOT NULL)`)
	f.db.Exec(t, `INSERT INTO members SELECT g, now() - interval '1 year' FROM generate_series(1, 10) g`)
	campaign := testutil.CampaignYAML("comeback", "0 2 1 10 *", f.dsn(), "comeback")
	if err := os.WriteFile(filepath.Join(f.dir, "comeback.yaml"), []byte(campaign), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, f.dir, func(o *daemon.Options) { o.Clock = newFakeClock() })
	testutil.Eventually(t, 20*time.Second, "the table source's start-up run", func() bool { return f.diff(t, "src", "copy") == 0 })
	// The stop waits for every run the start began: after it, a campaign
	// run started with the daemon would have left its grants.
	if err := d.shutdown(t); err != nil {
		t.Fatal(err)
	}
	if n := f.count(t, "public.coupon_grants"); n != 0 {
		t.Fatalf("the daemon's start granted %d coupons; a campaign must wait for its schedule", n)
	}
	if n := f.count(t, "syncd_campaigns"); n != 0 {
		t.Fatalf("the daemon's start froze the campaign (%d campaign rows); it must wait for its schedule", n)
	}
}

// Two campaigns and a table source take turns on the daemon's pooled
// sessions (one run at a time), year after year. Each campaign grants its
// own frozen targets exactly once, page by page; its next year's tick
// grants nothing more, not even to members who became targets after its
// freeze; the other campaign's grants in the same table are not touched;
// the table source between them copies every row; and the later ticks
// open no session and leave none in a transaction or holding a lock.
func TestCampaignsTakeTurnsOnThePooledSessions(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 200)
	f.source(t, "orders.yaml", "orders", "src", "copy", "lookback: 0s\n^schedule: \"@every 1h\"")
	f.db.Exec(t, `CREATE TABLE members (member_id bigint PRIMARY KEY, last_purchase_at timestamptz NOT NULL)`)
	// 3,000 members, two in five dormant for a year: 1,200 targets.
	f.db.Exec(t, `INSERT INTO members SELECT g, CASE WHEN g % 5 < 2 THEN now() - interval '1 year' ELSE now() - interval '1 day' END FROM generate_series(1, 3000) g`)
	for name, schedule := range map[string]string{"spring": "0 2 1 3 *", "autumn": "0 2 1 10 *"} {
		if err := os.WriteFile(filepath.Join(f.dir, name+".yaml"), []byte(testutil.CampaignYAML(name, schedule, f.dsn(), name, "grant_page_size: 400")), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var ctr pgutil.Counter
	clock := newFakeClock() // 1 January 2026
	d := startDaemonCtx(t, pgutil.WithCounter(context.Background(), &ctr), f.dir, func(o *daemon.Options) {
		o.Clock = clock
		o.MaxConcurrentRuns = 1
	})
	awaitRuns(t, d, 1, "orders")

	// wantGrants checks a campaign's grants against the members given by
	// targets, both ways, row by row, and that no member has two.
	wantGrants := func(campaign, targets string, n int) {
		t.Helper()
		var granted, missing, extra int
		if err := f.db.Pool.QueryRow(context.Background(), `SELECT
  (SELECT count(*) FROM coupon_grants WHERE campaign_id = $1),
  (SELECT count(*) FROM (SELECT member_id FROM members WHERE `+targets+` EXCEPT SELECT member_id FROM coupon_grants WHERE campaign_id = $1) m),
  (SELECT count(*) FROM (SELECT member_id FROM coupon_grants WHERE campaign_id = $1 EXCEPT SELECT member_id FROM members WHERE `+targets+`) e)`,
			campaign).Scan(&granted, &missing, &extra); err != nil {
			t.Fatal(err)
		}
		if granted != n || missing != 0 || extra != 0 {
			t.Fatalf("campaign %s: %d grants, %d targets without one, %d grants not targets; want %d, 0, 0", campaign, granted, missing, extra, n)
		}
	}

	// 1 March: spring freezes 1,200 targets and grants them in 3 pages.
	clock.advance(t, 60*24*time.Hour)
	awaitRuns(t, d, 1, "spring")
	awaitRuns(t, d, 2, "orders")
	wantGrants("spring", "member_id <= 3000 AND member_id % 5 < 2", 1200)
	if n := f.count(t, "coupon_grants WHERE campaign_id = 'autumn'"); n != 0 {
		t.Fatalf("autumn granted %d coupons in March; it waits for October", n)
	}

	// Members 3001-3100 become dormant after spring's freeze, and the
	// table source gets new rows.
	f.db.Exec(t, `INSERT INTO members SELECT g, now() - interval '1 year' FROM generate_series(3001, 3100) g`)
	f.insert(t, "src", 201, 300)

	// 1 October: autumn freezes 1,300 targets; spring is untouched.
	clock.advance(t, 214*24*time.Hour)
	awaitRuns(t, d, 1, "autumn")
	awaitRuns(t, d, 3, "orders")
	wantGrants("autumn", "member_id % 5 < 2 OR member_id > 3000", 1300)
	wantGrants("spring", "member_id <= 3000 AND member_id % 5 < 2", 1200)
	f.requireEqual(t, "src", "copy")

	// A year on, both campaigns tick again on the pool's sessions: done,
	// they grant nothing (spring not to the 100 members it did not
	// freeze), and the table source between them still copies every row.
	f.insert(t, "src", 301, 400)
	before := ctr.Snapshot()
	clock.advance(t, 365*24*time.Hour)
	awaitRuns(t, d, 2, "spring", "autumn")
	awaitRuns(t, d, 4, "orders")
	got := ctr.Snapshot().Since(before)
	wantGrants("spring", "member_id <= 3000 AND member_id % 5 < 2", 1200)
	wantGrants("autumn", "member_id % 5 < 2 OR member_id > 3000", 1300)
	f.requireEqual(t, "src", "copy")
	if got.Connects != 0 {
		t.Errorf("the second year's runs opened %d sessions; want 0 (the pool's)", got.Connects)
	}
	var sessions, busy, locks int
	if err := queryURL(f.db.URL, `SELECT
  (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'syncd'),
  (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'syncd' AND state <> 'idle'),
  (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`, &sessions, &busy, &locks); err != nil {
		t.Fatal(err)
	}
	if sessions > 2 || busy != 0 || locks != 0 {
		t.Errorf("between runs the daemon keeps %d sessions (%d not idle) and %d advisory locks; want at most 2, none busy, no lock:\n%s", sessions, busy, locks, f.sessions(t))
	}
	t.Logf("second year: %d sessions opened, %d round trips", got.Connects, got.RoundTrips)
}
