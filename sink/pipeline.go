package sink

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
)

// One round trip per page. A page's transaction (BEGIN, COPY, the upsert,
// COMMIT and the WAL positions) goes to the server as one simple-protocol
// query followed by the COPY data, written in one piece; the replies are
// read once. Under load every round trip waits for the server process to
// be scheduled, so six of them per page cost more than the COPY itself.

// reply is what the server answered to one round trip.
type reply struct {
	tags     []string // command tags, in order
	row      []string // the values of the last row returned
	txStatus byte     // 'I' idle, 'T' in a transaction, 'E' in a failed one
}

// encodeRoundTrip writes into buf the Query message sql, whose one COPY
// ... FROM STDIN takes p, followed by p as one CopyData message and
// CopyDone.
func encodeRoundTrip(buf *bytes.Buffer, sql string, p page.Page) {
	buf.Reset()
	buf.WriteByte('Q')
	buf.Write(binary.BigEndian.AppendUint32(nil, uint32(4+len(sql)+1)))
	buf.WriteString(sql)
	buf.WriteByte(0)
	start := buf.Len()
	buf.Write([]byte{'d', 0, 0, 0, 0})
	if p.Binary {
		appendCopyBinary(buf, p.Rows)
	} else {
		pgutil.AppendCopyText(buf, p.Rows)
	}
	binary.BigEndian.PutUint32(buf.Bytes()[start+1:], uint32(buf.Len()-start-1))
	buf.Write([]byte{'c', 0, 0, 0, 4})
}

// roundTrip sends the encoded messages and reads every reply up to
// ReadyForQuery. A server error comes back as *pgconn.PgError; the
// transaction it leaves open (txStatus 'E') is rolled back here.
func (s *Postgres) roundTrip(ctx context.Context, wire []byte) (reply, error) {
	pc := s.conn.PgConn()
	var r reply
	if err := pc.Frontend().SendUnbufferedEncodedCopyData(wire); err != nil {
		pc.Close(context.WithoutCancel(ctx))
		return r, fmt.Errorf("send page: %w", err)
	}
	rctx, done := cancelOnServer(ctx, pc)
	defer done()
	var pgErr error
	for {
		msg, err := pc.ReceiveMessage(rctx)
		if err != nil {
			pc.Close(context.WithoutCancel(ctx))
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (the server did not answer the cancel request)", context.Cause(ctx))
			}
			return r, fmt.Errorf("read reply: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.CommandComplete:
			r.tags = append(r.tags, string(m.CommandTag))
		case *pgproto3.DataRow:
			r.row = r.row[:0]
			for _, v := range m.Values {
				r.row = append(r.row, string(v))
			}
		case *pgproto3.ErrorResponse:
			if pgErr == nil {
				pgErr = pgconn.ErrorResponseToPgError(m)
			}
		case *pgproto3.ReadyForQuery:
			r.txStatus = m.TxStatus
			if r.txStatus != 'I' {
				// Also when ctx has ended (the statement was cancelled):
				// the session must be idle again for the run lock's
				// release and the next page.
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
				_, err := pc.Exec(rctx, "ROLLBACK").ReadAll()
				cancel()
				if err != nil && pgErr == nil {
					pgErr = fmt.Errorf("roll back: %w", err)
				}
			}
			return r, pgErr
		}
	}
}

// cancelGrace is how long the server may take to answer a cancel request
// before the connection is given up.
const cancelGrace = 5 * time.Second

// cancelOnServer watches ctx while a round trip reads its replies: when ctx
// ends (a forced stop, sink.page_timeout) it asks the server to cancel the
// statement in flight, which then answers with an error and leaves the
// session usable; the returned context, which the replies are read with,
// ends only when the server has not answered within cancelGrace. Call done
// when the round trip is over.
func cancelOnServer(ctx context.Context, pc *pgconn.PgConn) (rctx context.Context, done func()) {
	rctx, rcancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		cctx, cancel := context.WithTimeout(rctx, cancelGrace)
		defer cancel()
		_ = pc.CancelRequest(cctx)
		<-cctx.Done()
		rcancel() // no-op when the round trip is already over
	})
	return rctx, func() {
		stop()
		rcancel()
	}
}

