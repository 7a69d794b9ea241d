package coupon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// records counts the log records of a finished run with message msg.
func records(r testutil.Result, msg string) int {
	n := 0
	for _, e := range testutil.ParseLines(r.Stdout + "\n" + r.Stderr) {
		if e.Match(msg) {
			n++
		}
	}
	return n
}

func count(t *testing.T, db *pgtest.DB, q string) int64 {
	t.Helper()
	var n int64
	if err := db.Pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		return -1 // the table may not exist yet
	}
	return n
}

// TestKillAtRandomPageAndRerun kills the real binary (SIGKILL) once a
// random share of the targets is granted, commits purchases, new dormant
// members and sign-ups, then re-runs: the killed run left grants exactly up
// to its committed progress, and the re-run completes the frozen set.
//
// The last target is inserted beforehand by a transaction that stays open
// until the kill, so the run's last page waits for it: on an idle machine
// the whole run (162 pages) took 0.5 s, less than the growing intervals at
// which the test looks at the grants, and it exited 0 before the kill.
func TestKillAtRandomPageAndRerun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	want := newMembers(t, db)
	cfgPath := writeConfig(t, configYAML(db, db, 50))
	statePath := filepath.Join(t.TempDir(), "state.db")
	threshold := int64(len(want)) * int64(10+rand.IntN(70)) / 100

	db.Exec(t, grantsDDL)
	blocker := holdGrant(t, db, want[len(want)-1])

	p := bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgPath, "--state", statePath)
	p.Eventually(t, 30*time.Second, fmt.Sprintf("%d grants", threshold), func() bool {
		return count(t, db, "SELECT count(*) FROM public.coupon_grants") >= threshold
	})
	if r := p.Kill(t); r.Signal != syscall.SIGKILL {
		t.Fatalf("syncd was not killed mid-run (threshold %d grants): %s", threshold, r)
	}
	// A kill that found the last page waiting: that page goes on once the
	// blocker is gone, finds its client gone and rolls back.
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the killed run's sessions to end", func() bool {
		return count(t, db, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'syncd'") == 0
	})
	_, cursor := storedCampaign(t, db)
	upTo, _ := strconv.ParseInt(cursor[0], 10, 64)
	var prefix []int64
	for _, id := range want {
		if id <= upTo {
			prefix = append(prefix, id)
		}
	}
	t.Logf("killed after %d of %d grants (threshold %d); progress cursor %d", len(granted(t, db)), len(want), threshold, upTo)
	checkExact(t, db, prefix) // exactly the pages whose commit the progress records

	for range 5 {
		if err := churn(context.Background(), db); err != nil {
			t.Fatal(err)
		}
	}
	p = bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgPath, "--state", statePath)
	if r := p.Wait(t, time.Minute); r.Code != 0 {
		t.Fatalf("re-run after the kill: %s", r)
	}
	checkExact(t, db, want)
	if p.Output.Count("campaign reconciled") != 1 || p.Output.Count("run done") != 1 {
		t.Fatalf("re-run output has no success records:\n%s", p.Output)
	}
	p = bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgPath, "--state", statePath)
	if r := p.Wait(t, time.Minute); r.Code != 0 || p.Output.Count("", "new_grants", 0) == 0 {
		t.Fatalf("run after success: %s; want exit 0 with new_grants 0", r)
	}
	checkExact(t, db, want)
}

// TestTwoRunsAtOnce starts two binaries at the same moment on the same
// campaign, each with its own state file (two pods: no shared lock), while
// purchases and sign-ups commit: both succeed and each target has one grant.
func TestTwoRunsAtOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	want := newMembers(t, db)
	cfgPath := writeConfig(t, configYAML(db, db, 200))
	dir := t.TempDir()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		// Writes start once the campaign is frozen, so that the expected set
		// is the members dormant before the runs.
		for ctx.Err() == nil && count(t, db, "SELECT count(*) FROM public.syncd_campaigns") < 1 {
			time.Sleep(time.Millisecond) // polling, in a goroutine: Eventually cannot fail from here
		}
		for ctx.Err() == nil {
			_ = churn(ctx, db)
			time.Sleep(5 * time.Millisecond) // the writers' pace
		}
	})
	a := bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgPath, "--state", filepath.Join(dir, "a.db"))
	b := bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgPath, "--state", filepath.Join(dir, "b.db"))
	ra, rb := a.Wait(t, 2*time.Minute), b.Wait(t, 2*time.Minute)
	outA, outB := a.Output, b.Output
	cancel()
	wg.Wait()
	if ra.Code != 0 || rb.Code != 0 {
		t.Fatalf("two runs at once: exit %d and %d; want 0 and 0\n--- a:\n%s--- b:\n%s", ra.Code, rb.Code, outA, outB)
	}
	checkExact(t, db, want)
	t.Logf("new grants: run a %s, run b %s (of %d targets)", newGrants(outA.String()), newGrants(outB.String()), len(want))
	if n := count(t, db, "SELECT count(*) FROM public.syncd_campaigns"); n != 1 {
		t.Fatalf("%d campaign rows; want 1 (one freeze)", n)
	}
	frozen := outA.Count("campaign frozen") + outB.Count("campaign frozen")
	if frozen != 1 {
		t.Fatalf("%d runs report freezing the campaign; want exactly 1\n--- a:\n%s--- b:\n%s", frozen, outA, outB)
	}
}

