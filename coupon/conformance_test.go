package coupon_test

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/syncd/syncd/coupon"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/sink/sinktest"
)

// TestGrantsConformance runs the sink suite on the coupon_grants sink. A
// page's "version" is irrelevant for grants: a key is granted once, so the
// destination holds one line per key ever applied.
func TestGrantsConformance(t *testing.T) {
	t.Parallel()
	sinktest.Exercise(t, func(t *testing.T) sinktest.Harness {
		db := pgtest.NewDB(t)
		db.Exec(t, "CREATE TABLE public.members (member_id bigint PRIMARY KEY, last_purchase_at timestamptz NOT NULL)")
		cfg := parseConfig(t, configYAML(db, db, 100))
		return sinktest.Harness{
			Columns: []page.Column{{Name: "member_id", Type: "bigint", NotNull: true}},
			// Every grant commits durably, pages are text, and the
			// grants session holds the campaign's run lock.
			Has: sinktest.Capabilities{LockHolder: true},
			Open: func(t *testing.T) sink.Sink {
				g, err := coupon.Open(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				return g
			},
			Page: func(keys []int64, _ int) page.Page {
				var p page.Page
				for _, k := range keys {
					p.Rows = append(p.Rows, [][]byte{[]byte(fmt.Sprint(k))})
				}
				if len(keys) > 0 {
					p.Last = []string{fmt.Sprint(keys[len(keys)-1])}
				}
				return p
			},
			Contents: func(t *testing.T) []string {
				rows := ids(t, db, "SELECT member_id FROM public.coupon_grants WHERE campaign_id = $1", campaignID)
				out := make([]string, len(rows))
				for i, id := range rows {
					out[i] = fmt.Sprintf("%s/%d", campaignID, id)
				}
				if n := count(t, db, "SELECT count(*) FROM public.coupon_grants"); n != int64(len(out)) {
					t.Fatalf("%d grants in all, %d for the campaign", n, len(out))
				}
				sort.Strings(out)
				return out
			},
			Expect: func(state map[int64]int) []string {
				var out []string
				for k := range state {
					out = append(out, fmt.Sprintf("%s/%d", campaignID, k))
				}
				sort.Strings(out)
				return out
			},
		}
	})
}
