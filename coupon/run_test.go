package coupon_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/coupon"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/plan"
	"github.com/syncd/syncd/runlock"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func storedCampaign(t *testing.T, db *pgtest.DB) (asOf time.Time, cursor []string) {
	t.Helper()
	if err := db.Pool.QueryRow(context.Background(), "SELECT as_of, cursor FROM public.syncd_campaigns WHERE campaign_id = $1", campaignID).Scan(&asOf, &cursor); err != nil {
		t.Fatalf("read campaign row: %v", err)
	}
	return asOf, cursor
}

func state(t *testing.T, store *watermark.Store) watermark.State {
	t.Helper()
	st, _, err := store.Get("comeback")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestGrantsExactlyOnceUnderChurn: a run stopped after 3 pages, purchases,
// new dormant members and sign-ups committed between every page, a second
// run to the end and a third after success. Every member dormant at as_of
// gets exactly one coupon, nobody else gets one, and the last run grants 0.
func TestGrantsExactlyOnceUnderChurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const size = 500
	db, want, cfg, store := campaignSetup(t, size)

	stop := make(chan struct{})
	res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet, Stop: stop,
		Test: syncer.TestSignals{AfterCommit: func(_ context.Context, at syncer.Commit) error {
			if at.Page == 3 {
				close(stop)
			}
			return churn(ctx, db)
		}}})
	if !errors.Is(err, syncer.ErrStopped) || res.Pages != 3 {
		t.Fatalf("stopped run: %d pages, err %v; want 3 pages and ErrStopped", res.Pages, err)
	}
	checkExact(t, db, want[:3*size])
	asOf1, cursor := storedCampaign(t, db)
	if st := state(t, store); !slices.Equal(cursor, []string{fmt.Sprint(want[3*size-1])}) || !slices.Equal(st.Cursor, cursor) {
		t.Fatalf("after 3 pages the progress is %v and the watermark %v; want [%d] for both", cursor, st.Cursor, want[3*size-1])
	}

	started := time.Now()
	res, err = syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet,
		Test: syncer.TestSignals{AfterCommit: func(context.Context, syncer.Commit) error { return churn(ctx, db) }}})
	elapsed := time.Since(started)
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	checkExact(t, db, want)
	rest := int64(len(want) - 3*size)
	if res.Pages != pagesFor(rest, size) || res.Rows != rest || res.Written != rest {
		t.Fatalf("second run: %d pages, %d targets read, %d new grants; want %d, %d, %d", res.Pages, res.Rows, res.Written, pagesFor(rest, size), rest, rest)
	}
	if c := res.Campaign; c == nil || c.Targets != int64(len(want)) || c.Granted != int64(len(want)) || c.Missing != 0 || c.Extra != 0 || c.Frozen {
		t.Fatalf("campaign stats %+v; want %d targets all granted, not frozen again", c, len(want))
	}
	if asOf2, _ := storedCampaign(t, db); !asOf2.Equal(asOf1) || !res.Campaign.AsOf.Equal(asOf1) {
		t.Fatalf("as_of moved from %s to %s on the second run", asOf1, asOf2)
	}
	if st := state(t, store); st.LastStatus != "ok" || st.Campaign != campaignID || st.TotalRows != int64(len(want)) {
		t.Fatalf("state after success: status %q, campaign %q, total %d; want ok, %s, %d", st.LastStatus, st.Campaign, st.TotalRows, campaignID, len(want))
	}
	t.Logf("%d targets, %d pages of %d in %s (%.0f pages/s with churn between pages)", len(want), res.Pages, size, elapsed.Round(time.Millisecond), float64(res.Pages)/elapsed.Seconds())

	res, err = syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
	if err != nil || res.Pages != 0 || res.Written != 0 {
		t.Fatalf("run after success: %d pages, %d new grants, err %v; want 0, 0, nil", res.Pages, res.Written, err)
	}
	checkExact(t, db, want)
	var status string
	var missing, extra int64
	if err := db.Pool.QueryRow(ctx, "SELECT status, missing, extra FROM public.syncd_campaigns WHERE campaign_id = $1", campaignID).Scan(&status, &missing, &extra); err != nil || status != coupon.StatusDone || missing != 0 || extra != 0 {
		t.Fatalf("campaign row: status %q missing %d extra %d (%v); want done, 0, 0", status, missing, extra, err)
	}
}

