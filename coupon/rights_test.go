package coupon_test

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// tenantMembers makes 5,500 dormant members in 10 tenants, with row-level
// security on, and a login role (unique name: roles are cluster-wide) that
// the policy lets see tenant 1 only, 550 members. It returns the role's
// URL for db and the members it sees; the role is dropped at the end.
func tenantMembers(t *testing.T, db *pgtest.DB) (roleURL string, visible []int64) {
	t.Helper()
	db.Exec(t, `CREATE TABLE public.members (member_id bigint PRIMARY KEY, tenant_id int NOT NULL, last_purchase_at timestamptz NOT NULL);
INSERT INTO public.members SELECT i, i % 10 + 1, now() - interval '400 days' FROM generate_series(1, 5500) i;
ALTER TABLE public.members ENABLE ROW LEVEL SECURITY;
ANALYZE public.members`)
	role := pgtest.NewRole(t, db, "syncd_tenant_a")
	db.Exec(t, "GRANT SELECT ON public.members TO "+role)
	db.Exec(t, "CREATE POLICY tenant_a ON public.members FOR SELECT TO "+role+" USING (tenant_id = 1)")
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	visible = ids(t, db, "SELECT member_id FROM public.members WHERE tenant_id = 1 ORDER BY member_id")
	if len(visible) != 550 {
		t.Fatalf("tenant 1 has %d members, want 550", len(visible))
	}
	return u.String(), visible
}

// runCampaign runs the real binary once on a campaign from srcURL into
// sinkURL and requires success (exit 0).
func runCampaign(t *testing.T, srcURL, sinkURL string) {
	t.Helper()
	yaml := fmt.Sprintf(`name: comeback
source:
  dsn: %s
  table: public.members
  cursor: [member_id]
  where: "%s"
  page_size: 100
sink:
  type: coupon_grants
  dsn: %s
  table: public.coupon_grants
  campaign: %s
`, srcURL, dormantWhere, sinkURL, campaignID)
	dir := t.TempDir()
	r := bin.Run(t, nil, "run", "--once", "--config", writeConfig(t, yaml), "--state", filepath.Join(dir, "state.db"))
	if r.Code != 0 {
		t.Fatalf("campaign run: %s; want exit 0", r)
	}
	if records(r, "campaign reconciled") != 1 {
		t.Fatalf("campaign run did not report success: %s", r)
	}
}

// checkCampaign requires exactly the members the source role sees to hold
// one grant each, and the campaign row to say so.
func checkCampaign(t *testing.T, db *pgtest.DB, want []int64) {
	t.Helper()
	checkExact(t, db, want)
	var targets int64
	var status string
	if err := db.Pool.QueryRow(context.Background(), "SELECT targets, status FROM public.syncd_campaigns WHERE campaign_id = $1", campaignID).Scan(&targets, &status); err != nil {
		t.Fatal(err)
	}
	if targets != int64(len(want)) || status != "done" {
		t.Fatalf("campaign row: %d targets, status %q; want %d, done", targets, status, len(want))
	}
}

// The incident: source.dsn and sink.dsn name one database, the source as a
// role that row-level security limits to one tenant, the sink as the
// administrator. The targets were frozen on the sink's connection, which
// sees every tenant: 5,500 grants instead of 550, and "reconciled". They
// must be read with the source's rights.
func TestTargetsReadWithTheSourceRole(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	tenant, want := tenantMembers(t, db)
	runCampaign(t, tenant, db.URL)
	checkCampaign(t, db, want)
}

// The same database and the same role on both sides may freeze in one
// statement on the sink connection; it sees what the source role sees.
func TestTargetsSameRoleBothSides(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	tenant, want := tenantMembers(t, db)
	role, _ := url.Parse(tenant)
	db.Exec(t, "GRANT CREATE ON SCHEMA public TO "+role.User.Username())
	runCampaign(t, tenant, tenant)
	checkCampaign(t, db, want)
}
