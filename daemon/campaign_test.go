package daemon_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncd/syncd/daemon"
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
	campaign := fmt.Sprintf(`name: comeback
schedule: "0 2 1 10 *"
source:
  dsn: %s
  table: public.members
  cursor: [member_id]
  where: "last_purchase_at < :as_of - interval '180 days'"
sink:
  type: coupon_grants
  dsn: %s
  table: public.coupon_grants
  campaign: comeback
`, f.dsn(), f.dsn())
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
