package coupon_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/syncer"
)

// TestTargetsAreAnalyzedAndPagesUseTheIndex: right after the freeze the
// targets table has statistics, so a deep grant page (where it ends, and
// its INSERT ... SELECT) reads the primary key in order instead of sorting
// the campaign's remaining targets (the incident's 112 ms per page against
// under 1 ms). Without statistics both sort (measured: a span read 4-8x
// slower at 120,000 targets), which costs more than the ANALYZE.
func TestTargetsAreAnalyzedAndPagesUseTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	want := newMembers(t, db)
	stop := make(chan struct{})
	close(stop) // freeze, then stop before the first page
	_, err := syncer.Run(ctx, syncer.Options{Config: parseConfig(t, configYAML(db, db, 500)), Store: openStore(t), Logger: quiet, Stop: stop})
	if err != syncer.ErrStopped {
		t.Fatalf("run: %v; want ErrStopped", err)
	}
	after, upTo := fmt.Sprint(want[len(want)/2]), fmt.Sprint(want[len(want)/2+500])
	for i, q := range []string{
		// Where the page ends (Grants.ReadSpan); the outer sort picks the
		// last of the page's keys.
		"SELECT member_id::text, count(*) OVER () FROM (SELECT member_id FROM public.coupon_grants_targets WHERE campaign_id = $1 AND member_id > $2::text::bigint ORDER BY member_id LIMIT 500) s ORDER BY s.member_id DESC LIMIT 1",
		// The page's grants (Grants.Apply of a span).
		"INSERT INTO public.coupon_grants (campaign_id, member_id, granted_at) SELECT $1, t.member_id, now() FROM public.coupon_grants_targets t WHERE t.campaign_id = $1 AND t.member_id <= $3::text::bigint AND t.member_id > $2::text::bigint ORDER BY t.member_id ON CONFLICT (campaign_id, member_id) DO NOTHING",
	} {
		args := []any{campaignID, after, upTo}[:2+i]
		rows, err := db.Pool.Query(ctx, "EXPLAIN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		if !strings.Contains(plan, "coupon_grants_targets_pkey") || strings.Contains(plan, "Seq Scan") {
			t.Fatalf("a grant page does not read the targets' primary key:\n%s", plan)
		}
		if i == 1 {
			// Both ends of the page bound the index scan: a sort, if the
			// planner picks one, sorts the page's targets only.
			continue
		}
		for _, l := range lines {
			if strings.Contains(l, "Sort Key:") && !strings.HasSuffix(strings.TrimSpace(l), "DESC") {
				t.Fatalf("where a grant page ends is found by sorting the remaining targets instead of reading the primary key in order:\n%s", plan)
			}
		}
	}
	var reltuples float64
	if err := db.Pool.QueryRow(ctx, "SELECT reltuples FROM pg_class WHERE oid = 'public.coupon_grants_targets'::regclass").Scan(&reltuples); err != nil {
		t.Fatal(err)
	}
	if int(reltuples) != len(want) {
		t.Fatalf("targets table statistics say %v rows; want %d (ANALYZE after the freeze)", reltuples, len(want))
	}
}
