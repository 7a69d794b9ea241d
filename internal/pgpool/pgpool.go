// Package pgpool keeps syncd's database sessions open between runs, so
// that a daemon with hundreds of sources does not open two sessions (and
// read every catalog again on them) for every tick of every source.
//
// A Pool holds idle sessions per key (a role and a DSN, and for the sink
// its session limits): a run takes one (Get) or dials a new one, and gives
// it back when it ends (Put). A session comes back only clean: not closed,
// outside any transaction, not marked broken by its run (Broken), and
// reset in one round trip (Reset: no advisory lock, no SET parameter, no
// temporary table, no open cursor; the sink's limits set again). Anything
// else closes it. A pool keeps at most MaxIdle sessions per key (the run
// budget: no more runs can need one at once) and closes a session idle for
// longer than IdleTimeout.
//
// The pool rides in the run's context (With, From): the code that opens a
// session (source.Open, the sink's Open) asks for it there. The daemon
// keeps one pool for its life; `run --once` keeps one for the command (its
// checks and its runs, one after the other); without a pool every session
// is fresh and closed at the end.
package pgpool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultIdleTimeout is how long a session may stay idle in a pool.
const DefaultIdleTimeout = 2 * time.Minute

// Reset is what a session runs before it goes back to a pool: it drops
// everything a run may have left on it. An advisory lock (the run lock) is
// released; SET parameters go back to the session's start (those of the
// connection's startup, syncd's UTC and ISO settings, are kept); temporary
// tables (the sink's staging tables, whose columns are the copy's of that
// run) and cursors are dropped. Prepared statements are kept: pgx's cache
// names them by their SQL text, and a run drops its own (the source's page
// statements) before it gives the session back.
const Reset = "CLOSE ALL; RESET ALL; DISCARD TEMP; SELECT pg_advisory_unlock_all()"

// Options configure a Pool.
type Options struct {
	// MaxIdle is the most idle sessions kept per key (at least 1).
	MaxIdle int
	// IdleTimeout closes a session idle for longer (DefaultIdleTimeout
	// when zero).
	IdleTimeout time.Duration
}

// Pool holds idle sessions per key. Its methods are safe for concurrent use.
type Pool struct {
	o Options

	mu     sync.Mutex
	idle   map[string][]idleConn
	broken map[*pgx.Conn]bool
	// dialing are the dials Prime started, by key, that no Get took yet.
	dialing map[string]*dialing
	closed  bool
	// epoch counts the schema changes runs reported (SchemaChanged): a
	// session lent before the latest one drops its prepared statements
	// before it is lent again.
	epoch int64
	stop  chan struct{}
	done  chan struct{}
	stats Stats
}

// dialing is a session that Prime is dialing: the next Get of its key
// waits for it (its session or its error) instead of dialing another.
type dialing struct {
	done chan struct{} // closed when the dial returned
	conn *pgx.Conn
	err  error
}

type idleConn struct {
	conn  *pgx.Conn
	since time.Time
	epoch int64 // the pool's epoch when the session was lent last
}

// Stats count what a pool did.
type Stats struct {
	Dialed, Reused, Returned, Closed int64
	Idle                             int // sessions idle now
}

// New returns a pool; Close ends it.
func New(o Options) *Pool {
	o.MaxIdle = max(o.MaxIdle, 1)
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	p := &Pool{o: o, idle: map[string][]idleConn{}, broken: map[*pgx.Conn]bool{}, dialing: map[string]*dialing{}, stop: make(chan struct{}), done: make(chan struct{})}
	go p.janitor()
	return p
}

// janitor closes sessions idle for longer than IdleTimeout.
func (p *Pool) janitor() {
	defer close(p.done)
	t := time.NewTicker(max(p.o.IdleTimeout/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.prune(time.Now().Add(-p.o.IdleTimeout))
		}
	}
}

