package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// lockTable takes a lock of mode on table in an open transaction of its
// own session on db and returns that session's pid and the function that
// ends the transaction.
func lockTable(t *testing.T, db *pgtest.DB, table, mode string) (pid int, release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "BEGIN; LOCK TABLE "+table+" IN "+mode+" MODE"); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			_, _ = conn.Exec(ctx, "ROLLBACK")
			conn.Close(ctx)
		}
	}
	t.Cleanup(release)
	return pid, release
}

type lockedStatus struct {
	Watermark  string `json:"watermark"`
	LastStatus string `json:"last_status"`
	LastError  string `json:"last_error"`
}

func statusJSON(t *testing.T, env []string, cfg string) lockedStatus {
	t.Helper()
	r := bin.Run(t, env, "status", "--config", cfg, "--json")
	var st struct{ Sources []lockedStatus }
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil || len(st.Sources) != 1 {
		t.Fatalf("status --json exited %d: %v\n%s%s", r.Code, err, r.Stdout, r.Stderr)
	}
	return st.Sources[0]
}

// A copy locked by another session (an open transaction that holds an
// ACCESS EXCLUSIVE lock on it) fails `run --once` within about
// sink.lock_timeout: exit 1 with one line that says the copy is locked and
// by whom, the watermark and the copy unchanged, the run recorded as
// failed. Once the lock is gone the next run syncs and the copy equals the
// source.
func TestRunOnceFailsOnLockedCopy(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, "")+"  lock_timeout: 1s\n")
	env := []string{"SYNCD_STATE=" + filepath.Join(dir, "state.db")}
	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("first run exited %d: %s", r.Code, r.Stderr)
	}
	src.Exec(t, `UPDATE orders SET name = 'changed', updated_at = updated_at + interval '1 hour' WHERE id % 10 = 0`)
	src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-01 11:00:00+00', 'new' || g FROM generate_series(1001, 1100) g`)
	before := statusJSON(t, env, cfg)
	copyBefore := rowsText(t, dst, "orders_copy")

	pid, release := lockTable(t, dst, "orders_copy", "ACCESS EXCLUSIVE")
	started := time.Now()
	r := bin.Run(t, env, "run", "--config", cfg, "--once")
	took := time.Since(started)
	if r.Code != 1 {
		t.Fatalf("run on a locked copy exited %d, want 1:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if took > 8*time.Second {
		t.Errorf("run on a locked copy took %s with sink.lock_timeout 1s", took)
	}
	msg := failureLine(r.Stderr)
	for _, want := range []string{"source orders: ", "sink table public.orders_copy is locked by another session",
		fmt.Sprintf("pid %d", pid), fmt.Sprintf("pg_terminate_backend(%d)", pid), "AccessExclusiveLock", "sink.lock_timeout: 1s", "raise sink.lock_timeout"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the failure does not say %q:\n%s", want, msg)
		}
	}
	after := statusJSON(t, env, cfg)
	if after.Watermark != before.Watermark {
		t.Errorf("watermark moved from %s to %s although nothing was written", before.Watermark, after.Watermark)
	}
	if after.LastStatus != "failed" || !strings.Contains(after.LastError, "is locked by another session") {
		t.Errorf("status says %q %q, want the failed run and why", after.LastStatus, after.LastError)
	}
	release()
	if got := rowsText(t, dst, "orders_copy"); got != copyBefore {
		t.Errorf("the copy changed during the failed run")
	}

	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("run after the lock went exited %d: %s", r.Code, r.Stderr)
	}
	if got, want := rowsText(t, dst, "orders_copy"), rowsText(t, src, "orders"); got != want {
		t.Fatalf("copy differs from the source after the lock went")
	}
}