// newGrants picks the new_grants count from a run's "campaign reconciled" line.
func newGrants(log string) string {
	_, rest, ok := strings.Cut(log, `"new_grants":`)
	if !ok {
		return "?"
	}
	end := strings.IndexAny(rest, ",}")
	if end < 0 {
		return "?"
	}
	return rest[:end]
}

// TestBinaryFailsLoudlyWhenNotReconciled: through the real binary, a grant
// lost behind the progress cursor makes `run --once` exit 1 with the counts
// and no success line, `status` says failed, and `validate` checks a
// coupon source (exit 0) and refuses a changed where (exit 2).
func TestBinaryFailsLoudlyWhenNotReconciled(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	want := newMembers(t, db)
	yaml := configYAML(db, db, 1000)
	cfgPath := writeConfig(t, yaml)
	statePath := filepath.Join(t.TempDir(), "state.db")

	if r := bin.Run(t, nil, "validate", "--config", cfgPath); r.Code != 0 || !strings.Contains(r.Stdout+r.Stderr, "comeback: ok (public.members") {
		t.Fatalf("validate before the first run: %s", r)
	}
	if r := bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgPath, "--state", statePath).Wait(t, time.Minute); r.Code != 0 {
		t.Fatalf("first run: %s", r)
	}
	db.Exec(t, "DELETE FROM public.coupon_grants WHERE campaign_id = $1 AND member_id = $2", campaignID, want[10])
	p := bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgPath, "--state", statePath)
	r := p.Wait(t, time.Minute)
	msg := "1 of " + strconv.Itoa(len(want)) + " targets have no grant and 0 grants are not targets"
	if r.Code != 1 || !p.Output.Contains(msg) {
		t.Fatalf("run with a lost grant: %s; want exit 1 and %q", r, msg)
	}
	for _, success := range []string{"run done", "campaign reconciled"} {
		if p.Output.Count(success) != 0 {
			t.Fatalf("a failed campaign logged the success record %q:\n%s", success, p.Output)
		}
	}
	var st struct {
		Sources []struct {
			LastStatus string `json:"last_status"`
			LastError  string `json:"last_error"`
		} `json:"sources"`
	}
	if r := bin.Run(t, nil, "status", "--json", "--config", cfgPath, "--state", statePath); r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &st) != nil || len(st.Sources) != 1 ||
		st.Sources[0].LastStatus != "failed" || !strings.Contains(st.Sources[0].LastError, msg) {
		t.Fatalf("status after the failed run: %s; want last_status failed with %q", r, msg)
	}

	changed := writeConfig(t, strings.Replace(yaml, "180 days", "90 days", 1))
	if r := bin.Run(t, nil, "validate", "--config", changed); r.Code != 2 || !strings.Contains(r.Stdout+r.Stderr, "comeback.yaml:6: source.where: campaign comeback-2026-10 was frozen at") {
		t.Fatalf("validate with a changed where: %s; want exit 2 naming comeback.yaml:6 source.where", r)
	}
}

// resync does not apply to a campaign (its progress lives in the grants
// database): it exits 2 naming the source and what to do instead, and
// leaves the state file alone.
func TestResyncRefusesACampaign(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	newMembers(t, db)
	cfgPath := writeConfig(t, configYAML(db, db, 50))
	statePath := filepath.Join(t.TempDir(), "state.db")
	if r := bin.Run(t, nil, "resync", "--source", "comeback", "--from-start", "--config", cfgPath, "--state", statePath); r.Code != 2 || !strings.Contains(r.Stdout+r.Stderr, "sink.type: source comeback is a coupon campaign") {
		t.Fatalf("resync of a campaign: %s; want exit 2 with a line saying why", r)
	}
	if n := count(t, db, "SELECT count(*) FROM pg_tables WHERE tablename = 'coupon_grants'"); n != 0 {
		t.Fatal("resync of a campaign created the grants table")
	}
	if _, err := os.Stat(statePath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("resync of a campaign created the state file (stat: %v)", err)
	}
}