// prune closes the idle sessions that were given back before cutoff.
func (p *Pool) prune(cutoff time.Time) {
	var old []*pgx.Conn
	p.mu.Lock()
	for key, list := range p.idle {
		keep := list[:0]
		for _, ic := range list {
			if ic.since.Before(cutoff) {
				old = append(old, ic.conn)
			} else {
				keep = append(keep, ic)
			}
		}
		if len(keep) == 0 {
			delete(p.idle, key)
		} else {
			p.idle[key] = keep
		}
	}
	p.stats.Closed += int64(len(old))
	p.mu.Unlock()
	closeAll(old)
}

func closeAll(conns []*pgx.Conn) {
	for _, c := range conns {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.Close(ctx)
		cancel()
	}
}

// Get returns an idle session of key, the one given back last, the one
// Prime is dialing, or one that dial opens; reused says whether it was
// idle, and epoch is the pool's epoch now (Put takes it back).
func (p *Pool) Get(ctx context.Context, key string, dial func(context.Context) (*pgx.Conn, error)) (conn *pgx.Conn, reused bool, epoch int64, err error) {
	for {
		p.mu.Lock()
		list := p.idle[key]
		epoch = p.epoch
		if len(list) == 0 || p.closed {
			d := p.dialing[key]
			delete(p.dialing, key)
			p.mu.Unlock()
			if d != nil {
				conn, err := p.await(ctx, d)
				return conn, false, epoch, err
			}
			break
		}
		ic := list[len(list)-1]
		p.idle[key] = list[:len(list)-1]
		p.mu.Unlock()
		// A session the server ended while it was idle (a restart,
		// pg_terminate_backend) has sent its last words or closed its
		// socket: seen without a round trip, and dropped.
		if ic.conn.IsClosed() || !quiet(ic.conn) {
			_ = ic.conn.Close(context.WithoutCancel(ctx))
			p.count(func(s *Stats) { s.Closed++ })
			continue
		}
		if ic.epoch != epoch {
			// A table changed since this session was lent: pgx's cached
			// statements may describe its old columns ("cached plan must
			// not change result type"). One round trip drops them.
			if err := ic.conn.DeallocateAll(ctx); err != nil {
				_ = ic.conn.Close(context.WithoutCancel(ctx))
				p.count(func(s *Stats) { s.Closed++ })
				continue
			}
		}
		p.count(func(s *Stats) { s.Reused++ })
		return ic.conn, true, epoch, nil
	}
	conn, err = dial(ctx)
	if err == nil {
		p.count(func(s *Stats) { s.Dialed++ })
	}
	return conn, false, epoch, err
}

// Prime starts dialing a session of key in ctx's pool and returns at
// once, for a Get of key that comes later: a caller that will need a
// session after other work (a campaign's check needs its grants session
// once its source is open) has both connections made at the same time.
// The next Get of key takes the session, waiting for the dial if it has
// not returned, or gets its error, so a server that cannot be reached is
// dialed once. A session nobody took joins the idle ones; an error nobody
// took waits for the next Get. Without a pool, with a session of key idle
// or already being dialed, it does nothing.
func Prime(ctx context.Context, key string, dial func(context.Context) (*pgx.Conn, error)) {
	p := From(ctx)
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.closed || p.dialing[key] != nil || len(p.idle[key]) > 0 {
		p.mu.Unlock()
		return
	}
	d := &dialing{done: make(chan struct{})}
	p.dialing[key] = d
	p.mu.Unlock()
	go func() {
		d.conn, d.err = dial(ctx)
		close(d.done)
		p.mu.Lock()
		if p.dialing[key] != d || d.err != nil {
			// A Get took it, or its error waits for the next Get.
			p.mu.Unlock()
			return
		}
		delete(p.dialing, key)
		p.stats.Dialed++
		if !p.closed && len(p.idle[key]) < p.o.MaxIdle {
			p.idle[key] = append(p.idle[key], idleConn{conn: d.conn, since: time.Now(), epoch: p.epoch})
			p.mu.Unlock()
			return
		}
		p.stats.Closed++
		p.mu.Unlock()
		closeAll([]*pgx.Conn{d.conn})
	}()
}

