package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// notInBuild reports whether a syncd failure means the command or sink
// type does not exist in this build (usage or config error, exit 2).
func notInBuild(r syncdResult, err error) bool {
	return err != nil && r.exit == 2 && (strings.Contains(err.Error(), "not available") || strings.Contains(err.Error(), "not supported"))
}

// reconcile measures `syncd reconcile` on identical 1M-row tables and with
// 10 scattered differences, against one hash of every row on each side.
func (b *bench) reconcile(ctx context.Context, t *table) error {
	if err := b.ensureItems(ctx); err != nil {
		return err
	}
	cfg, err := b.itemsConfig("recon", "items", "items", 1000, "")
	if err != nil {
		return err
	}
	state := b.statePath("recon")
	args := []string{"reconcile", "--config", cfg, "--state", state, "--source", "recon", "--json"}
	if r, err := b.syncd(ctx, args...); notInBuild(r, err) {
		t.missing("reconcile, identical", "`syncd reconcile` is not in this build (issue 4)")
		t.missing("reconcile, 10 differences", "`syncd reconcile` is not in this build (issue 4)")
		return nil
	}
	// Reconcile covers what the watermark says was synced: sync the copy
	// with syncd itself.
	os.Remove(state)
	if err := b.emptyCopy(ctx, "items"); err != nil {
		return err
	}
	if _, err := b.syncd(ctx, "run", "--once", "--config", cfg, "--state", state); err != nil {
		return err
	}
	if _, err := b.dst.Exec(ctx, "VACUUM ANALYZE items"); err != nil {
		return err
	}
	ids := make([]int64, 10)
	for i := range ids {
		ids[i] = int64(i)*int64(b.rows)/10 + 7
	}
	for _, diffs := range []int{0, 10} {
		if diffs > 0 {
			if _, err := b.dst.Exec(ctx, "UPDATE items SET price = price + 0.01 WHERE id = ANY($1)", ids); err != nil {
				return err
			}
		}
		var syn, lim []time.Duration
		var fetched int64
		for range b.o.runs {
			d, err := b.hashBoth(ctx)
			if err != nil {
				return err
			}
			lim = append(lim, d)
			r, err := b.syncd(ctx, args...)
			if err != nil && !(diffs > 0 && r.exit == 1) {
				return err
			}
			var rep struct {
				Changed      int64 `json:"changed"`
				Missing      int64 `json:"missing"`
				Extra        int64 `json:"extra"`
				RowsFetched  int64 `json:"rows_fetched"`
				RowsCompared int64 `json:"rows_compared"`
			}
			if err := json.Unmarshal(r.stdout, &rep); err != nil {
				return fmt.Errorf("reconcile --json printed %q: %w", r.stdout, err)
			}
			if rep.Changed+rep.Missing+rep.Extra != int64(diffs) {
				return fmt.Errorf("reconcile found %d changed, %d missing, %d extra rows; want %d changed", rep.Changed, rep.Missing, rep.Extra, diffs)
			}
			if rep.RowsCompared != int64(b.rows) {
				return fmt.Errorf("reconcile compared %d rows of %d", rep.RowsCompared, b.rows)
			}
			fetched = rep.RowsFetched
			syn = append(syn, r.wall)
		}
		s, l := median(syn), median(lim)
		name, target := "reconcile, identical, "+fmtRows(b.rows)+" rows", "<= 2.00 (time)"
		if diffs > 0 {
			name, target = "reconcile, 10 differences, "+fmtRows(b.rows)+" rows", "fetched < 1%"
		}
		t.add(row{
			name: name, syncd: fmtDur(s), limit: fmtDur(l),
			ratio:  fmt.Sprintf("%.2f", s.Seconds()/l.Seconds()),
			target: target,
			note:   fmt.Sprintf("rows fetched %d (%.3f%% of the table); runs syncd %s, limit %s", fetched, 100*float64(fetched)/float64(b.rows), durs(syn), durs(lim)),
		})
	}
	_, err = b.dst.Exec(ctx, "UPDATE items SET price = price - 0.01 WHERE id = ANY($1)", ids)
	return err
}

// hashBoth is the reconcile limit: SELECT sum(hashtext(t::text)) on each
// side at the same time.
func (b *bench) hashBoth(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, c := range []*pgx.Conn{b.src, b.dst} {
		wg.Go(func() {
			var s *int64
			errs[i] = c.QueryRow(ctx, "SELECT sum(hashtext(t::text)) FROM items t").Scan(&s)
		})
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		return 0, fmt.Errorf("limit hash: %v %v", errs[0], errs[1])
	}
	return time.Since(start), nil
}

