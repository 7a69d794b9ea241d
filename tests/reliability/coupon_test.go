package reliability

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
)

const campaign = "reliability-2026"

// couponMembers creates public.members: n members, about 40% dormant (no
// purchase for 400 days), 40% of them sharing one created_at; it returns
// the dormant members, who are the campaign's targets when it freezes.
func couponMembers(t *testing.T, db *pgtest.DB, n int) []int64 {
	t.Helper()
	db.Exec(t, `CREATE TABLE members (member_id bigint PRIMARY KEY, created_at timestamptz NOT NULL, last_purchase_at timestamptz NOT NULL)`)
	db.Exec(t, `INSERT INTO members
SELECT i,
  CASE WHEN i % 5 < 2 THEN timestamptz '2019-04-01' ELSE timestamptz '2019-04-02' + i * interval '1 minute' END,
  CASE WHEN abs(hashint4(i)) % 10 < 4 THEN now() - interval '400 days' - i * interval '1 second' ELSE now() - interval '10 days' END
FROM generate_series(1, $1::int) i`, n)
	db.Exec(t, `ANALYZE members`)
	return column[int64](t, db, `SELECT member_id FROM members WHERE last_purchase_at < now() - interval '180 days' ORDER BY member_id`)
}

// couponYAML is a campaign granting a coupon to every member dormant at
// the freeze, into public.coupon_grants.
func couponYAML(name, srcDSN, sinkDSN, campaign string, pageSize int) string {
	return fmt.Sprintf(`name: %s
source:
  dsn: %s
  table: public.members
  cursor: [member_id]
  where: "last_purchase_at < :as_of - interval '180 days'"
  page_size: %d
sink:
  type: coupon_grants
  dsn: %s
  table: public.coupon_grants
  campaign: %s
  grant_page_size: %d
`, name, srcDSN, pageSize, sinkDSN, campaign, pageSize)
}

// shopChurn changes members until ctx ends the way a live shop does: dormant
// members buy (they keep their coupon), active members turn dormant and
// dormant-looking members sign up (neither may get one: the set is frozen).
func shopChurn(ctx context.Context, db *pgtest.DB, changes *int) {
	for ctx.Err() == nil {
		_, err := db.Pool.Exec(ctx, `
UPDATE members SET last_purchase_at = now()
WHERE member_id IN (SELECT member_id FROM members WHERE last_purchase_at < now() - interval '180 days' ORDER BY random() LIMIT 7);
UPDATE members SET last_purchase_at = now() - interval '400 days'
WHERE member_id IN (SELECT member_id FROM members WHERE last_purchase_at > now() - interval '180 days' ORDER BY random() LIMIT 5);
INSERT INTO members SELECT m.top + g, timestamptz '2019-04-01', now() - interval '400 days'
FROM (SELECT max(member_id) AS top FROM members) m, generate_series(1, 3) g;`)
		if err == nil {
			*changes += 15
		}
		time.Sleep(20 * time.Millisecond) // pacing: a live shop's rate, not a wait for anything
	}
}

// TestKill9DuringCampaign kills a coupon campaign run at random moments,
// first during the freeze and then in the grant pages, while the shop keeps
// changing: after every kill no member holds two grants and nobody outside
// the frozen targets holds one; after the last run every target holds
// exactly one grant.
func TestKill9DuringCampaign(t *testing.T) {
	n, kills := 200_000, 50
	if soak() {
		n, kills = 600_000, 200
	}
	db := pgtest.NewDB(t)
	want := couponMembers(t, db, n)
	db.Exec(t, `CREATE TABLE expected_targets AS SELECT unnest($1::bigint[]) AS member_id`, want)
	db.Exec(t, `ALTER TABLE expected_targets ADD PRIMARY KEY (member_id)`)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "camp.yaml", couponYAML("camp", db.URL, db.URL, campaign, 100))
	state := filepath.Join(dir, "state.db")

	ctx, stopChurn := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	churning, changes := false, 0
	defer func() { stopChurn(); wg.Wait() }()
	t0 := time.Now()
	ks := killLoop(t, cfg, state, kills, 60*time.Millisecond, func(run int, _ []string) {
		var total, distinct, outside int64
		err := db.Pool.QueryRow(context.Background(), `
SELECT count(*), count(DISTINCT g.member_id), count(*) FILTER (WHERE w.member_id IS NULL)
FROM coupon_grants g LEFT JOIN expected_targets w USING (member_id)
WHERE g.campaign_id = $1`, campaign).Scan(&total, &distinct, &outside)
		if err != nil {
			return // the grants table does not exist before the first freeze
		}
		if total != distinct || outside != 0 {
			t.Fatalf("after run %d: %d grants for %d members, %d to members who are not targets", run, total, distinct, outside)
		}
		// Start the shop's churn once the campaign is frozen: the targets
		// are then fixed, whatever members do.
		var frozen bool
		if err := db.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM syncd_campaigns WHERE campaign_id = $1)`, campaign).Scan(&frozen); err == nil && frozen && !churning {
			churning = true
			wg.Add(1)
			go func() { defer wg.Done(); shopChurn(ctx, db, &changes) }()
		}
	})
	stopChurn()
	wg.Wait()
	killPhase := time.Since(t0)
	if !churning {
		t.Fatal("the campaign never froze during the kills")
	}
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("final run: %s", r)
	}
	got := column[int64](t, db, `SELECT member_id FROM coupon_grants WHERE campaign_id = $1 ORDER BY member_id`, campaign)
	if !slices.Equal(got, want) {
		t.Fatalf("after %d kills: %d targets, %d grants", ks.live, len(want), len(got))
	}
	var perTarget int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT max(c) FROM (SELECT count(*) c FROM coupon_grants WHERE campaign_id = $1 GROUP BY member_id) x`, campaign).Scan(&perTarget); err != nil {
		t.Fatal(err)
	}
	if perTarget != 1 {
		t.Fatalf("a target holds %d grants", perTarget)
	}
	t.Logf("REPORT kill9-coupon: members=%d targets=%d grants=%d churn_changes=%d %s kill_phase=%s grants_per_target=1",
		n, len(want), len(got), changes, ks, killPhase.Round(time.Second))
}
