package coupon_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/plan"
	"github.com/syncd/syncd/syncer"
)

// frozenPath is the path of the "campaign frozen" record of a finished
// run ("" when it has none).
func frozenPath(p *testutil.Process) string {
	e, ok := p.Output.Find("campaign frozen")
	if !ok {
		return ""
	}
	return e.Text("path")
}

// TestGrantPathFollowsTheDatabase: through the real binary, a campaign
// whose targets and grants are in one database, read as one role, is
// frozen and its first page granted by that database ("path":
// "in-database", the freeze's page counted in the campaign's pages); one
// across two databases, or in one database but read as another role, has
// its keys streamed from the source session ("streamed"). Each grants
// exactly the targets.
func TestGrantPathFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"one database", "two databases", "one database, two roles"} {
		t.Run(c, func(t *testing.T) {
			t.Parallel()
			src := pgtest.NewDB(t)
			dst := src
			var want []int64
			srcURL := src.URL
			wantPath := "streamed"
			switch c {
			case "one database":
				want = newMembers(t, src)
				wantPath = "in-database"
			case "two databases":
				want = newMembers(t, src)
				dst = pgtest.NewDB(t)
			case "one database, two roles":
				srcURL, want = tenantMembers(t, src)
			}
			const size = 1000
			yaml := strings.Replace(configYAML(src, dst, size), "dsn: "+src.URL+"\n  table: public.members", "dsn: "+srcURL+"\n  table: public.members", 1)
			p := bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", writeConfig(t, yaml), "--state", filepath.Join(t.TempDir(), "state.db"))
			if r := p.Wait(t, 2*time.Minute); r.Code != 0 {
				t.Fatalf("campaign run: %s", r)
			}
			if got := frozenPath(p); got != wantPath {
				t.Fatalf("campaign frozen with path %q; want %q\n%s", got, wantPath, p.Output)
			}
			checkExact(t, dst, want)
			var pages int64
			if err := dst.Pool.QueryRow(context.Background(), "SELECT pages FROM public.syncd_campaigns WHERE campaign_id = $1", campaignID).Scan(&pages); err != nil {
				t.Fatal(err)
			}
			if w := pagesFor(int64(len(want)), size); pages != w {
				t.Fatalf("the campaign row counts %d pages; want %d (the freeze's page included)", pages, w)
			}
		})
	}
}

// TestFailedInDatabaseFreezeLeavesNothing: in one database the first page
// commits with the freeze; when that transaction fails before its commit
// (as a crash there would), neither the campaign row nor a chunk nor a
// grant nor a watermark remains, and the next run freezes and grants every
// target once.
func TestFailedInDatabaseFreezeLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, want, cfg, store := campaignSetup(t, 500)
	crash := syncer.TestSignals{Plan: plan.TestSignals{BeforeCommit: func(context.Context, string) error {
		return errors.New("injected crash before the freeze commits")
	}}}
	if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet, Test: crash}); err == nil || !strings.Contains(err.Error(), "injected crash") {
		t.Fatalf("run whose freeze fails: err %v; want the injected crash", err)
	}
	for _, q := range []string{"SELECT count(*) FROM public.syncd_campaigns", "SELECT count(*) FROM " + advChunks, "SELECT count(*) FROM public.coupon_grants"} {
		if n := count(t, db, q); n != 0 {
			t.Fatalf("%s = %d after a freeze that did not commit; want 0", q, n)
		}
	}
	if st := state(t, store); st.Cursor != nil || st.Campaign != "" {
		t.Fatalf("watermark %v, campaign %q after a freeze that did not commit; want none", st.Cursor, st.Campaign)
	}
	res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
	if err != nil {
		t.Fatalf("re-run: %v", err)
	}
	checkExact(t, db, want)
	if res.Written != int64(len(want)) || res.Pages != pagesFor(int64(len(want)), 500) || !res.Campaign.Frozen {
		t.Fatalf("re-run: %d new grants in %d pages, frozen %v; want %d in %d, frozen", res.Written, res.Pages, res.Campaign.Frozen, len(want), pagesFor(int64(len(want)), 500))
	}
}

// TestKillInsideTheInDatabaseFreeze: the real binary is killed (SIGKILL)
// while the one statement that freezes the campaign and grants its first
// page waits on a grant of one of that page's targets that another
// transaction holds. Nothing of the killed freeze remains; the targets
// then change (purchases, new dormant members, sign-ups), and a re-run
// freezes the members dormant at its own start, grants each of them once
// while the targets keep changing, and a run after it grants 0.
func TestKillInsideTheInDatabaseFreeze(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	first := newMembers(t, db)
	cfgPath := writeConfig(t, configYAML(db, db, 1000))
	statePath := filepath.Join(t.TempDir(), "state.db")
	db.Exec(t, grantsDDL)
	blocker := holdGrant(t, db, first[10])

	p := bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgPath, "--state", statePath)
	p.Eventually(t, time.Minute, "the freeze's statement waiting on the held grant", func() bool {
		return advWaiting(t, db, "transactionid", "WITH syncd_t") == 1
	})
	if r := p.Kill(t); r.Signal != syscall.SIGKILL {
		t.Fatalf("syncd was not killed inside its freeze: %s", r)
	}
	for _, q := range []string{"SELECT count(*) FROM public.syncd_campaigns", "SELECT count(*) FROM " + advChunks, "SELECT count(*) FROM public.coupon_grants"} {
		if n := count(t, db, q); n != 0 {
			t.Fatalf("%s = %d while the killed freeze has not committed; want 0", q, n)
		}
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the killed run's sessions to end", func() bool {
		return count(t, db, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'syncd'") == 0
	})
	for _, q := range []string{"SELECT count(*) FROM public.syncd_campaigns", "SELECT count(*) FROM " + advChunks, "SELECT count(*) FROM public.coupon_grants"} {
		if n := count(t, db, q); n != 0 {
			t.Fatalf("%s = %d after the killed freeze; want 0", q, n)
		}
	}

	for range 5 {
		if err := churn(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	want := dormantNow(t, db) // the re-run freezes at its own start
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		// Targets change once the re-run's freeze has committed.
		for cctx.Err() == nil && count(t, db, "SELECT count(*) FROM public.syncd_campaigns") < 1 {
			time.Sleep(time.Millisecond) // polling, in a goroutine: Eventually cannot fail from here
		}
		for cctx.Err() == nil {
			_ = churn(cctx, db)
			time.Sleep(5 * time.Millisecond) // the writers' pace
		}
	})
	p = bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgPath, "--state", statePath)
	r := p.Wait(t, 2*time.Minute)
	cancel()
	wg.Wait()
	if r.Code != 0 {
		t.Fatalf("re-run after the kill: %s", r)
	}
	if got := frozenPath(p); got != "in-database" {
		t.Fatalf("re-run froze with path %q; want in-database\n%s", got, p.Output)
	}
	checkExact(t, db, want)
	if got := newGrants(p.Output.String()); got != fmt.Sprint(len(want)) {
		t.Fatalf("re-run made %s new grants; want %d", got, len(want))
	}
	p = bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgPath, "--state", statePath)
	if r := p.Wait(t, time.Minute); r.Code != 0 || newGrants(p.Output.String()) != "0" {
		t.Fatalf("run after success: %s (new grants %s); want exit 0 and 0", r, newGrants(p.Output.String()))
	}
	checkExact(t, db, want)
}
