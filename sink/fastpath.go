package sink

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
)

// BinaryWriter is implemented by a sink that can take pages of binary
// values (page.Page.Binary). The run loop asks after Prepare and, when the
// answer is yes, has the source read binary.
type BinaryWriter interface {
	WantsBinary() bool
}

var _ BinaryWriter = (*Postgres)(nil)

// Differ is implemented by a sink whose copy another writer of syncd's
// fills too (a resumed first load's upsert): Differs is the SQL condition,
// on the stored row (alias stored, such as "t.") and the incoming one, that
// some value differs, so that a row the copy holds already is left as it
// is.
type Differ interface {
	Differs(stored, incoming string) string
}

var _ Differ = (*Postgres)(nil)

// optimisticAfter is how many probed pages in a row must go fast before
// the fast path stops probing.
const optimisticAfter = 4

// firstUserOID is PostgreSQL's FirstNormalObjectId: types below it are
// built in, with the same OID and binary format on every server.
const firstUserOID = 16384

// fastPath streams a page with COPY straight into the copy while the copy
// holds none of the page's keys: that insert is exactly what the upsert
// would do, at about twice the speed. Whether a page qualifies is decided
// by the server, never guessed: a key already present makes the COPY fail
// with a unique violation, the transaction rolls back, and the page is
// applied again by the upsert. So a re-applied page, a page that overlaps
// rows already copied, or a concurrent writer on the copy all end in the
// upsert, with the same result.
//
// To avoid paying for that failed COPY on every page of an incremental
// run, the fast path is optimistic only while it is clearly winning (the
// copy was empty when the run started, or the last few pages were probed
// and went fast); otherwise it first asks the server with one cheap probe
// whether any key of the page is stored, and takes the upsert directly
// when one is.
type fastPath struct {
	enabled     bool // single-column key, no soft deletes
	binary      bool // every column built in and of the same type on both sides
	pipelined   bool // pages go in one round trip (no soft deletes)
	optimistic  bool // COPY without probing first
	fresh       bool // the copy was empty when the run started
	streak      int  // probed pages in a row that went fast
	keyIdx      int
	keyElemOID  uint32 // element and array type of the binary key array
	keyArrayOID uint32
	copySQL     string // COPY into the copy, text
	copyBinSQL  string // COPY into the copy, binary
	stageBin    string // COPY into the staging table, binary
	probeSQL    string

	// Counters, for tests and the run log.
	Fast, Upserted, Conflicts int64
}

// FastStats reports how many pages went by COPY straight into the copy,
// how many through the upsert, and how many COPYs met an existing key and
// were applied again by the upsert.
func (s *Postgres) FastStats() (fast, upserted, conflicts int64) {
	return s.fp.Fast, s.fp.Upserted, s.fp.Conflicts
}

// WantsBinary is true when every column has a built-in type that the copy
// stores with the same type, so binary values go through COPY unchanged.
func (s *Postgres) WantsBinary() bool { return s.fp.binary }

