package sink

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgutil"
)

// Deferred is implemented by a sink whose Apply may return once a page has
// committed but before that commit is durable: PostgreSQL's asynchronous
// commit saves the WAL flush (about 3 ms) of every page. The run loop must
// then write a page's watermark only when Durable counts the page, so that
// a crash of the sink's server, which can lose the last asynchronous
// commits, never leaves a watermark ahead of the data.
//
// Every other commit is made durable explicitly (pgutil.DurableSQL inside
// the page's transaction), never left to the synchronous_commit that the
// sink's server, database, role or DSN options happen to set: with 'off'
// there, a commit syncd counted as durable could vanish in a crash.
type Deferred interface {
	// Durable is how many of the pages applied by this sink so far, counted
	// from its first Apply, are durable (every earlier one is too).
	Durable() int64
	// Flush makes every committed page durable.
	Flush(ctx context.Context) error
}

var _ Deferred = (*Postgres)(nil)

// durability tracks the pages whose commits were asynchronous until the
// server's WAL flush position passes their commit records.
type durability struct {
	async   bool // the server allows asynchronous commits to be tracked
	lsn     bool // the server reports its WAL positions
	applied int64
	durable int64
	pending []pendingCommit
	// Only a page that follows the previous commit within streamGap commits
	// asynchronously: the first page of a run and every page of a slow
	// trickle commit synchronously and get their watermark at once, as
	// before; a stream of pages saves a WAL flush per page.
	last   time.Time
	streak int  // commits in a row, each within streamGap of the previous
	now    bool // the page being applied commits asynchronously
}

// A page commits asynchronously only inside a stream: after streamPages
// commits in a row, each within streamGap of the previous. Short runs
// (an incremental run of a few pages) therefore behave exactly as a
// synchronous loop, watermark after every page.
const (
	streamGap   = 100 * time.Millisecond
	streamPages = 10
)

// start decides how the next page commits.
func (d *durability) start() bool {
	d.now = d.async && d.streak >= streamPages && time.Since(d.last) < streamGap
	return d.now
}

type pendingCommit struct {
	seq int64
	lsn uint64 // the WAL insert position right after the commit
}

// Durable implements Deferred.
func (s *Postgres) Durable() int64 { return s.dur.durable }

// flushSQL commits one durable transaction that writes WAL (creating a
// temporary table writes catalog rows; the sink already needs TEMPORARY for
// its staging table), so its commit waits for the WAL flush up to its own
// commit record, which covers every earlier commit. A transaction that
// writes no WAL (SELECT txid_current() alone, an upsert that changed
// nothing) commits without flushing anything, whatever synchronous_commit
// says. The flush position read after it is what Flush trusts.
const flushSQL = "BEGIN; CREATE TEMP TABLE IF NOT EXISTS syncd_flush () ON COMMIT DROP; " + pgutil.DurableSQL +
	"; COMMIT; SELECT pg_current_wal_flush_lsn()::text"

// Flush makes every committed page durable, and checks it with the
// server's WAL flush position.
func (s *Postgres) Flush(ctx context.Context) error {
	d := &s.dur
	if d.durable == d.applied {
		return nil
	}
	res, err := s.conn.PgConn().Exec(ctx, flushSQL).ReadAll()
	if err != nil {
		return fmt.Errorf("flush commits to %s: %w", s.table, err)
	}
	if !d.lsn {
		d.durable, d.pending = d.applied, d.pending[:0]
		return nil
	}
	last := res[len(res)-1]
	if len(last.Rows) != 1 || len(last.Rows[0]) != 1 {
		return fmt.Errorf("flush commits to %s: no WAL flush position in the reply", s.table)
	}
	fl, err := parseLSN(string(last.Rows[0][0]))
	if err != nil {
		return fmt.Errorf("flush commits to %s: %w", s.table, err)
	}
	d.flushed(fl)
	if d.durable != d.applied {
		return fmt.Errorf("flush commits to %s: the server's WAL flush position %s is still behind %d committed pages; the next run applies them again", s.table, last.Rows[0][0], d.applied-d.durable)
	}
	return nil
}