// TestFailedPageLeavesNoTrace: a page whose transaction fails (as a crash
// before the commit would) leaves neither its grants nor its progress nor
// its watermark; the next run grants it.
func TestFailedPageLeavesNoTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const size = 500
	db, want, cfg, store := campaignSetup(t, size)
	calls := 0
	crash := syncer.TestSignals{Plan: plan.TestSignals{BeforeCommit: func(context.Context, string) error {
		calls++
		if calls == 3 {
			return errors.New("injected crash before the commit of page 3")
		}
		return nil
	}}}
	_, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet, Test: crash})
	if err == nil || !strings.Contains(err.Error(), "injected crash") {
		t.Fatalf("run with a failing page 3: err %v; want the injected crash", err)
	}
	checkExact(t, db, want[:2*size])
	_, cursor := storedCampaign(t, db)
	st := state(t, store)
	if w := []string{fmt.Sprint(want[2*size-1])}; !slices.Equal(cursor, w) || !slices.Equal(st.Cursor, w) {
		t.Fatalf("after the failed page 3 the progress is %v and the watermark %v; want %v for both", cursor, st.Cursor, w)
	}
	if st.LastStatus != "failed" {
		t.Fatalf("status after the failed page: %q; want failed", st.LastStatus)
	}
	res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
	if err != nil {
		t.Fatalf("re-run: %v", err)
	}
	checkExact(t, db, want)
	if res.Written != int64(len(want)-2*size) {
		t.Fatalf("re-run made %d new grants; want %d", res.Written, len(want)-2*size)
	}
}

// TestMissingOrExtraGrantFailsRun: done means reconciled. A grant deleted
// behind the progress cursor and a grant to a non-target make the run fail
// (status failed, counts exported); reconcile lists both and --repair
// grants the missing one but never revokes.
func TestMissingOrExtraGrantFailsRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, want, cfg, store := campaignSetup(t, 1000)
	if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	lost := want[len(want)/2]
	stranger := ids(t, db, "SELECT min(member_id) FROM public.members WHERE last_purchase_at > now() - interval '180 days'")[0]
	db.Exec(t, "DELETE FROM public.coupon_grants WHERE campaign_id = $1 AND member_id = $2", campaignID, lost)
	db.Exec(t, "INSERT INTO public.coupon_grants (campaign_id, member_id) VALUES ($1, $2)", campaignID, stranger)

	res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
	wantMsg := fmt.Sprintf("campaign %s: 1 of %d targets have no grant and 1 grants are not targets", campaignID, len(want))
	if !errors.Is(err, coupon.ErrNotReconciled) || !strings.Contains(err.Error(), wantMsg) || !strings.Contains(err.Error(), "syncd reconcile --source comeback") {
		t.Fatalf("run with a missing and an extra grant: err %v; want %q", err, wantMsg)
	}
	if c := res.Campaign; c == nil || c.Missing != 1 || c.Extra != 1 {
		t.Fatalf("campaign stats %+v; want missing 1, extra 1", c)
	}
	if st := state(t, store); st.LastStatus != "failed" || !strings.Contains(st.LastError, wantMsg) {
		t.Fatalf("state: status %q error %q; want failed with %q", st.LastStatus, st.LastError, wantMsg)
	}

	rep, err := coupon.Reconcile(ctx, cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Source != "comeback" || rep.Missing != 1 || rep.Extra != 1 || rep.Changed != 0 || rep.Repaired ||
		!slices.Equal(rep.Keys.Missing, []string{fmt.Sprint(lost)}) || !slices.Equal(rep.Keys.Extra, []string{fmt.Sprint(stranger)}) {
		t.Fatalf("reconcile report %+v; want missing [%d], extra [%d]", rep, lost, stranger)
	}
	rep, err = coupon.Reconcile(ctx, cfg, true)
	if err != nil || !rep.Repaired || rep.Missing != 1 {
		t.Fatalf("reconcile --repair: %+v, %v; want repaired, 1 missing found", rep, err)
	}
	checkExact(t, db, slices.Sorted(slices.Values(append(slices.Clone(want), stranger))))
	if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet}); !errors.Is(err, coupon.ErrNotReconciled) {
		t.Fatalf("run with an extra grant left: err %v; want ErrNotReconciled (extras are never revoked by syncd)", err)
	}
	db.Exec(t, "DELETE FROM public.coupon_grants WHERE campaign_id = $1 AND member_id = $2", campaignID, stranger)
	res, err = syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
	if err != nil || res.Written != 0 {
		t.Fatalf("run after the extra grant was revoked: %d new grants, err %v; want 0, nil", res.Written, err)
	}
	checkExact(t, db, want)
}

// TestGrantAheadOfTheRunIsKept: a grant that already exists ahead of the
// progress cursor (another run or a repair got there first) makes the
// page's plain INSERT fail on the primary key; the page is applied again
// with ON CONFLICT DO NOTHING, the run succeeds, every target has exactly
// one grant, the earlier grant keeps its granted_at, and the new-grant count
// leaves it out.
func TestGrantAheadOfTheRunIsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const size = 500
	db, want, cfg, store := campaignSetup(t, size)
	ahead := want[size+size/2] // in page 2
	calls := 0
	test := syncer.TestSignals{Plan: plan.TestSignals{BeforeCommit: func(context.Context, string) error {
		calls++
		if calls == 1 {
			// Committed by another session while page 1 is in flight.
			db.Exec(t, "INSERT INTO public.coupon_grants (campaign_id, member_id, granted_at) VALUES ($1, $2, '2000-01-01 00:00:00+00')", campaignID, ahead)
		}
		return nil
	}}}
	res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet, Test: test})
	if err != nil {
		t.Fatalf("run with a grant ahead of it: %v", err)
	}
	checkExact(t, db, want)
	if res.Written != int64(len(want)-1) {
		t.Fatalf("the run made %d new grants; want %d (every target but the one granted ahead)", res.Written, len(want)-1)
	}
	if n := count(t, db, fmt.Sprintf("SELECT count(*) FROM public.coupon_grants WHERE campaign_id = '%s' AND member_id = %d AND granted_at = '2000-01-01 00:00:00+00'", campaignID, ahead)); n != 1 {
		t.Fatalf("the grant made ahead of the run was rewritten (%d rows keep its granted_at; want 1)", n)
	}
}

