package daemon_test

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/coupon"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/runlock"
	"github.com/syncd/syncd/syncer"
)

// Two daemons on one source (separate state files, one sink) under
// concurrent writes: the copy ends equal to the source, and every page was
// applied by a session holding the source's advisory lock, so no two pages
// were ever applied in parallel.
func TestTwoProcessesNeverApplyPagesInParallel(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 1500)
	f.db.Exec(t, `CREATE TABLE copy (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, v text)`)
	f.db.Exec(t, `CREATE TABLE apply_log (pid int, txid bigint, held boolean, at timestamptz DEFAULT clock_timestamp())`)
	// A statement trigger records, for every page written to the copy, the
	// writing backend and whether it holds the run lock of "orders".
	f.db.Exec(t, `CREATE FUNCTION log_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO apply_log (pid, txid, held) SELECT pg_backend_pid(), txid_current(), EXISTS (
    SELECT 1 FROM pg_locks l, (SELECT hashtextextended('syncd:orders:public.copy', 0) AS k) k
    WHERE l.pid = pg_backend_pid() AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.classid::bigint = (k.k >> 32) & 4294967295 AND l.objid::bigint = k.k & 4294967295);
  RETURN NULL;
END $$`)
	f.db.Exec(t, `CREATE TRIGGER log_apply AFTER INSERT OR UPDATE ON copy FOR EACH STATEMENT EXECUTE FUNCTION log_apply()`)
	// Same source, same sink, different schedules (ticks fall on whole
	// seconds): at 2 s and 4 s only b ticks, at 3 s only a, at 6 s both.
	pathA := f.source(t, "orders.yaml", "orders", "src", "copy", "page_size: 50\nwhere: slow(0.5)\nlookback: 1s\n^schedule: \"@every 3s\"")
	f.dir = t.TempDir()
	pathB := f.source(t, "orders.yaml", "orders", "src", "copy", "page_size: 50\nwhere: slow(0.5)\nlookback: 1s\n^schedule: \"@every 2s\"")

	stopWriter := f.writer(t, "src", 1501)
	dir := t.TempDir()
	a := syncd.Start(t, nil, "run", "--config", pathA, "--state", filepath.Join(dir, "a.db"), "--listen", testutil.FreeAddr(t))
	// b starts once a's first run is applying pages: b's own first run
	// meets it and is skipped.
	testutil.Eventually(t, 30*time.Second, "a's first page", func() bool { return f.count(t, "apply_log") > 0 })
	b := syncd.Start(t, nil, "run", "--config", pathB, "--state", filepath.Join(dir, "b.db"), "--listen", testutil.FreeAddr(t))
	skip := regexp.MustCompile(`source orders is being synced by another syncd process \(backend pid \d+, application_name "syncd", client 127\.0\.0\.1:\d+`)
	skipped := func(p *testutil.Process) bool {
		_, ok := p.Output.FindFunc(func(e testutil.Entry) bool {
			return e.Match("run skipped", "source", "orders") && skip.MatchString(e.Text("reason"))
		})
		return ok
	}
	applied := func() int {
		var n int
		if err := f.db.Pool.QueryRow(context.Background(), `SELECT count(DISTINCT txid) FROM apply_log`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Both processes run under the writer's load until one of them was
	// skipped because the other held the source, and 30 pages were
	// applied.
	testutil.Eventually(t, 60*time.Second, "a run skipped for the other process, and 30 pages", func() bool {
		return (skipped(a) || skipped(b)) && applied() >= 30
	})
	stopWriter()
	testutil.Eventually(t, 30*time.Second, "the copy to equal the source", func() bool { return f.diff(t, "src", "copy") == 0 })
	// Once the writes stop the runs get short, and b's ticks (2 s, 4 s, ...)
	// find the source free between a's (3 s, 6 s, ...).
	wrote := func(p *testutil.Process) bool {
		_, ok := p.Output.FindFunc(func(e testutil.Entry) bool { return e.Match("run done", "source", "orders") && e.Int("pages") > 0 })
		return ok
	}
	testutil.Eventually(t, 20*time.Second, "both processes to apply pages in turn", func() bool { return wrote(a) && wrote(b) })
	a.Signal(t, syscall.SIGTERM)
	b.Signal(t, syscall.SIGTERM)
	if ca, cb := a.Wait(t, 10*time.Second).Code, b.Wait(t, 10*time.Second).Code; ca != 0 || cb != 0 {
		t.Fatalf("exit codes %d and %d, want 0", ca, cb)
	}
	f.requireEqual(t, "src", "copy")

	var pages, unlocked, writers int
	if err := f.db.Pool.QueryRow(context.Background(), `SELECT count(DISTINCT txid), count(*) FILTER (WHERE NOT held), count(DISTINCT pid) FROM apply_log`).Scan(&pages, &unlocked, &writers); err != nil {
		t.Fatal(err)
	}
	if pages < 30 || unlocked != 0 {
		t.Fatalf("%d pages applied, %d of them without the run lock", pages, unlocked)
	}
	t.Logf("%d pages by %d sessions, all under the run lock", pages, writers)
}

// A `run --once` that finds the source held by another session exits 0
// with a line naming the holder, and writes nothing.
func TestRunOnceSkipsWhenAnotherProcessHoldsTheSource(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 20)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "")
	state := filepath.Join(t.TempDir(), "state.db")
	ctx := context.Background()
	holder, err := f.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid := holdRunLock(t, holder, path, true)
	r := syncd.Run(t, nil, "run", "--once", "--config", path, "--state", state)
	if r.Code != 0 {
		t.Fatalf("exit %d, want 0: %s%s", r.Code, r.Stdout, r.Stderr)
	}
	want := fmt.Sprintf("syncd run: source orders is being synced by another syncd process (backend pid %d,", pid)
	if !strings.Contains(r.Stdout, want) || !strings.Contains(r.Stdout, "this run is skipped") {
		t.Errorf("stdout %q does not contain %q", r.Stdout, want)
	}
	if n := f.count(t, "copy"); n != 0 {
		t.Errorf("a skipped run wrote %d rows", n)
	}
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}
	holder.Release()
	if r := syncd.Run(t, nil, "run", "--once", "--config", path, "--state", state); r.Code != 0 {
		t.Fatalf("run --once after the release: exit %d: %s", r.Code, r.Stderr)
	}
	f.requireEqual(t, "src", "copy")
}