// durabilitySQL reads what prepareDurability decides by: whether a
// synchronous standby is configured, and whether the server reports its
// WAL positions.
const durabilitySQL = "SELECT current_setting('synchronous_standby_names'), pg_current_wal_insert_lsn()::text, pg_current_wal_flush_lsn()::text"

// QueueDurability queues in b the read that prepareDurability begins
// with, for a caller that sends it with other statements on the sink's
// session before Prepare, in the same run: the next Prepare uses its
// answer instead of reading it again (a server setting, read moments
// before, never kept from one run to the next). When the read fails,
// Prepare reads it itself.
func (s *Postgres) QueueDurability(b *pgx.Batch) {
	b.Queue(durabilitySQL).QueryRow(func(row pgx.Row) error {
		var standbys, insert, flush string
		if err := row.Scan(&standbys, &insert, &flush); err != nil {
			return err
		}
		s.durRead = &durability{lsn: true, async: strings.TrimSpace(standbys) == ""}
		return nil
	})
}

// prepareDurability turns asynchronous commits on for the fast path when
// the server can report its WAL positions and no synchronous standby is
// configured (a standby's acknowledgement is not visible in the local
// flush position).
func (s *Postgres) prepareDurability(ctx context.Context) {
	s.dur = durability{}
	if d := s.durRead; d != nil {
		s.dur.lsn, s.dur.async, s.durRead = d.lsn, d.async, nil
		return
	}
	var standbys, insert, flush string
	err := s.conn.QueryRow(ctx, durabilitySQL).Scan(&standbys, &insert, &flush)
	s.dur.lsn = err == nil
	s.dur.async = err == nil && strings.TrimSpace(standbys) == ""
}

// committed records a page's commit with the WAL positions read right after
// it: the page is durable once the flush position has passed the insert
// position, whether it committed asynchronously or not (a durable commit
// that wrote no WAL flushes nothing, not even the asynchronous commits
// before it). Without positions ("": the server does not report them) a
// synchronous commit is taken as durable with every earlier page.
func (d *durability) committed(insertLSN, flushLSN string) error {
	d.applied++
	if !d.last.IsZero() && time.Since(d.last) < streamGap {
		d.streak++
	} else {
		d.streak = 0
	}
	d.last = time.Now()
	if insertLSN == "" {
		d.durable, d.pending = d.applied, d.pending[:0]
		return nil
	}
	ins, err := parseLSN(insertLSN)
	if err != nil {
		return err
	}
	fl, err := parseLSN(flushLSN)
	if err != nil {
		return err
	}
	d.pending = append(d.pending, pendingCommit{seq: d.applied, lsn: ins})
	d.flushed(fl)
	return nil
}

// flushed marks durable every pending commit at or before the flush
// position.
func (d *durability) flushed(flush uint64) {
	n := 0
	for n < len(d.pending) && d.pending[n].lsn <= flush {
		d.durable = d.pending[n].seq
		n++
	}
	d.pending = append(d.pending[:0], d.pending[n:]...)
}

// parseLSN reads PostgreSQL's "16/B374D848".
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unreadable WAL position %q", s)
	}
	return h<<32 | l, nil
}

// durableCommit, run last in the upsert's transaction, makes its commit
// durable when it is not asynchronous (see commit).
func (s *Postgres) durableCommit(ctx context.Context, tx pgx.Tx) error {
	if s.dur.now {
		return nil
	}
	return pgutil.Durable(ctx, tx)
}

// pageSettings sets the upsert's transaction as begin does: JIT off,
// and an asynchronous commit when the page may commit asynchronously.
func (s *Postgres) pageSettings(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, noJIT); err != nil {
		return fmt.Errorf("turn JIT off for the page: %w", err)
	}
	if !s.dur.start() {
		return nil
	}
	if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
		return fmt.Errorf("set asynchronous commit: %w", err)
	}
	return nil
}

// afterCommit records the upsert's commit with the server's WAL positions.
func (s *Postgres) afterCommit(ctx context.Context) error {
	if !s.dur.lsn {
		return s.dur.committed("", "")
	}
	var insert, flush string
	if err := s.conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text, pg_current_wal_flush_lsn()::text").Scan(&insert, &flush); err != nil {
		return fmt.Errorf("read WAL position of %s: %w", s.table, err)
	}
	return s.dur.committed(insert, flush)
}
