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
// targets table has statistics, so a deep keyset page reads the primary key
// in order instead of sorting the campaign's targets (the incident's
// 112 ms per page against under 1 ms).
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
	rows, err := db.Pool.Query(ctx, "EXPLAIN SELECT member_id FROM public.coupon_grants_targets WHERE campaign_id = $1 AND member_id > $2::text::bigint ORDER BY member_id LIMIT 500", campaignID, fmt.Sprint(want[len(want)/2]))
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	if strings.Contains(plan, "Sort") || !strings.Contains(plan, "coupon_grants_targets_pkey") {
		t.Fatalf("a keyset page of the targets does not read the primary key in order:\n%s", plan)
	}
	var reltuples float64
	if err := db.Pool.QueryRow(ctx, "SELECT reltuples FROM pg_class WHERE oid = 'public.coupon_grants_targets'::regclass").Scan(&reltuples); err != nil {
		t.Fatal(err)
	}
	if int(reltuples) != len(want) {
		t.Fatalf("targets table statistics say %v rows; want %d (ANALYZE after the freeze)", reltuples, len(want))
	}
}
