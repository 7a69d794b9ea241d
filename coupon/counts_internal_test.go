package coupon

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/page"
)

// TestCountEqualWithinItsLimit: the comparison as arrays answers only when
// the grants are exactly the targets and both are within countArraysMax;
// otherwise Count's join counts, and the counts are the same either way.
func TestCountEqualWithinItsLimit(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t)
	cfg, err := config.Parse("camp.yaml", []byte(fmt.Sprintf(`name: camp
source:
  dsn: %s
  table: public.members
  cursor: [member_id]
sink:
  type: coupon_grants
  dsn: %s
  table: public.coupon_grants
  campaign: spring
`, db.URL, db.URL)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	g.keys = []page.Column{{Name: "member_id", Type: "bigint"}}
	if err := g.ensureTables(ctx); err != nil {
		t.Fatal(err)
	}
	// Two chunks of targets 1, 2, 3 and 5, 7, and a grant for each; another
	// campaign's grants lie between and around them in the index.
	db.Exec(t, `INSERT INTO coupon_grants_target_chunks (campaign_id, first_pos, n, key_1) VALUES ('spring', 0, 3, '{1,2,3}'), ('spring', 3, 2, '{5,7}')`)
	db.Exec(t, `INSERT INTO coupon_grants (campaign_id, member_id) SELECT 'spring', k FROM unnest('{1,2,3,5,7}'::bigint[]) k`)
	db.Exec(t, `INSERT INTO coupon_grants (campaign_id, member_id) SELECT c, k FROM unnest('{autumn,sprinf,springs}'::text[]) c, generate_series(0, 9) k`)

	check := func(name string, wantOK bool, want Counts) {
		t.Helper()
		c, ok, err := g.countEqual(ctx)
		if err != nil {
			t.Fatalf("%s: countEqual: %v", name, err)
		}
		if ok != wantOK || (ok && c != want) {
			t.Fatalf("%s: countEqual = %+v, %v; want ok %v (%+v)", name, c, ok, wantOK, want)
		}
		got, err := g.Count(ctx)
		if err != nil {
			t.Fatalf("%s: Count: %v", name, err)
		}
		if got != want {
			t.Fatalf("%s: Count = %+v, want %+v", name, got, want)
		}
	}
	check("equal", true, Counts{Targets: 5, Granted: 5})

	old := countArraysMax
	t.Cleanup(func() { countArraysMax = old })
	countArraysMax = 4 // five targets and five grants: too many for arrays
	check("over the limit", false, Counts{Targets: 5, Granted: 5})
	countArraysMax = old

	// A grant replaced by one that is not a target: the same number of
	// grants, one target missing and one grant extra.
	db.Exec(t, `UPDATE coupon_grants SET member_id = 8 WHERE campaign_id = 'spring' AND member_id = 7`)
	check("one replaced", false, Counts{Targets: 5, Granted: 5, Missing: 1, Extra: 1})

	// A target twice (copied over another by hand): the join matches both
	// ways, and only the counts show it; the arrays differ.
	db.Exec(t, `UPDATE coupon_grants SET member_id = 7 WHERE campaign_id = 'spring' AND member_id = 8`)
	db.Exec(t, `UPDATE coupon_grants_target_chunks SET key_1 = '{5,5}' WHERE campaign_id = 'spring' AND first_pos = 3`)
	check("a target twice", false, Counts{Targets: 5, Granted: 5, Extra: 1})

	// Chunks that overlap: each holds, at its own positions, the grants'
	// keys there, and the grants are as many as the chunks' n together,
	// but position 4 is in no chunk and its grant (9) is no target.
	db.Exec(t, `UPDATE coupon_grants_target_chunks SET key_1 = '{5,7}' WHERE campaign_id = 'spring' AND first_pos = 3`)
	db.Exec(t, `DELETE FROM coupon_grants_target_chunks WHERE campaign_id = 'spring'`)
	db.Exec(t, `INSERT INTO coupon_grants_target_chunks (campaign_id, first_pos, n, key_1) VALUES ('spring', 0, 3, '{1,2,3}'), ('spring', 2, 2, '{3,5}')`)
	db.Exec(t, `UPDATE coupon_grants SET member_id = 9 WHERE campaign_id = 'spring' AND member_id = 7`)
	check("overlapping chunks", false, Counts{Targets: 5, Granted: 5, Extra: 1})
}
