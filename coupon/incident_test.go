package coupon_test

import (
	"context"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/syncer"
)

// incidentBatch is the batch of the incident, kept as a test fixture only:
// it pages with OFFSET over created_at, skipping members already granted
// with NOT EXISTS, so its own inserts shrink the set under the OFFSET.
func incidentBatch(t *testing.T, db *pgtest.DB, pageSize int) (pages, inserted int) {
	t.Helper()
	ctx := context.Background()
	db.Exec(t, `CREATE TABLE public.coupon_grants (
  campaign_id text NOT NULL, member_id bigint NOT NULL, granted_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (campaign_id, member_id))`)
	for page := 0; ; page++ {
		got := ids(t, db, `SELECT m.member_id FROM public.members m
WHERE m.last_purchase_at < now() - interval '180 days'
  AND NOT EXISTS (SELECT 1 FROM public.coupon_grants g WHERE g.campaign_id = $1 AND g.member_id = m.member_id)
ORDER BY m.created_at
LIMIT $2 OFFSET $3`, campaignID, pageSize, page*pageSize)
		if len(got) == 0 {
			return page, inserted
		}
		tag, err := db.Pool.Exec(ctx, "INSERT INTO public.coupon_grants (campaign_id, member_id) SELECT $1, unnest($2::bigint[])", campaignID, got)
		if err != nil {
			t.Fatal(err)
		}
		inserted += int(tag.RowsAffected())
	}
}

// TestIncidentReaderMissesHalf documents the failure syncd exists to
// prevent: the batch "finishes" having granted about half of the targets.
func TestIncidentReaderMissesHalf(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	want := newMembers(t, db)
	pages, inserted := incidentBatch(t, db, 500)
	got := granted(t, db)
	missed := len(diff(want, got))
	t.Logf("incident batch: %d targets, %d pages, %d granted, %d missed (%.0f%%)", len(want), pages, inserted, missed, 100*float64(missed)/float64(len(want)))
	if len(want) < members*35/100 || len(want) > members*45/100 {
		t.Fatalf("fixture has %d dormant members of %d; want about 40%%", len(want), members)
	}
	if missed*100 <= len(want)*30 {
		t.Fatalf("the OFFSET + NOT EXISTS batch missed only %d of %d targets; the fixture no longer reproduces the incident", missed, len(want))
	}
	if extra := diff(got, want); len(extra) != 0 {
		t.Fatalf("the incident batch granted %d non-targets", len(extra))
	}
}

// TestGrantsWhatABrokenBatchMissed runs syncd over the grants a broken
// batch left: the members it missed get their coupon, nobody gets a second.
func TestGrantsWhatABrokenBatchMissed(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	want := newMembers(t, db)
	_, before := incidentBatch(t, db, 500)
	store := openStore(t)
	cfg := parseConfig(t, configYAML(db, db, 1000))
	res, err := syncer.Run(context.Background(), syncer.Options{Kinds: kinds, Config: cfg, Store: store})
	if err != nil {
		t.Fatalf("run over the broken batch's grants: %v", err)
	}
	checkExact(t, db, want)
	if res.Written != int64(len(want)-before) {
		t.Fatalf("run made %d new grants; want %d (the %d targets the broken batch missed)", res.Written, len(want)-before, len(want)-before)
	}
	if res.Campaign == nil || res.Campaign.Targets != int64(len(want)) || res.Campaign.Granted != int64(len(want)) {
		t.Fatalf("campaign stats %+v; want %d targets, all granted", res.Campaign, len(want))
	}
}