// prepareFast decides, after Prepare, what the fast path may do.
func (s *Postgres) prepareFast(ctx context.Context, cols []page.Column) error {
	fp := fastPath{}
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	list := pgutil.IdentList("", names)
	target := s.qualified()
	fp.copySQL = "COPY " + target + " (" + list + ") FROM STDIN"
	fp.copyBinSQL = "COPY " + target + " (" + list + ") FROM STDIN (FORMAT binary)"
	fp.stageBin = "COPY pg_temp.syncd_stage (" + list + ") FROM STDIN (FORMAT binary)"

	if s.known.columns == nil {
		var err error
		if s.known.columns, err = s.columns(ctx); err != nil {
			return err
		}
	}
	existing := s.known.columns
	// Soft deletes change what a page means (a flagged row is removed or
	// kept flagged), so those pages always take the sink's full apply path.
	soft := s.cfg.Source.DeletedColumn != ""
	fp.binary = !soft
	fp.pipelined = !soft
	for _, c := range cols {
		if c.TypeOID == 0 || c.TypeOID >= firstUserOID || existing[c.Name] != c.Type {
			fp.binary = false
		}
	}
	if len(s.cfg.Sink.Key) == 1 && !soft {
		key := s.cfg.Sink.Key[0]
		for i, c := range cols {
			if c.Name != key {
				continue
			}
			fp.enabled = true
			fp.keyIdx = i
			fp.keyElemOID = c.TypeOID
			k := pgutil.Ident(key)
			arr := "$1::" + c.Type + "[]"
			fp.probeSQL = "SELECT EXISTS (SELECT 1 FROM " + target + " WHERE " + k + " >= (SELECT x FROM unnest(" + arr + ") x ORDER BY x LIMIT 1)" +
				" AND " + k + " <= (SELECT x FROM unnest(" + arr + ") x ORDER BY x DESC LIMIT 1))" +
				" AND EXISTS (SELECT 1 FROM " + target + " WHERE " + k + " = ANY (" + arr + "))"
		}
	}
	if fp.enabled {
		empty := false
		if !s.holdsRows {
			if err := s.conn.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM "+target+")").Scan(&empty); err != nil {
				return fmt.Errorf("read sink table %s: %w", s.table, err)
			}
		}
		fp.optimistic, fp.fresh = empty, empty
		if fp.binary && s.known.keyElem != fp.keyElemOID {
			var arr int64
			if err := s.conn.QueryRow(ctx, "SELECT typarray::int8 FROM pg_type WHERE oid = $1", int64(fp.keyElemOID)).Scan(&arr); err != nil {
				return fmt.Errorf("read the key type of %s: %w", s.table, err)
			}
			s.known.keyElem, s.known.keyArray = fp.keyElemOID, uint32(arr)
		}
		if fp.binary {
			fp.keyArrayOID = s.known.keyArray
		}
	}
	s.fp = fp
	return nil
}

// applyFast applies p in one round trip: by COPY straight into the copy
// when it can, else through the staging table and the upsert. ok is false
// when the page must take the sink's own apply path (soft deletes).
func (s *Postgres) applyFast(ctx context.Context, p page.Page) (res Result, ok bool, err error) {
	fp := &s.fp
	if !fp.pipelined || p.Binary && !fp.binary {
		return Result{}, false, nil
	}
	if fp.enabled {
		stored := false
		if !fp.optimistic {
			if stored, err = s.probe(ctx, p); err != nil {
				return Result{}, false, fmt.Errorf("apply page to %s: probe keys: %w", s.table, err)
			}
			if stored {
				fp.streak = 0
			}
		}
		if !stored {
			q := fp.copySQL
			if p.Binary {
				q = fp.copyBinSQL
			}
			encodeRoundTrip(&s.buf, s.begin()+q+s.markStatement(p)+s.commit(), p)
			r, err := s.roundTrip(ctx, s.buf.Bytes())
			var pgErr *pgconn.PgError
			switch {
			case err == nil:
				fp.Fast++
				if !fp.optimistic {
					fp.streak++
					fp.optimistic = fp.streak >= optimisticAfter
				}
				return Result{Written: r.tagCount("COPY")}, true, s.committedReply(r)
			case errors.As(err, &pgErr) && len(pgErr.Code) == 5 && pgErr.Code[:2] == "23":
				// A key is already stored (or the page repeats one): apply
				// the page again with the upsert, which handles both. Any
				// other integrity error comes back from the upsert with its
				// own message.
				fp.Conflicts++
				fp.optimistic, fp.streak = false, 0
			default:
				return Result{}, false, fmt.Errorf("apply page to %s: copy: %w", s.table, err)
			}
		}
	}
	fp.Upserted++
	res, err = s.upsertRoundTrip(ctx, p)
	return res, true, err
}

// probe asks whether the copy holds any key of p: first whether any stored
// key falls between the page's smallest and largest key (one index probe),
// and only then whether one of the page's keys itself is stored. The keys
// travel as one array parameter in the page's own format.
func (s *Postgres) probe(ctx context.Context, p page.Page) (bool, error) {
	var arg []byte
	var oid uint32
	var format int16
	for _, r := range p.Rows {
		if r[s.fp.keyIdx] == nil {
			return true, nil // a NULL key: let the upsert report it
		}
	}
	if p.Binary {
		arg, oid, format = binaryArray(p.Rows, s.fp.keyIdx, s.fp.keyElemOID), s.fp.keyArrayOID, 1
	} else {
		arg = textArray(p.Rows, s.fp.keyIdx)
	}
	rr := s.conn.PgConn().ExecParams(ctx, s.fp.probeSQL, [][]byte{arg}, []uint32{oid}, []int16{format}, nil)
	stored := false
	for rr.NextRow() {
		stored = string(rr.Values()[0]) == "t"
	}
	_, err := rr.Close()
	return stored, err
}