// A page that outlasts sink.page_timeout without waiting for a lock (a
// trigger on the copy that sleeps; lock_timeout 1s never fires) is
// cancelled on the server at the deadline: `run --once` exits 1 within
// seconds with one line naming the copy and sink.page_timeout, the copy
// and the watermark are as they were, and once the trigger is gone the
// next run makes the copy equal to the source.
func TestRunOnceFailsOnSlowPage(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, "")+"  lock_timeout: 1s\n  page_timeout: 2s\n")
	env := []string{"SYNCD_STATE=" + filepath.Join(dir, "state.db")}
	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("first run exited %d: %s", r.Code, r.Stderr)
	}
	src.Exec(t, `UPDATE orders SET name = 'changed', updated_at = updated_at + interval '1 hour' WHERE id % 10 = 0`)
	before := statusJSON(t, env, cfg)
	copyBefore := rowsText(t, dst, "orders_copy")
	dst.Exec(t, `CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN PERFORM pg_sleep(60); RETURN NULL; END$$`)
	dst.Exec(t, `CREATE TRIGGER slow AFTER INSERT OR UPDATE ON orders_copy FOR EACH STATEMENT EXECUTE FUNCTION slow()`)

	started := time.Now()
	r := bin.Run(t, env, "run", "--config", cfg, "--once")
	took := time.Since(started)
	if r.Code != 1 {
		t.Fatalf("run with a slow page exited %d, want 1:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if took > 15*time.Second {
		t.Errorf("run with a slow page took %s with sink.page_timeout 2s (the trigger sleeps 60s)", took)
	}
	msg := failureLine(r.Stderr)
	for _, want := range []string{"source orders: ", "applying a page to public.orders_copy did not finish within sink.page_timeout (2s) and was cancelled",
		"the watermark is where it was", "raise sink.page_timeout"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the failure does not say %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "is locked by another session") {
		t.Errorf("a slow page was reported as a lock:\n%s", msg)
	}
	// The cancelled statement is not left running on the server.
	var busy int
	if err := dst.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'syncd' AND state = 'active'`).Scan(&busy); err != nil || busy != 0 {
		t.Errorf("%d syncd sessions still active on the sink after the run (%v)", busy, err)
	}
	after := statusJSON(t, env, cfg)
	if after.Watermark != before.Watermark {
		t.Errorf("watermark moved from %s to %s although nothing was written", before.Watermark, after.Watermark)
	}
	if after.LastStatus != "failed" || !strings.Contains(after.LastError, "sink.page_timeout") {
		t.Errorf("status says %q %q, want the failed run and why", after.LastStatus, after.LastError)
	}
	if got := rowsText(t, dst, "orders_copy"); got != copyBefore {
		t.Errorf("the copy changed during the failed run")
	}

	dst.Exec(t, `DROP TRIGGER slow ON orders_copy`)
	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("run after the trigger went exited %d: %s", r.Code, r.Stderr)
	}
	if got, want := rowsText(t, dst, "orders_copy"), rowsText(t, src, "orders"); got != want {
		t.Fatalf("copy differs from the source after the trigger went")
	}
}

// A page blocked by another session's lock (SHARE mode lets syncd read
// the copy but not write it) is the page in flight: a second signal ends
// `run --once` at once (exit 1), well before sink.lock_timeout, and the
// blocked statement is cancelled on the server rather than left waiting
// with the run lock.
func TestSecondSignalEndsRunOnceBlockedOnLock(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, "")+"  lock_timeout: 1m\n  page_timeout: 2m\n")
	env := []string{"SYNCD_STATE=" + filepath.Join(dir, "state.db")}
	dst.Exec(t, `CREATE TABLE orders_copy (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text)`)
	_, release := lockTable(t, dst, "orders_copy", "SHARE")

	p := bin.Start(t, env, "run", "--config", cfg, "--once")
	waiting := `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'syncd' AND wait_event_type = 'Lock'`
	p.Eventually(t, 20*time.Second, "syncd's page waiting for the lock", func() bool { return count(t, dst, waiting) == 1 })

	p.Signal(t, syscall.SIGTERM)
	// The first signal lets the page in flight go on: it still waits.
	// run --once says nothing when it takes the first signal, so there is
	// no event to wait for: this checks that nothing changes meanwhile.
	time.Sleep(300 * time.Millisecond)
	if n := count(t, dst, waiting); n != 1 {
		t.Fatalf("after the first signal %d syncd sessions wait for the lock, want the page still waiting", n)
	}
	sent := time.Now()
	p.Signal(t, syscall.SIGINT)
	if r := p.Wait(t, 20*time.Second); r.Code != 1 {
		t.Fatalf("exit %d after the second signal, want 1:\n%s", r.Code, p.Output)
	}
	if took := time.Since(sent); took > 3*time.Second {
		t.Errorf("run --once took %s to exit after the second signal, want at once", took)
	}
	// The server stopped the blocked statement: no syncd session is left
	// waiting for the lock (nor holding the run lock).
	poll(t, 5*time.Second, "syncd's sessions gone", func() bool {
		return count(t, dst, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'syncd'`) == 0
	})
	release()
	if n := count(t, dst, "SELECT count(*) FROM orders_copy"); n != 0 {
		t.Fatalf("the copy has %d rows after the forced stop, want the page rolled back", n)
	}
	if r := bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("run after the lock went exited %d: %s", r.Code, r.Stderr)
	}
	if got, want := rowsText(t, dst, "orders_copy"), rowsText(t, src, "orders"); got != want {
		t.Fatalf("copy differs from the source after the lock went")
	}
}

