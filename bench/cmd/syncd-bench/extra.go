package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// notInBuild reports whether a syncd failure means the command or sink
// type does not exist in this build (usage or config error, exit 2).
func notInBuild(r syncdResult, err error) bool {
	return err != nil && r.exit == 2 && (strings.Contains(err.Error(), "not available") || strings.Contains(err.Error(), "not supported"))
}

// coupon measures a coupon campaign over 300k members (40% dormant; the
// default configuration: grant pages of the default sink.grant_page_size)
// against one INSERT ... SELECT.
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
	for _, t := range []string{"grants_lim", "grants_lim_new"} {
		_, err = b.src.Exec(ctx, `CREATE TABLE `+t+` (campaign_id text, member_id bigint, granted_at timestamptz NOT NULL, PRIMARY KEY (campaign_id, member_id))`)
		if err != nil {
			return err
		}
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
	limit := "INSERT INTO %s (campaign_id, member_id, granted_at) SELECT $1, member_id, now() FROM members WHERE " + strings.ReplaceAll(where, ":as_of", "now()")
	var syn, lim, fresh []time.Duration
	for i := range b.o.runs {
		camp := fmt.Sprintf("camp-%d", i+1)
		cfg, err := b.writeConfig(camp, fmt.Sprintf(`name: %s
schedule: "0 2 1 10 *"
source:
  dsn: %s
  table: public.members
  cursor: [member_id]
  where: "%s"
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
			t.missing("coupon campaign", "the coupon_grants sink is not in this build")
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
		if _, err := b.src.Exec(ctx, fmt.Sprintf(limit, "grants_lim"), camp); err != nil {
			return err
		}
		lim = append(lim, time.Since(start))
		// The same statement as the first of a new session (syncd's
		// sessions are new in every run --once; the limit's is not), for
		// the note: not the limit.
		f, err := b.firstStatement(ctx, fmt.Sprintf(limit, "grants_lim_new"), camp)
		if err != nil {
			return err
		}
		fresh = append(fresh, f)
		fmt.Fprintf(os.Stderr, "  campaign %d: syncd %s, limit %s (on a new session %s)\n", i+1, fmtDur(r.wall), fmtDur(lim[i]), fmtDur(f))
	}
	s, l := median(syn), median(lim)
	t.add(row{
		name:   fmt.Sprintf("coupon campaign, %s members, %d targets, default grant pages", fmtRows(n), targets),
		syncd:  fmtDur(s),
		limit:  fmtDur(l),
		ratio:  fmt.Sprintf("%.2f", s.Seconds()/l.Seconds()),
		target: "<= 2.00 (time)",
		note:   fmt.Sprintf("runs syncd %s, limit %s; the limit's statement as the first of a new session %s", durs(syn), durs(lim), durs(fresh)),
	})
	return nil
}

// firstStatement times q as the first statement of a new session on the
// source database, after a checkpoint (the connection is not timed).
func (b *bench) firstStatement(ctx context.Context, q string, args ...any) (time.Duration, error) {
	conn, err := pgx.Connect(ctx, b.url(b.srcDB))
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := b.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return 0, err
	}
	start := time.Now()
	if _, err := conn.Exec(ctx, q, args...); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}
