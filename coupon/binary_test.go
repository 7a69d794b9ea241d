package coupon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
)

// syncd starts the real binary: run --once --source comeback.
func syncd(t *testing.T, configPath, statePath string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(syncdBin, "run", "--once", "--source", "comeback", "--config", configPath, "--state", statePath)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
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
func TestKillAtRandomPageAndRerun(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	want := newMembers(t, db)
	cfgPath := writeConfig(t, configYAML(db, db, 50))
	statePath := filepath.Join(t.TempDir(), "state.db")
	threshold := int64(len(want)) * int64(10+rand.IntN(70)) / 100

	cmd, out := syncd(t, cfgPath, statePath)
	deadline := time.Now().Add(30 * time.Second)
	for count(t, db, "SELECT count(*) FROM public.coupon_grants") < threshold && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("syncd was not killed mid-run (threshold %d grants): %v\n%s", threshold, err, out)
	}
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
	cmd, out = syncd(t, cfgPath, statePath)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("re-run after the kill: exit %d\n%s", exitCode(err), out)
	}
	checkExact(t, db, want)
	if !strings.Contains(out.String(), `"msg":"campaign reconciled"`) || !strings.Contains(out.String(), `"msg":"run done"`) {
		t.Fatalf("re-run output has no success lines:\n%s", out)
	}
	cmd, out = syncd(t, cfgPath, statePath)
	if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), `"new_grants":0`) {
		t.Fatalf("run after success: exit %d, want 0 with new_grants 0\n%s", exitCode(err), out)
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
			time.Sleep(time.Millisecond)
		}
		for ctx.Err() == nil {
			_ = churn(ctx, db)
			time.Sleep(5 * time.Millisecond)
		}
	})
	a, outA := syncd(t, cfgPath, filepath.Join(dir, "a.db"))
	b, outB := syncd(t, cfgPath, filepath.Join(dir, "b.db"))
	errA, errB := a.Wait(), b.Wait()
	cancel()
	wg.Wait()
	if errA != nil || errB != nil {
		t.Fatalf("two runs at once: exit %d and %d; want 0 and 0\n--- a:\n%s--- b:\n%s", exitCode(errA), exitCode(errB), outA, outB)
	}
	checkExact(t, db, want)
	t.Logf("new grants: run a %s, run b %s (of %d targets)", newGrants(outA.String()), newGrants(outB.String()), len(want))
	if n := count(t, db, "SELECT count(*) FROM public.syncd_campaigns"); n != 1 {
		t.Fatalf("%d campaign rows; want 1 (one freeze)", n)
	}
	frozen := strings.Count(outA.String()+outB.String(), `"msg":"campaign frozen"`)
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

	var out bytes.Buffer
	validate := exec.Command(syncdBin, "validate", "--config", cfgPath)
	validate.Stdout, validate.Stderr = &out, &out
	if err := validate.Run(); err != nil || !strings.Contains(out.String(), "comeback: ok (public.members") {
		t.Fatalf("validate before the first run: exit %d\n%s", exitCode(err), out.String())
	}
	cmd, runOut := syncd(t, cfgPath, statePath)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("first run: exit %d\n%s", exitCode(err), runOut)
	}
	db.Exec(t, "DELETE FROM public.coupon_grants WHERE campaign_id = $1 AND member_id = $2", campaignID, want[10])
	cmd, runOut = syncd(t, cfgPath, statePath)
	err := cmd.Wait()
	msg := "1 of " + strconv.Itoa(len(want)) + " targets have no grant and 0 grants are not targets"
	if exitCode(err) != 1 || !strings.Contains(runOut.String(), msg) {
		t.Fatalf("run with a lost grant: exit %d; want 1 and %q\n%s", exitCode(err), msg, runOut)
	}
	for _, success := range []string{`"msg":"run done"`, `"msg":"campaign reconciled"`} {
		if strings.Contains(runOut.String(), success) {
			t.Fatalf("a failed campaign printed the success line %s:\n%s", success, runOut)
		}
	}
	out.Reset()
	status := exec.Command(syncdBin, "status", "--json", "--config", cfgPath, "--state", statePath)
	status.Stdout, status.Stderr = &out, &out
	var st struct {
		Sources []struct {
			LastStatus string `json:"last_status"`
			LastError  string `json:"last_error"`
		} `json:"sources"`
	}
	if err := status.Run(); err != nil || json.Unmarshal(out.Bytes(), &st) != nil || len(st.Sources) != 1 ||
		st.Sources[0].LastStatus != "failed" || !strings.Contains(st.Sources[0].LastError, msg) {
		t.Fatalf("status after the failed run: exit %d; want last_status failed with %q\n%s", exitCode(err), msg, out.String())
	}

	out.Reset()
	changed := writeConfig(t, strings.Replace(yaml, "180 days", "90 days", 1))
	validate = exec.Command(syncdBin, "validate", "--config", changed)
	validate.Stdout, validate.Stderr = &out, &out
	if err := validate.Run(); exitCode(err) != 2 || !strings.Contains(out.String(), "comeback.yaml:6: source.where: campaign comeback-2026-10 was frozen at") {
		t.Fatalf("validate with a changed where: exit %d; want 2 naming comeback.yaml:6 source.where\n%s", exitCode(err), out.String())
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
	var out bytes.Buffer
	cmd := exec.Command(syncdBin, "resync", "--source", "comeback", "--from-start", "--config", cfgPath, "--state", statePath)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if code := exitCode(err); code != 2 || !strings.Contains(out.String(), "sink.type: source comeback is a coupon campaign") {
		t.Fatalf("resync of a campaign: exit %d, want 2 with a line saying why:\n%s", code, out.String())
	}
	if n := count(t, db, "SELECT count(*) FROM pg_tables WHERE tablename = 'coupon_grants'"); n != 0 {
		t.Fatal("resync of a campaign created the grants table")
	}
	if _, err := os.Stat(statePath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("resync of a campaign created the state file (stat: %v)", err)
	}
}