// binaryArray is a one-dimensional array of column idx of rows in
// PostgreSQL's binary array format.
func binaryArray(rows [][][]byte, idx int, elem uint32) []byte {
	b := make([]byte, 0, 20+len(rows)*12)
	b = binary.BigEndian.AppendUint32(b, 1) // dimensions
	b = binary.BigEndian.AppendUint32(b, 0) // no NULLs
	b = binary.BigEndian.AppendUint32(b, elem)
	b = binary.BigEndian.AppendUint32(b, uint32(len(rows)))
	b = binary.BigEndian.AppendUint32(b, 1) // lower bound
	for _, r := range rows {
		b = binary.BigEndian.AppendUint32(b, uint32(len(r[idx])))
		b = append(b, r[idx]...)
	}
	return b
}

// textArray is an array literal of column idx of rows, every element
// quoted.
func textArray(rows [][][]byte, idx int) []byte {
	b := []byte{'{'}
	for i, r := range rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		for _, c := range r[idx] {
			if c == '"' || c == '\\' {
				b = append(b, '\\')
			}
			b = append(b, c)
		}
		b = append(b, '"')
	}
	return append(b, '}')
}

// encode writes p into s.buf in the COPY format its values are in.
func encode(buf *bytes.Buffer, p page.Page) {
	buf.Reset()
	if p.Binary {
		appendCopyBinary(buf, p.Rows)
		return
	}
	pgutil.AppendCopyText(buf, p.Rows)
}

// stageCopySQL is the COPY into the staging table for p's format.
func (s *Postgres) stageCopySQL(p page.Page) string {
	if p.Binary {
		return s.fp.stageBin
	}
	return s.copySQL
}

var copyBinaryHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// appendCopyBinary appends rows of binary values in COPY's binary format:
// a header, then per row the field count and each value with its length
// (-1 for NULL), then a trailer.
func appendCopyBinary(buf *bytes.Buffer, rows [][][]byte) {
	size := len(copyBinaryHeader) + 2
	for _, row := range rows {
		size += 2 + 4*len(row)
		for _, v := range row {
			size += len(v)
		}
	}
	buf.Grow(size)
	b := buf.AvailableBuffer()
	b = append(b, copyBinaryHeader...)
	for _, row := range rows {
		b = binary.BigEndian.AppendUint16(b, uint16(len(row)))
		for _, v := range row {
			if v == nil {
				b = binary.BigEndian.AppendUint32(b, 0xffffffff)
				continue
			}
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	}
	b = binary.BigEndian.AppendUint16(b, 0xffff)
	buf.Write(b)
}

// analyzeLimit bounds the ANALYZE of a freshly filled copy also when
// sink.page_timeout and sink.statement_timeout are 0 (no limit).
const analyzeLimit = time.Minute

// analyzeFresh gives a copy that this run filled from empty its size and
// the statistics of its key at once, instead of leaving the next run's
// upserts and reconcile's key-range scans to plan on an empty table until
// autovacuum comes by. Only the key columns: a full ANALYZE of the
// benchmark's table costs a fifth of the sync itself; autovacuum fills in
// the other columns. A run that did not catch up (stopped gracefully or by
// force, or failed: see Unfinisher) leaves it to autovacuum too: a stop
// must not wait for an ANALYZE, and the next run goes on filling the copy.
// The ANALYZE itself stops at ctx, at the session's statement_timeout, at
// sink.page_timeout and at analyzeLimit, whichever comes first.
func (s *Postgres) analyzeFresh(ctx context.Context) {
	if !s.fp.fresh || s.fp.Fast == 0 || s.unfinished || ctx.Err() != nil || s.conn.IsClosed() {
		return
	}
	actx, cancel := PageContext(ctx, s.cfg)
	defer cancel()
	actx, cancel = context.WithTimeout(actx, analyzeLimit)
	defer cancel()
	_, _ = s.conn.Exec(actx, "ANALYZE "+s.qualified()+" ("+pgutil.IdentList("", s.cfg.Sink.Key)+")")
}