// A coupon campaign has one runner too: `run --once` skips it while another
// session holds it, and grants once it is free.
func TestCampaignRunOnceSkipsWhenHeld(t *testing.T) {
	f := newFixture(t)
	f.db.Exec(t, `CREATE TABLE members (member_id bigint PRIMARY KEY, last_purchase_at timestamptz NOT NULL)`)
	f.db.Exec(t, `INSERT INTO members SELECT g, now() - (g % 2) * interval '400 days' FROM generate_series(1, 100) g`)
	path := filepath.Join(f.dir, "comeback.yaml")
	writeFile(t, path, fmt.Sprintf(`name: comeback
source:
  dsn: %s
  table: public.members
  cursor: [member_id]
  where: "last_purchase_at < :as_of - interval '180 days'"
  page_size: 10
sink:
  type: coupon_grants
  dsn: %s
  table: public.coupon_grants
  campaign: comeback-test
`, f.dsn(), f.dsn()))
	state := filepath.Join(t.TempDir(), "state.db")
	ctx := context.Background()
	holder, err := f.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	holdRunLock(t, holder, path, true)
	r := syncd.Run(t, nil, "run", "--once", "--config", path, "--state", state)
	if r.Code != 0 || !strings.Contains(r.Stdout, "source comeback is being synced by another syncd process (backend pid") {
		t.Fatalf("run --once on a held campaign: exit %d: %s%s", r.Code, r.Stdout, r.Stderr)
	}
	if n := f.count(t, "coupon_grants"); n != 0 {
		t.Fatalf("a skipped campaign run granted %d coupons", n)
	}
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}
	if r := syncd.Run(t, nil, "run", "--once", "--config", path, "--state", state); r.Code != 0 {
		t.Fatalf("run --once after the release: exit %d: %s", r.Code, r.Stderr)
	}
	if n := f.count(t, "coupon_grants"); n != 50 {
		t.Fatalf("%d grants, want one for each of the 50 dormant members", n)
	}
}