// rollbackTimeout bounds the ROLLBACK after a failed page.
const rollbackTimeout = 10 * time.Second

// tagCount is the row count of the first command tag that starts with
// verb ("COPY 1000", "INSERT 0 12").
func (r reply) tagCount(verb string) int64 {
	for _, t := range r.tags {
		if strings.HasPrefix(t, verb+" ") {
			n, _ := strconv.ParseInt(t[strings.LastIndexByte(t, ' ')+1:], 10, 64)
			return n
		}
	}
	return 0
}

// begin opens a page's transaction, asynchronous when durability allows
// (its watermark then waits for the WAL flush).
func (s *Postgres) begin() string {
	if s.dur.start() {
		return "BEGIN; " + noJIT + "SET LOCAL synchronous_commit = off; "
	}
	return "BEGIN; " + noJIT
}

// noJIT turns JIT compilation off for a page's transaction: the upsert's
// per-row probe of the copy's index makes the planner's estimate grow
// with the page, and past jit_above_cost (a page of about 13,000 rows)
// the server would spend tens of milliseconds compiling a statement that
// runs once.
const noJIT = "SET LOCAL jit = off; "

// markStatement is "; " and the statement that moves the copy's record
// to p's mark, or "" (see markSQL).
func (s *Postgres) markStatement(p page.Page) string {
	if q := s.markSQL(p); q != "" {
		return "; " + q
	}
	return ""
}

// commit ends a page's transaction and reads the WAL positions. A page
// that is not asynchronous gets its watermark as soon as it returns, so
// its commit is made durable right before COMMIT, whatever
// synchronous_commit the sink's server, database, role, DSN or anything
// the page ran (a trigger) has set.
func (s *Postgres) commit() string {
	const lsn = "; COMMIT; SELECT pg_current_wal_insert_lsn()::text, pg_current_wal_flush_lsn()::text"
	if s.dur.now {
		return lsn
	}
	return "; " + pgutil.DurableSQL + lsn
}

// committedReply records the commit of a round trip with the WAL
// positions it returned.
func (s *Postgres) committedReply(r reply) error {
	if len(r.row) != 2 {
		return fmt.Errorf("commit: no WAL position in the reply")
	}
	return s.dur.committed(r.row[0], r.row[1])
}

// upsertRoundTrip applies p through the staging table and the upsert in
// one round trip.
func (s *Postgres) upsertRoundTrip(ctx context.Context, p page.Page) (Result, error) {
	var sql strings.Builder
	sql.WriteString(s.begin())
	if !s.stageReady {
		sql.WriteString(s.stageSQL() + "; ")
	}
	sql.WriteString(s.stageCopySQL(p) + "; " + s.upsertSQL + s.markStatement(p) + s.commit())
	encodeRoundTrip(&s.buf, sql.String(), p)
	r, err := s.roundTrip(ctx, s.buf.Bytes())
	if err != nil {
		s.stageReady = false
		return Result{}, fmt.Errorf("apply page to %s: %w", s.table, err)
	}
	s.stageReady = true
	return Result{Written: r.tagCount("INSERT")}, s.committedReply(r)
}

// stageSQL creates the session's staging table, shaped like the copy.
func (s *Postgres) stageSQL() string {
	names := make([]string, len(s.cols))
	for i, c := range s.cols {
		names[i] = c.Name
	}
	return "CREATE TEMP TABLE IF NOT EXISTS syncd_stage ON COMMIT DELETE ROWS AS SELECT " +
		pgutil.IdentList("", names) + " FROM " + s.qualified() + " WITH NO DATA"
}