// coupon measures a coupon campaign over 300k members (40% dormant, pages
// of 1,000) against one INSERT ... SELECT.
func (b *bench) coupon(ctx context.Context, t *table) error {
	n := b.o.rows(300_000)
	_, err := b.src.Exec(ctx, `CREATE TABLE members (
  member_id bigint PRIMARY KEY,
  created_at timestamptz NOT NULL,
  last_purchase_at timestamptz NOT NULL,
  email text NOT NULL
)`)
	if err != nil {
		return err
	}
	_, err = b.src.Exec(ctx, `INSERT INTO members
SELECT i,
  CASE WHEN i % 5 < 2 THEN timestamptz '2024-01-01 00:00:00+00' ELSE timestamptz '2023-01-01 00:00:00+00' + i * interval '1 minute' END,
  CASE WHEN i % 5 IN (1, 3) THEN now() - interval '400 days' + (i % 100) * interval '1 day' ELSE now() - (i % 150) * interval '1 day' END,
  'member' || i || '@example.com'
FROM generate_series(1, $1::bigint) i`, n)
	if err != nil {
		return err
	}
	_, err = b.src.Exec(ctx, `CREATE TABLE grants_lim (campaign_id text, member_id bigint, granted_at timestamptz NOT NULL, PRIMARY KEY (campaign_id, member_id))`)
	if err != nil {
		return err
	}
	_, err = b.src.Exec(ctx, "VACUUM ANALYZE members")
	if err != nil {
		return err
	}
	const where = "last_purchase_at < :as_of - interval '180 days'"
	var targets int64
	if err := b.src.QueryRow(ctx, "SELECT count(*) FROM members WHERE "+strings.ReplaceAll(where, ":as_of", "now()")).Scan(&targets); err != nil {
		return err
	}
	var syn, lim []time.Duration
	for i := range b.o.runs {
		camp := fmt.Sprintf("camp-%d", i+1)
		cfg, err := b.writeConfig(camp, fmt.Sprintf(`name: %s
schedule: "0 2 1 10 *"
source:
  dsn: %s
  table: public.members
  cursor: [member_id]
  where: "%s"
  page_size: 1000
sink:
  type: coupon_grants
  dsn: %s
  table: public.coupon_grants
  campaign: %s
`, camp, b.url(b.srcDB), where, b.url(b.srcDB), camp))
		if err != nil {
			return err
		}
		if _, err := b.admin.Exec(ctx, "CHECKPOINT"); err != nil {
			return err
		}
		r, err := b.syncd(ctx, "run", "--once", "--config", cfg, "--state", b.statePath("coupon"), "--source", camp)
		if notInBuild(r, err) {
			t.missing("coupon campaign", "the coupon_grants sink is not in this build (issue 6)")
			return nil
		}
		if err != nil {
			return err
		}
		var granted int64
		if err := b.src.QueryRow(ctx, "SELECT count(*) FROM coupon_grants WHERE campaign_id = $1", camp).Scan(&granted); err != nil {
			return err
		}
		if granted != targets {
			return fmt.Errorf("campaign %s granted %d coupons to %d targets", camp, granted, targets)
		}
		syn = append(syn, r.wall)
		if _, err := b.admin.Exec(ctx, "CHECKPOINT"); err != nil {
			return err
		}
		start := time.Now()
		if _, err := b.src.Exec(ctx, "INSERT INTO grants_lim (campaign_id, member_id, granted_at) SELECT $1, member_id, now() FROM members WHERE "+strings.ReplaceAll(where, ":as_of", "now()"), camp); err != nil {
			return err
		}
		lim = append(lim, time.Since(start))
		fmt.Fprintf(os.Stderr, "  campaign %d: syncd %s, limit %s\n", i+1, fmtDur(r.wall), fmtDur(lim[i]))
	}
	s, l := median(syn), median(lim)
	t.add(row{
		name:   fmt.Sprintf("coupon campaign, %s members, %d targets, page 1000", fmtRows(n), targets),
		syncd:  fmtDur(s),
		limit:  fmtDur(l),
		ratio:  fmt.Sprintf("%.2f", s.Seconds()/l.Seconds()),
		target: "<= 2.00 (time)",
		note:   fmt.Sprintf("runs syncd %s, limit %s", durs(syn), durs(lim)),
	})
	return nil
}
