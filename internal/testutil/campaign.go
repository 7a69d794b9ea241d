package testutil

import (
	"fmt"
	"strings"
)

// CampaignYAML is the config of a coupon campaign named name over
// public.members (cursor member_id, the members whose last purchase is
// more than 180 days before the campaign's as_of), granting into
// public.coupon_grants of the same database at dsn under campaign id.
// schedule "" leaves the schedule out; each line of sink (such as
// "grant_page_size: 400") is added under sink:.
func CampaignYAML(name, schedule, dsn, campaign string, sink ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\n", name)
	if schedule != "" {
		fmt.Fprintf(&b, "schedule: %q\n", schedule)
	}
	fmt.Fprintf(&b, `source:
  dsn: %s
  table: public.members
  cursor: [member_id]
  where: "last_purchase_at < :as_of - interval '180 days'"
sink:
  type: coupon_grants
  dsn: %s
  table: public.coupon_grants
  campaign: %s
`, dsn, dsn, campaign)
	for _, l := range sink {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	return b.String()
}
