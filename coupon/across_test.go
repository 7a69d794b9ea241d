package coupon_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/syncer"
)

const accountsDDL = `
CREATE TABLE public.accounts (
  region           text NOT NULL,
  member_id        bigint NOT NULL,
  last_purchase_at timestamptz NOT NULL,
  PRIMARY KEY (region, member_id)
);
INSERT INTO public.accounts
SELECT r, i, CASE WHEN (i + length(r)) % 3 = 0 THEN now() - interval '10 days' ELSE now() - interval '400 days' END
FROM unnest(ARRAY['eu', 'jp', 'us']) r, generate_series(1, 20) i;`

func accountsYAML(src, sink *pgtest.DB, pageSize int, where string) string {
	return fmt.Sprintf(`name: comeback
source:
  dsn: %s
  table: public.accounts
  cursor: [region, member_id]
  where: "%s"
  page_size: %d
sink:
  type: coupon_grants
  dsn: %s
  table: grants.region_coupons
  campaign: %s
  grant_page_size: %d
`, src.URL, where, pageSize, sink.URL, campaignID, pageSize)
}

func keyRows(t *testing.T, db *pgtest.DB, q string) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCompositeKeyAcrossDatabases: the targets are streamed with COPY from
// another database, the key is composite (row-value keyset) and pages hold
// one target each, so every page must advance past the last.
func TestCompositeKeyAcrossDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, accountsDDL)
	dst.Exec(t, "CREATE SCHEMA grants")
	want := keyRows(t, src, "SELECT region || ',' || member_id FROM public.accounts WHERE last_purchase_at < now() - interval '180 days' ORDER BY region, member_id")
	cfg := parseConfig(t, accountsYAML(src, dst, 1, dormantWhere))
	store := openStore(t)
	res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	got := keyRows(t, dst, "SELECT region || ',' || member_id FROM grants.region_coupons WHERE campaign_id = '"+campaignID+"' ORDER BY region, member_id")
	if !slices.Equal(got, want) || res.Pages != int64(len(want)) || res.Written != int64(len(want)) {
		t.Fatalf("grants %d (%v...), pages %d, new %d; want %d grants in %d pages", len(got), got[:min(3, len(got))], res.Pages, res.Written, len(want), len(want))
	}
	if n := keyRows(t, dst, "SELECT sum(n)::text FROM grants.region_coupons_target_chunks"); n[0] != fmt.Sprint(len(want)) {
		t.Fatalf("target chunks hold %s targets; want %d", n[0], len(want))
	}
	res, err = syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
	if err != nil || res.Pages != 0 || res.Written != 0 {
		t.Fatalf("run after success: %d pages, %d new, err %v; want 0, 0, nil", res.Pages, res.Written, err)
	}
}

// TestFailedFreezeLeavesNothing: a freeze that fails halfway through
// streaming the targets (here a division by zero in where at one member)
// leaves no campaign row and no targets; the next run freezes again.
func TestFailedFreezeLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	want := newMembers(t, src)
	bad := fmt.Sprintf("1 / (member_id - %d) <> 0 AND %s", want[len(want)-2], dormantWhere)
	yaml := strings.Replace(configYAML(src, dst, 1000), dormantWhere, bad, 1)
	store := openStore(t)
	_, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: parseConfig(t, yaml), Store: store, Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "division by zero") || !strings.Contains(err.Error(), "nothing was frozen, the next run freezes again") {
		t.Fatalf("run with a failing where: err %v; want a division by zero and nothing frozen", err)
	}
	for _, q := range []string{"SELECT count(*) FROM public.syncd_campaigns", "SELECT count(*) FROM public.coupon_grants_target_chunks", "SELECT count(*) FROM public.coupon_grants"} {
		if n := count(t, dst, q); n != 0 {
			t.Fatalf("%s = %d after a failed freeze; want 0", q, n)
		}
	}
	if st := state(t, store); st.LastStatus != "failed" {
		t.Fatalf("status %q; want failed", st.LastStatus)
	}
	if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: parseConfig(t, configYAML(src, dst, 1000)), Store: store, Logger: quiet}); err != nil {
		t.Fatalf("run after fixing where: %v", err)
	}
	checkExact(t, dst, want)
}

// TestFrozenCampaignRefusesAChangedWhere: the stored targets would no longer
// match a changed where clause, so the run stops with a config error.
func TestFrozenCampaignRefusesAChangedWhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := pgtest.NewDB(t)
	src.Exec(t, accountsDDL)
	store := openStore(t)
	if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: parseConfig(t, accountsYAML(src, src, 100, dormantWhere)), Store: store, Logger: quiet}); err == nil {
		t.Fatal("run into a missing schema succeeded")
	}
	src.Exec(t, "CREATE SCHEMA grants")
	if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: parseConfig(t, accountsYAML(src, src, 100, dormantWhere)), Store: store, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	_, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: parseConfig(t, accountsYAML(src, src, 100, "region = 'jp'")), Store: store, Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "comeback.yaml") || !strings.Contains(err.Error(), "a frozen campaign cannot change") {
		t.Fatalf("run with a changed where: %v; want a config error naming the file", err)
	}
	if !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("error %v is not a config error (exit 2)", err)
	}
}
