package pgutil

import (
	"context"
	"net"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Counter counts what syncd's connections send their servers: each flush
// of the client's buffer is one round trip (pgx writes a query's Parse,
// Bind, Execute and Sync in one write, then waits for the answer), and a
// round trip that carries a statement records its text. Tests and the
// benchmarks put one in the context a connection is opened with
// (WithCounter): every connection opened in it counts, for as long as it
// lives, also when a pool hands it to a later run.
type Counter struct {
	mu         sync.Mutex
	connects   int
	roundTrips int
	statements []string
}

// CounterSnapshot is what a Counter has counted so far.
type CounterSnapshot struct {
	Connects   int      // connections opened
	RoundTrips int      // client flushes after the connection was made
	Statements []string // the SQL each of those carried ("" for none: a sync, a ping)
}

// Snapshot returns the counts so far.
func (c *Counter) Snapshot() CounterSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CounterSnapshot{Connects: c.connects, RoundTrips: c.roundTrips, Statements: append([]string(nil), c.statements...)}
}

// Since is what was counted after before was taken.
func (s CounterSnapshot) Since(before CounterSnapshot) CounterSnapshot {
	return CounterSnapshot{Connects: s.Connects - before.Connects, RoundTrips: s.RoundTrips - before.RoundTrips,
		Statements: s.Statements[min(len(before.Statements), len(s.Statements)):]}
}

type counterKey struct{}

// WithCounter returns ctx with c: connections opened in it count in c.
func WithCounter(ctx context.Context, c *Counter) context.Context {
	return context.WithValue(ctx, counterKey{}, c)
}

// counting makes cfg's connection count in ctx's Counter, if it has one.
func counting(ctx context.Context, cfg *pgx.ConnConfig) *Counter {
	c, _ := ctx.Value(counterKey{}).(*Counter)
	if c == nil {
		return nil
	}
	dial := cfg.DialFunc
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: 5 * 60e9}).DialContext
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countedConn{Conn: nc}, nil
	}
	return c
}

// started marks conn's socket as connected: its writes count from now on.
func (c *Counter) started(conn *pgx.Conn) {
	if cc, ok := conn.PgConn().Conn().(*countedConn); ok {
		c.mu.Lock()
		c.connects++
		c.mu.Unlock()
		cc.mu.Lock()
		cc.c = c
		cc.mu.Unlock()
	}
}

// countedConn is a socket whose writes count in c once set.
type countedConn struct {
	net.Conn
	mu sync.Mutex
	c  *Counter
}

func (cc *countedConn) Write(b []byte) (int, error) {
	cc.mu.Lock()
	c := cc.c
	cc.mu.Unlock()
	if c != nil {
		sql := statementOf(b)
		c.mu.Lock()
		c.roundTrips++
		c.statements = append(c.statements, sql)
		c.mu.Unlock()
	}
	return cc.Conn.Write(b)
}

// statementOf is the SQL of the first Query ('Q') or Parse ('P') message
// in b, or the first message's type when it carries none.
func statementOf(b []byte) string {
	for len(b) >= 5 {
		typ := b[0]
		n := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4])
		if n < 4 || 1+n > len(b) {
			break
		}
		body := b[5 : 1+n]
		switch typ {
		case 'Q':
			return cstring(body)
		case 'P':
			// The statement's name, then its SQL.
			name := cstring(body)
			return cstring(body[min(len(name)+1, len(body)):])
		case 'B':
			// A prepared statement run again: the portal's name, then the
			// statement's.
			portal := cstring(body)
			return "(execute " + cstring(body[min(len(portal)+1, len(body)):]) + ")"
		}
		b = b[1+n:]
	}
	if len(b) > 0 {
		return "(" + string(rune(b[0])) + ")"
	}
	return ""
}

func cstring(b []byte) string {
	for i, x := range b {
		if x == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

var _ net.Conn = (*countedConn)(nil)