// await waits for the dial d that Get took; a ctx that ends first gives
// up, and the session, when it comes, is closed.
func (p *Pool) await(ctx context.Context, d *dialing) (*pgx.Conn, error) {
	select {
	case <-d.done:
	case <-ctx.Done():
		go func() {
			<-d.done
			if d.err == nil {
				closeAll([]*pgx.Conn{d.conn})
			}
		}()
		return nil, context.Cause(ctx)
	}
	if d.err == nil {
		p.count(func(s *Stats) { s.Dialed++ })
	}
	return d.conn, d.err
}

// SchemaChanged tells the pool that a run found a table or a copy changed:
// every session lent before drops its prepared statements before it is
// lent again.
func (p *Pool) SchemaChanged() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch++
	return p.epoch
}

// quiet reports whether an idle session's socket has nothing to read: a
// server that ended the session sent its last message or closed the
// socket. It looks for a millisecond on the socket itself, not through
// pgconn, whose context handler would send the server a cancel request (a
// sink session's, see pgutil.ConnectSink). A byte it reads would be the
// start of a message nobody waits for: the session is closed anyway.
func quiet(conn *pgx.Conn) bool {
	nc := conn.PgConn().Conn()
	if err := nc.SetReadDeadline(time.Now().Add(time.Millisecond)); err != nil {
		return false
	}
	var b [1]byte
	n, err := nc.Read(b[:])
	if rerr := nc.SetReadDeadline(time.Time{}); rerr != nil {
		return false
	}
	var ne net.Error
	return n == 0 && errors.As(err, &ne) && ne.Timeout()
}

func (p *Pool) count(f func(*Stats)) {
	p.mu.Lock()
	f(&p.stats)
	p.mu.Unlock()
}

// Broken marks conn as not to be given back: Put closes it. A run marks
// its sessions so when it failed, whatever the session's state looks like.
func (p *Pool) Broken(conn *pgx.Conn) {
	if conn == nil {
		return
	}
	p.mu.Lock()
	p.broken[conn] = true
	p.mu.Unlock()
}

// Put gives conn back to key's idle sessions after running reset on it
// (Reset, and what the caller adds) in one round trip; a session closed,
// inside a transaction, marked Broken, whose reset fails, given back with
// a ctx that is done, or beyond MaxIdle is closed instead.
func (p *Pool) Put(ctx context.Context, key string, conn *pgx.Conn, epoch int64, reset string) {
	p.put(ctx, key, conn, epoch, reset, false)
}

// unlockAll releases every session advisory lock of a session about to be
// closed without its reset (see Session.ReleasesLocks).
const unlockAll = "SELECT pg_advisory_unlock_all()"

// put is Put; with unlock, a session closed without its reset (which
// releases them) first releases its advisory locks, so that they are free
// when Put returns, not only once the server has ended the session.
func (p *Pool) put(ctx context.Context, key string, conn *pgx.Conn, epoch int64, reset string, unlock bool) {
	p.mu.Lock()
	broken := p.broken[conn]
	delete(p.broken, conn)
	closed := p.closed
	p.mu.Unlock()
	ok := !broken && !closed && ctx.Err() == nil && !conn.IsClosed() && conn.PgConn().TxStatus() == 'I'
	if ok {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := conn.Exec(rctx, reset, pgx.QueryExecModeSimpleProtocol)
		cancel()
		unlock = unlock && err != nil // a reset that ran released them
		ok = err == nil && conn.PgConn().TxStatus() == 'I'
	}
	if ok {
		p.mu.Lock()
		if !p.closed && len(p.idle[key]) < p.o.MaxIdle {
			p.idle[key] = append(p.idle[key], idleConn{conn: conn, since: time.Now(), epoch: epoch})
			p.stats.Returned++
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	p.count(func(s *Stats) { s.Closed++ })
	if unlock && !conn.IsClosed() {
		// As the holder's own release would have, also for a run that
		// failed or was stopped: the next run may start at once.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = conn.Exec(uctx, unlockAll, pgx.QueryExecModeSimpleProtocol)
		cancel()
	}
	_ = conn.Close(context.WithoutCancel(ctx))
}

// Stats returns the pool's counts.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	for _, list := range p.idle {
		s.Idle += len(list)
	}
	return s
}

