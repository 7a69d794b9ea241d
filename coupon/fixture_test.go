package coupon_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/coupon"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/watermark"
)

// kinds are the kinds of sink the tests' runs know, as syncd registers them.
var kinds = kind.NewRegistry(kind.Postgres(), coupon.Kind())

// The incident at test scale: 20,000 members, 40% of them migrated in the
// same second (one created_at), about 40% dormant (last purchase 400 days
// ago; the others 10 days ago, far from the 180-day line).
const (
	members    = 20_000
	campaignID = "comeback-2026-10"
)

const membersDDL = `
CREATE TABLE public.members (
  member_id        bigint PRIMARY KEY,
  created_at       timestamptz NOT NULL,
  last_purchase_at timestamptz NOT NULL
);
CREATE INDEX ON public.members (created_at);
INSERT INTO public.members
SELECT i,
  CASE WHEN i %% 5 < 2 THEN timestamptz '2019-04-01 00:00:00+00'
       ELSE timestamptz '2019-04-02 00:00:00+00' + i * interval '1 minute' END,
  CASE WHEN abs(hashint4(i)) %% 10 < 4 THEN now() - interval '400 days' - i * interval '1 second'
       ELSE now() - interval '10 days' END
FROM generate_series(1, %d) i;
ANALYZE public.members;`

// grantsDDL is the grants table as a run creates it, for tests that must
// reach it before the run does (a trigger, a transaction holding a key).
const grantsDDL = `CREATE TABLE public.coupon_grants (campaign_id text NOT NULL, member_id bigint NOT NULL,
  granted_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (campaign_id, member_id))`

const dormantWhere = "last_purchase_at < :as_of - interval '180 days'"

// newMembers creates and fills public.members and returns the members who
// are dormant now, before any run: the campaign's expected targets.
func newMembers(t *testing.T, db *pgtest.DB) []int64 {
	t.Helper()
	db.Exec(t, fmt.Sprintf(membersDDL, members))
	return dormantNow(t, db)
}

func dormantNow(t *testing.T, db *pgtest.DB) []int64 {
	t.Helper()
	return ids(t, db, "SELECT member_id FROM public.members WHERE last_purchase_at < now() - interval '180 days' ORDER BY member_id")
}

func ids(t *testing.T, db *pgtest.DB, q string, args ...any) []int64 {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return out
}

// churn commits what a live shop does between two pages: dormant members
// buy (they keep their coupon), active members turn dormant and dormant
// looking members sign up (neither gets one: they were not dormant at
// as_of). It returns nothing: the expected targets do not change.
func churn(ctx context.Context, db *pgtest.DB) error {
	_, err := db.Pool.Exec(ctx, `
UPDATE public.members SET last_purchase_at = now()
WHERE member_id IN (SELECT member_id FROM public.members WHERE last_purchase_at < now() - interval '180 days' ORDER BY random() LIMIT 7);
UPDATE public.members SET last_purchase_at = now() - interval '400 days'
WHERE member_id IN (SELECT member_id FROM public.members WHERE last_purchase_at > now() - interval '180 days' ORDER BY random() LIMIT 5);
INSERT INTO public.members
SELECT m.top + g, timestamptz '2019-04-01 00:00:00+00', now() - interval '400 days'
FROM (SELECT max(member_id) AS top FROM public.members) m, generate_series(1, 3) g;`)
	return err
}

// configYAML is a coupon source on members; sink is the grants database.
func configYAML(src, sink *pgtest.DB, pageSize int) string {
	return fmt.Sprintf(`name: comeback
source:
  dsn: %s
  table: public.members
  cursor: [member_id]
  where: "%s"
  page_size: %d
sink:
  type: coupon_grants
  dsn: %s
  table: public.coupon_grants
  campaign: %s
  grant_page_size: %d
`, src.URL, dormantWhere, pageSize, sink.URL, campaignID, pageSize)
}

func parseConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	c, err := config.Parse("comeback.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("parse config: %v", err)
	}
	return c
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "comeback.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func openStore(t *testing.T) *watermark.Store {
	t.Helper()
	s, err := watermark.Open(filepath.Join(t.TempDir(), "state.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// granted returns the member_ids granted in the campaign, sorted, and fails
// if any member has more than one grant.
func granted(t *testing.T, db *pgtest.DB) []int64 {
	t.Helper()
	var total, distinct int64
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*), count(DISTINCT member_id) FROM public.coupon_grants WHERE campaign_id = $1", campaignID).Scan(&total, &distinct); err != nil {
		t.Fatal(err)
	}
	if total != distinct {
		t.Fatalf("%d grants for %d members: some member has two coupons", total, distinct)
	}
	return ids(t, db, "SELECT member_id FROM public.coupon_grants WHERE campaign_id = $1 ORDER BY member_id", campaignID)
}

// checkExact asserts that exactly the expected members hold one grant.
func checkExact(t *testing.T, db *pgtest.DB, want []int64) {
	t.Helper()
	got := granted(t, db)
	if slices.Equal(got, want) {
		return
	}
	missing, extra := diff(want, got), diff(got, want)
	t.Fatalf("grants differ from the members dormant at as_of: %d targets, %d granted, %d missing (e.g. %v), %d extra (e.g. %v)",
		len(want), len(got), len(missing), head(missing), len(extra), head(extra))
}

// diff returns the elements of a (sorted) that are not in b (sorted).
func diff(a, b []int64) []int64 {
	var out []int64
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			out = append(out, x)
		}
	}
	return out
}

func head(s []int64) []int64 {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}

func pagesFor(n int64, size int) int64 { return (n + int64(size) - 1) / int64(size) }

// campaignSetup makes a members database, a campaign config on it with
// pages of size, and a state file; want is the expected targets.
func campaignSetup(t *testing.T, size int) (db *pgtest.DB, want []int64, cfg *config.Config, store *watermark.Store) {
	t.Helper()
	db = pgtest.NewDB(t)
	want = newMembers(t, db)
	return db, want, parseConfig(t, configYAML(db, db, size)), openStore(t)
}

// holdGrant inserts the grant of member in a transaction it leaves open,
// so that a run inserting that grant waits on it; the caller rolls the
// transaction back to let the run go on (the test's end does it too).
func holdGrant(t *testing.T, db *pgtest.DB, member int64) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, "INSERT INTO public.coupon_grants (campaign_id, member_id) VALUES ($1, $2)", campaignID, member); err != nil {
		t.Fatal(err)
	}
	return tx
}
