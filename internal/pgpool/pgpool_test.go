package pgpool_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgpool"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/internal/testutil"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const limits = "SELECT set_config('lock_timeout', '1234ms', false)"

// newPool returns a pool of o, closed when the test ends, and ctx
// carrying it.
func newPool(t *testing.T, ctx context.Context, o pgpool.Options) (*pgpool.Pool, context.Context) {
	t.Helper()
	p := pgpool.New(o)
	t.Cleanup(p.Close)
	return p, pgpool.With(ctx, p)
}

func dialer(url string) func(context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) {
		conn, err := pgutil.Connect(ctx, url, "sink")
		if err == nil {
			_, err = conn.Exec(ctx, limits)
		}
		return conn, err
	}
}

// A session given back holds nothing of the run before: the run lock (a
// session advisory lock) is released, SET parameters are back to the
// session's start (syncd's own startup settings and the sink's limits
// kept), temporary tables are gone; the next run gets the same backend.
func TestSessionComesBackClean(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	_, pctx := newPool(t, ctx, pgpool.Options{MaxIdle: 2})
	s, err := pgpool.Open(pctx, "k", pgpool.Reset+"; "+limits, dialer(db.URL))
	if err != nil {
		t.Fatal(err)
	}
	pid := s.Conn.PgConn().PID()
	for _, q := range []string{
		"SELECT pg_advisory_lock(42)",
		"SET search_path = pg_catalog",
		"SET statement_timeout = '1s'",
		"SET TimeZone = 'Europe/Paris'",
		"CREATE TEMP TABLE syncd_stage (x int)",
		"BEGIN; DECLARE c CURSOR WITH HOLD FOR SELECT 1; COMMIT",
	} {
		if _, err := s.Conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := s.Release(pctx, ""); err != nil {
		t.Fatal(err)
	}
	// Another session sees the lock free.
	var free bool
	if err := db.Pool.QueryRow(ctx, "SELECT pg_try_advisory_lock(42)").Scan(&free); err != nil || !free {
		t.Fatalf("the advisory lock of the run before is still held (free %v, %v)", free, err)
	}
	if _, err := db.Pool.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
		t.Fatal(err)
	}
	s, err = pgpool.Open(pctx, "k", pgpool.Reset+"; "+limits, dialer(db.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(pctx, "")
	if !s.Reused || s.Conn.PgConn().PID() != pid {
		t.Fatalf("the second run got a new session (reused %v); want the pooled one", s.Reused)
	}
	var path, stmt, lock, tz, date, app string
	var temps, cursors int
	if err := s.Conn.QueryRow(ctx, `SELECT current_setting('search_path'), current_setting('statement_timeout'), current_setting('lock_timeout'),
  current_setting('TimeZone'), current_setting('DateStyle'), current_setting('application_name'),
  (SELECT count(*) FROM pg_class WHERE relpersistence = 't'), (SELECT count(*) FROM pg_cursors WHERE name = 'c')`).Scan(&path, &stmt, &lock, &tz, &date, &app, &temps, &cursors); err != nil {
		t.Fatal(err)
	}
	if path != `"$user", public` || stmt != "0" || lock != "1234ms" || tz != "UTC" || date != "ISO, YMD" || app != pgutil.AppName || temps != 0 || cursors != 0 {
		t.Errorf("reused session: search_path %q, statement_timeout %q, lock_timeout %q, TimeZone %q, DateStyle %q, application_name %q, %d temp tables, %d cursors",
			path, stmt, lock, tz, date, app, temps, cursors)
	}
}

// A session left in a transaction, marked broken by its run, closed, or
// given back with a cancelled context is closed, never reused; a pool
// keeps at most MaxIdle sessions of a key and closes idle ones after
// IdleTimeout.
func TestBrokenSessionsAreClosedAndPoolIsBounded(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	p := pgpool.New(pgpool.Options{MaxIdle: 2, IdleTimeout: 300 * time.Millisecond})
	defer p.Close()
	pctx := pgpool.With(ctx, p)
	open := func() *pgpool.Session {
		t.Helper()
		s, err := pgpool.Open(pctx, "k", pgpool.Reset, dialer(db.URL))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	inTx, broken, cancelled := open(), open(), open()
	if _, err := inTx.Conn.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	_ = inTx.Release(pctx, "")
	pgpool.Broken(pctx, broken.Conn)
	_ = broken.Release(pctx, "")
	cctx, cancel := context.WithCancel(pctx)
	cancel()
	_ = cancelled.Release(cctx, "")
	for name, s := range map[string]*pgpool.Session{"in a transaction": inTx, "broken": broken, "cancelled": cancelled} {
		if !s.Conn.IsClosed() {
			t.Errorf("a session %s was not closed", name)
		}
	}
	if st := p.Stats(); st.Idle != 0 || st.Closed != 3 {
		t.Fatalf("pool after three bad sessions: %+v; want none idle, 3 closed", st)
	}

	a, b, c := open(), open(), open()
	for _, s := range []*pgpool.Session{a, b, c} {
		_ = s.Release(pctx, "")
	}
	if st := p.Stats(); st.Idle != 2 {
		t.Fatalf("pool keeps %d idle sessions of one key; want MaxIdle 2", st.Idle)
	}
	// A session the server ended while idle is dropped, not lent.
	var victim int32
	for _, s := range []*pgpool.Session{a, b, c} {
		if !s.Conn.IsClosed() {
			victim = int32(s.Conn.PgConn().PID())
			break
		}
	}
	if _, err := db.Pool.Exec(ctx, "SELECT pg_terminate_backend($1)", victim); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the ended backend to leave pg_stat_activity", func() bool {
		var n int
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", victim).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	for range 2 {
		s := open()
		if s.Conn.PgConn().PID() == uint32(victim) {
			t.Fatal("the pool lent a session the server had ended")
		}
		if err := s.Conn.Ping(ctx); err != nil {
			t.Fatalf("lent session does not answer: %v", err)
		}
		_ = s.Release(pctx, "")
	}
	// Idle past IdleTimeout: closed by the pool.
	testutil.Eventually(t, 10*time.Second, "the pool to close its idle sessions after IdleTimeout", func() bool {
		return p.Stats().Idle == 0
	})
}

// A pooled session releases the advisory locks its run took (the run
// lock, whose holder leaves them to it: ReleasesLocks) before Release
// returns, also when it is closed instead of kept (a run that failed marks
// it broken): the next run, in this process or another, may take them at
// once, not only once the server has ended the session. A session without
// a pool leaves them to their holder.
func TestReleaseFreesTheRunLockAlsoWhenClosing(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if s, err := pgpool.Open(ctx, "k", pgpool.Reset, dialer(db.URL)); err != nil {
		t.Fatal(err)
	} else {
		if s.ReleasesLocks() {
			t.Fatal("a session without a pool says it releases its locks")
		}
		_ = s.Release(ctx, "")
	}
	p := pgpool.New(pgpool.Options{MaxIdle: 1})
	defer p.Close()
	var ctr pgutil.Counter
	pctx := pgpool.With(pgutil.WithCounter(ctx, &ctr), p)
	for _, broken := range []bool{false, true} {
		s, err := pgpool.Open(pctx, "k", pgpool.Reset+"; "+limits, dialer(db.URL))
		if err != nil {
			t.Fatal(err)
		}
		if !s.ReleasesLocks() {
			t.Fatal("a pooled session says it does not release its locks")
		}
		if _, err := s.Conn.Exec(ctx, "SELECT pg_advisory_lock(43)"); err != nil {
			t.Fatal(err)
		}
		if broken {
			pgpool.Broken(pctx, s.Conn)
		}
		before := ctr.Snapshot()
		if err := s.Release(pctx, ""); err != nil {
			t.Fatal(err)
		}
		if got := s.Conn.IsClosed(); got != broken {
			t.Fatalf("broken %v: the session is closed %v", broken, got)
		}
		// Released by the session itself, not left to the server's end
		// of it (which comes a moment after the close).
		if sent := ctr.Snapshot().Since(before).Statements; len(sent) == 0 || !strings.Contains(sent[0], "pg_advisory_unlock_all()") {
			t.Fatalf("broken %v: Release sent %q; want pg_advisory_unlock_all() first", broken, sent)
		}
		var free bool
		if err := db.Pool.QueryRow(ctx, "SELECT pg_try_advisory_lock(43) AND pg_advisory_unlock(43)").Scan(&free); err != nil || !free {
			t.Fatalf("broken %v: the lock is still held when Release returned (%v)", broken, err)
		}
	}
}

// A session Prime dials is the one the next Open of its key gets, whether
// the dial has returned by then or not, and it is dialed once: a dial
// that fails is the next Open's error, not a second attempt. A session
// nobody takes joins the idle ones, and a caller whose context ends while
// it waits gives up at once.
func TestPrimeDialsOnceForTheNextOpen(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	p, pctx := newPool(t, ctx, pgpool.Options{MaxIdle: 1})

	// The dial returns only once Open waits for it.
	var dials atomic.Int32
	release := make(chan struct{})
	slow := func(ctx context.Context) (*pgx.Conn, error) {
		dials.Add(1)
		<-release
		return dialer(db.URL)(ctx)
	}
	pgpool.Prime(pctx, "k", slow)
	pgpool.Prime(pctx, "k", slow) // already dialing: nothing more
	var own atomic.Int32          // dials of Open itself
	opened := make(chan *pgpool.Session, 1)
	go func() {
		s, err := pgpool.Open(pctx, "k", pgpool.Reset, func(ctx context.Context) (*pgx.Conn, error) {
			own.Add(1)
			return dialer(db.URL)(ctx)
		})
		if err != nil {
			t.Error(err)
		}
		opened <- s
	}()
	close(release)
	s := <-opened
	if s == nil {
		t.FailNow()
	}
	if n, m := dials.Load(), own.Load(); n != 1 || m != 0 || s.Reused {
		t.Fatalf("%d primed dials, %d dials of Open (reused %v); want the primed dial only", n, m, s.Reused)
	}
	var lock string
	if err := s.Conn.QueryRow(ctx, "SELECT current_setting('lock_timeout')").Scan(&lock); err != nil || lock != "1234ms" {
		t.Fatalf("primed session: lock_timeout %q, %v; want the dialer's 1234ms", lock, err)
	}
	if err := s.Release(pctx, ""); err != nil {
		t.Fatal(err)
	}

	// A failed dial is the next Open's error, and nothing dials again.
	refused := errors.New("connection refused")
	var failed atomic.Int32
	dialed := make(chan struct{})
	fail := func(context.Context) (*pgx.Conn, error) { failed.Add(1); close(dialed); return nil, refused }
	pgpool.Prime(pctx, "down", fail)
	<-dialed // returned before Open asks
	if _, err := pgpool.Open(pctx, "down", pgpool.Reset, func(context.Context) (*pgx.Conn, error) {
		failed.Add(1)
		return nil, errors.New("dialed again")
	}); !errors.Is(err, refused) || failed.Load() != 1 {
		t.Fatalf("open after a primed dial failed: %v after %d dials; want the dial's error after 1", err, failed.Load())
	}

	// Nobody takes it: it joins the idle sessions of its key.
	pgpool.Prime(pctx, "idle", dialer(db.URL))
	testutil.Eventually(t, time.Minute, "the primed session idle in the pool", func() bool { return p.Stats().Idle == 2 })
	s, err := pgpool.Open(pctx, "idle", pgpool.Reset, func(context.Context) (*pgx.Conn, error) {
		t.Error("dialed again: the primed session was idle")
		return nil, refused
	})
	if err != nil || !s.Reused {
		t.Fatalf("open after the primed session went idle: %v (reused %v)", err, s != nil && s.Reused)
	}
	if err := s.Release(pctx, ""); err != nil {
		t.Fatal(err)
	}

	// A caller whose context ends stops waiting for the dial.
	hold := make(chan struct{})
	defer close(hold)
	pgpool.Prime(pctx, "stuck", func(ctx context.Context) (*pgx.Conn, error) { <-hold; return nil, refused })
	cctx, cancel := context.WithCancel(pctx)
	cancel()
	if _, err := pgpool.Open(cctx, "stuck", pgpool.Reset, dialer(db.URL)); !errors.Is(err, context.Canceled) {
		t.Fatalf("open with a cancelled context while the primed dial hangs: %v; want context.Canceled", err)
	}
}