// failureLine is the one line of stderr that reports the failure (the
// others are the log's), which must be there exactly once.
func failureLine(stderr string) string {
	var found []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "syncd run: ") {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		return stderr
	}
	return found[0]
}

// poll waits until cond is true, failing the test after timeout.
func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, timeout, what, cond)
}

// campaignConfig is a coupon campaign granting every member of src into
// public.coupon_grants of dst.
func campaignConfig(src, dst *pgtest.DB, name string) string {
	return fmt.Sprintf(`name: %s
source:
  dsn: %s
  table: public.members
  cursor: [member_id]
  page_size: 50
sink:
  type: coupon_grants
  dsn: %s
  table: public.coupon_grants
  campaign: %s
  lock_timeout: 1s
`, name, src.URL, dst.URL, name)
}

// A coupon grants table locked by another session fails the campaign's
// run like a locked copy: exit 1, one line naming the grants table and the
// session, nothing granted; after the lock goes the next run grants every
// target once.
func TestRunOnceFailsOnLockedGrants(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE members (member_id bigint PRIMARY KEY)`)
	src.Exec(t, `INSERT INTO members SELECT generate_series(1, 120)`)
	dir := t.TempDir()
	first := writeConfig(t, dir, "first.yaml", campaignConfig(src, dst, "first"))
	second := writeConfig(t, dir, "second.yaml", campaignConfig(src, dst, "second"))
	env := []string{"SYNCD_STATE=" + filepath.Join(dir, "state.db")}
	if r := bin.Run(t, env, "run", "--config", first, "--once"); r.Code != 0 {
		t.Fatalf("first campaign exited %d: %s", r.Code, r.Stderr)
	}
	pid, release := lockTable(t, dst, "coupon_grants", "ACCESS EXCLUSIVE")
	started := time.Now()
	r := bin.Run(t, env, "run", "--config", second, "--once")
	if took := time.Since(started); took > 8*time.Second {
		t.Errorf("run on a locked grants table took %s with sink.lock_timeout 1s", took)
	}
	msg := failureLine(r.Stderr)
	if r.Code != 1 {
		t.Fatalf("run on a locked grants table exited %d, want 1:\n%s%s", r.Code, r.Stdout, msg)
	}
	for _, want := range []string{"source second: ", "sink table public.coupon_grants is locked by another session",
		fmt.Sprintf("pid %d", pid), "sink.lock_timeout: 1s"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the failure does not say %q:\n%s", want, msg)
		}
	}
	release()
	if n := count(t, dst, `SELECT count(*) FROM coupon_grants WHERE campaign_id = 'second'`); n != 0 {
		t.Fatalf("%d grants of the failed run, want none", n)
	}
	if r := bin.Run(t, env, "run", "--config", second, "--once"); r.Code != 0 {
		t.Fatalf("run after the lock went exited %d: %s", r.Code, r.Stderr)
	}
	for _, c := range []string{"first", "second"} {
		q := fmt.Sprintf(`SELECT count(DISTINCT member_id) FILTER (WHERE member_id BETWEEN 1 AND 120) * 1000 + count(*) FROM coupon_grants WHERE campaign_id = '%s'`, c)
		if n := count(t, dst, q); n != 120*1000+120 {
			t.Errorf("campaign %s granted %d of the 120 members in %d grants, want each member once", c, n/1000, n%1000)
		}
	}
}