// The run lock lives on the session that writes the grants: inside a page,
// the holder of the campaign's advisory lock is the backend with the page's
// transaction open, so losing that session loses the lock with the page.
func TestRunLockOnTheGrantsSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const size = 500
	db, want, cfg, store := campaignSetup(t, size)
	var holders, writers []int32
	test := syncer.TestSignals{Plan: plan.TestSignals{BeforeCommit: func(context.Context, string) error {
		var h, w int32
		err := db.Pool.QueryRow(ctx, `SELECT
  (SELECT l.pid FROM pg_locks l, (SELECT hashtextextended($1, 0) AS k) k
   WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
     AND l.classid::bigint = (k.k >> 32) & 4294967295 AND l.objid::bigint = k.k & 4294967295),
  (SELECT a.pid FROM pg_stat_activity a WHERE a.datname = current_database() AND a.application_name = 'syncd'
     AND a.state = 'idle in transaction' AND a.backend_xid IS NOT NULL LIMIT 1)`,
			runlock.Key(syncer.LockTarget(coupon.Kind(), cfg))).Scan(&h, &w)
		holders, writers = append(holders, h), append(writers, w)
		return err
	}}}
	if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet, Test: test}); err != nil {
		t.Fatal(err)
	}
	checkExact(t, db, want)
	if len(holders) == 0 {
		t.Fatal("no page ran")
	}
	for i := range holders {
		if holders[i] == 0 || holders[i] != writers[i] {
			t.Fatalf("page %d: the run lock is held by backend %d, the grants are written by backend %d; want the same session", i+1, holders[i], writers[i])
		}
	}
}

// The freeze reads the targets' keys distinct: by ORDER BY alone when the
// key is NOT NULL and unique in the source (the members' primary key, on a
// plain or a partitioned table), by GROUP BY otherwise: a key column that may be NULL, made unique by a
// UNIQUE constraint instead of a primary key, and a table with an
// inheritance child (read with the parent, outside its primary key) that
// holds a member the parent holds too. Every way grants every target
// exactly once, at page sizes that split the targets into several chunks.
func TestFreezeWithAndWithoutANotNullUniqueKey(t *testing.T) {
	t.Parallel()
	for _, layout := range []string{"primary key", "partitioned", "nullable unique", "inheritance child"} {
		t.Run(layout, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, want, cfg, store := campaignSetup(t, 700)
			switch layout {
			case "nullable unique":
				db.Exec(t, `ALTER TABLE public.members DROP CONSTRAINT members_pkey;
ALTER TABLE public.members ALTER COLUMN member_id DROP NOT NULL;
ALTER TABLE public.members ADD CONSTRAINT members_member_id_key UNIQUE (member_id)`)
			case "partitioned":
				db.Exec(t, fmt.Sprintf(`ALTER TABLE public.members RENAME TO members_plain;
CREATE TABLE public.members (LIKE public.members_plain INCLUDING ALL) PARTITION BY RANGE (member_id);
CREATE TABLE public.members_low PARTITION OF public.members FOR VALUES FROM (MINVALUE) TO (%d);
CREATE TABLE public.members_high PARTITION OF public.members FOR VALUES FROM (%d) TO (MAXVALUE);
INSERT INTO public.members SELECT * FROM public.members_plain;
DROP TABLE public.members_plain`, members/2, members/2))
			case "inheritance child":
				db.Exec(t, fmt.Sprintf(`CREATE TABLE public.members_archive () INHERITS (public.members);
INSERT INTO public.members_archive SELECT * FROM public.members WHERE member_id = %d;
INSERT INTO public.members_archive VALUES (%d, now(), now() - interval '400 days')`, want[0], members+1))
				want = append(want, members+1)
			}
			if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet}); err != nil {
				t.Fatal(err)
			}
			checkExact(t, db, want)
			var targets, chunks int64
			if err := db.Pool.QueryRow(ctx, "SELECT targets FROM public.syncd_campaigns WHERE campaign_id = $1", campaignID).Scan(&targets); err != nil {
				t.Fatal(err)
			}
			if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM public.coupon_grants_target_chunks WHERE campaign_id = $1", campaignID).Scan(&chunks); err != nil {
				t.Fatal(err)
			}
			if targets != int64(len(want)) || chunks < 2 {
				t.Fatalf("frozen %d targets in %d chunks; want %d targets in several chunks", targets, chunks, len(want))
			}
		})
	}
}