// holdRunLock takes, on conn, the run lock that syncd takes for the source
// in path, as another process would: with its identity lock when it plays
// another process of the same source, without it when it plays a different
// source of the same name. It returns conn's backend pid.
func holdRunLock(t *testing.T, conn *pgxpool.Conn, path string, same bool) int {
	t.Helper()
	cfgs, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	k, err := kind.NewRegistry(kind.Postgres(), coupon.Kind()).Of(cfgs[0])
	if err != nil {
		t.Fatal(err)
	}
	target := syncer.LockTarget(k, cfgs[0])
	identity := runlock.IdentityKey(target)
	if !same {
		identity = runlock.Key(target) + "@another source"
	}
	var pid int
	if err := conn.QueryRow(context.Background(), `SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock(hashtextextended($1, 0)), pg_advisory_lock(hashtextextended($2, 0))) l`,
		runlock.Key(target), identity).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// A session holding the run lock of a source with the same name and sink
// table but other settings is a name collision between two different
// sources: run --once exits 1 naming the holder, and writes nothing. (It
// used to print "skipped" and exit 0, forever.)
func TestRunOnceFailsOnANameCollision(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 20)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "")
	state := filepath.Join(t.TempDir(), "state.db")
	ctx := context.Background()
	holder, err := f.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	pid := holdRunLock(t, holder, path, false)
	r := syncd.Run(t, nil, "run", "--once", "--config", path, "--state", state)
	want := fmt.Sprintf("syncd run: source orders: public.copy is being written by another syncd process (backend pid %d,", pid)
	if r.Code != 1 || !strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "give each its own name and sink.table") {
		t.Fatalf("exit %d, want 1 with %q:\n%s%s", r.Code, want, r.Stdout, r.Stderr)
	}
	if n := f.count(t, "copy"); n != 0 {
		t.Errorf("a refused run wrote %d rows", n)
	}
}

// Two different sources with the same name, copying into different tables
// of one sink database (two teams, two state files): while the first runs,
// the second runs too, and both copies end complete. (Both took the lock
// of the name: the second was "skipped: being synced by another process",
// exit 0, and its table was never created.)
func TestSameNameDifferentSinkTablesBothRun(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 40)
	f.db.Exec(t, `CREATE TABLE src_b (LIKE src INCLUDING ALL)`)
	f.db.Exec(t, `INSERT INTO src_b SELECT * FROM src WHERE id % 2 = 0`)
	// gate() blocks the first source's page until the test lets it go:
	// its run holds its run lock for as long as the test needs, however
	// slow the machine.
	f.db.Exec(t, `CREATE FUNCTION gate() RETURNS boolean LANGUAGE sql VOLATILE AS 'SELECT true FROM pg_advisory_lock_shared(4242)'`)
	ctx := context.Background()
	gate, err := f.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Release()
	if _, err := gate.Exec(ctx, "SELECT pg_advisory_lock(4242)"); err != nil {
		t.Fatal(err)
	}
	f.dir = t.TempDir()
	pathA := f.source(t, "orders.yaml", "orders", "src", "copy_a", "page_size: 10\nwhere: gate()")
	f.dir = t.TempDir()
	pathB := f.source(t, "orders.yaml", "orders", "src_b", "copy_b", "page_size: 10")
	dir := t.TempDir()
	a := syncd.Start(t, nil, "run", "--once", "--config", pathA, "--state", filepath.Join(dir, "a.db"))
	// a holds its run lock and waits at the gate; b runs meanwhile.
	testutil.Eventually(t, 2*time.Minute, "the first source to wait at the gate", func() bool {
		var n int
		_ = f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = 4242`).Scan(&n)
		return n > 0
	})
	r := syncd.Run(t, nil, "run", "--once", "--config", pathB, "--state", filepath.Join(dir, "b.db"))
	if r.Code != 0 || strings.Contains(r.Stdout, "skipped") {
		t.Fatalf("second source: exit %d, want 0 and a complete run:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	select {
	case <-a.Done():
		t.Fatalf("the first source ended before the second finished; the test proves nothing:\n%s", a.Output.String())
	default:
	}
	f.requireEqual(t, "src_b", "copy_b")
	if _, err := gate.Exec(ctx, "SELECT pg_advisory_unlock(4242)"); err != nil {
		t.Fatal(err)
	}
	if c := a.Wait(t, 2*time.Minute).Code; c != 0 {
		t.Fatalf("first source: exit %d:\n%s", c, a.Output.String())
	}
	f.requireEqual(t, "src", "copy_a")
}