// Close closes the idle sessions; sessions given back later are closed.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var all []*pgx.Conn
	for _, list := range p.idle {
		for _, ic := range list {
			all = append(all, ic.conn)
		}
	}
	p.idle = map[string][]idleConn{}
	p.stats.Closed += int64(len(all))
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	closeAll(all)
}

type poolKey struct{}

// With returns ctx carrying p: sessions opened in it come from p.
func With(ctx context.Context, p *Pool) context.Context {
	if p == nil {
		return ctx
	}
	return context.WithValue(ctx, poolKey{}, p)
}

// From returns the pool ctx carries, or nil.
func From(ctx context.Context) *Pool {
	p, _ := ctx.Value(poolKey{}).(*Pool)
	return p
}

// Session is a session taken for one run: from ctx's pool when it carries
// one, else freshly dialed. Release gives it back (or closes it).
type Session struct {
	Conn   *pgx.Conn
	Reused bool // it came from the pool: it ran before, for this or another source
	pool   *Pool
	key    string
	reset  string
	epoch  int64
	unlock bool // Release releases its advisory locks (ReleasesLocks)
}

// Open takes a session of key from ctx's pool or dials one; reset is what
// it runs before it goes back (Reset and, for example, the sink's limits).
func Open(ctx context.Context, key, reset string, dial func(context.Context) (*pgx.Conn, error)) (*Session, error) {
	p := From(ctx)
	if p == nil {
		conn, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		return &Session{Conn: conn}, nil
	}
	conn, reused, epoch, err := p.Get(ctx, key, dial)
	if err != nil {
		return nil, err
	}
	return &Session{Conn: conn, Reused: reused, pool: p, key: key, reset: reset, epoch: epoch}, nil
}

// Release gives the session back to its pool after running extra and its
// reset, or closes it when it has no pool (extra is then not needed: the
// session ends).
func (s *Session) Release(ctx context.Context, extra string) error {
	if s.pool == nil {
		return s.Conn.Close(context.WithoutCancel(ctx))
	}
	s.pool.put(ctx, s.key, s.Conn, s.epoch, extra+s.reset, s.unlock)
	return nil
}

// ReleasesLocks reports whether Release releases the session advisory
// locks taken on the session (the run lock), so that their holder need
// not: true for a session of a pool, whose reset (Reset) ends with
// pg_advisory_unlock_all() in the same round trip, and which, when it is
// closed instead (marked broken, a reset that failed, a stopped run),
// runs pg_advisory_unlock_all() before it closes, as the holder would
// have. A session without a pool is closed by Release, and the server
// releases its locks only once it has ended the session: its holder
// releases them itself (false). From the call on, Release does so.
func (s *Session) ReleasesLocks() bool {
	if s.pool == nil {
		return false
	}
	s.unlock = true
	return true
}

// SchemaChanged is called by a run that found its table or copy changed
// since its last run, before it reads either: its session (when reused)
// drops its prepared statements now, and every other session of the pool
// before it is lent again (see Pool.SchemaChanged).
func (s *Session) SchemaChanged(ctx context.Context) error {
	if s.pool == nil {
		return nil
	}
	epoch := s.pool.SchemaChanged()
	if !s.Reused {
		s.epoch = epoch // opened meanwhile: nothing cached from before
		return nil
	}
	if err := s.Conn.DeallocateAll(ctx); err != nil {
		return fmt.Errorf("drop the prepared statements of a pooled session: %w", err)
	}
	s.epoch = epoch
	return nil
}

// Broken marks conn, taken from ctx's pool, as not to be reused.
func Broken(ctx context.Context, conn *pgx.Conn) {
	if p := From(ctx); p != nil {
		p.Broken(conn)
	}
}
