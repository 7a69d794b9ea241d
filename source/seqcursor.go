package source

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
)

// integerTypes are the first cursor column types a sequence can fill.
var integerTypes = map[string]bool{"smallint": true, "integer": true, "bigint": true}

// seqQuery describes how the first cursor column gets its values: an
// identity column or a serial's owned sequence, or a default that is
// exactly nextval() of a sequence, with that sequence's settings.
const seqQuery = `
SELECT a.attidentity <> '', s.oid::int8, s.oid::regclass::text,
       coalesce(pg_get_expr(ad.adbin, ad.adrelid) = format('nextval(%L::regclass)', s.oid::regclass::text), false),
       q.seqincrement, q.seqcache, q.seqcycle
FROM pg_attribute a
LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
LEFT JOIN LATERAL (
  SELECT c.oid FROM pg_class c WHERE c.oid = pg_get_serial_sequence($1::text, $2::text)::regclass
  UNION ALL
  SELECT d.refobjid FROM pg_depend d JOIN pg_class c ON c.oid = d.refobjid AND c.relkind = 'S'
  WHERE d.classid = 'pg_attrdef'::regclass AND d.objid = ad.oid AND d.refclassid = 'pg_class'::regclass
  LIMIT 1
) s ON true
LEFT JOIN pg_sequence q ON q.seqrelid = s.oid
WHERE a.attrelid = $1::text::regclass AND a.attname::text = $2::text`

// classifyCursor decides whether the read bound can make the first cursor
// column commit-safe. A timestamp or date is bounded by the oldest open
// transaction's start (Bound). An integer filled by its own sequence, one
// value per nextval() with CACHE 1, ascending and not cycling, is bounded
// by the largest committed value once the transactions that held a lock on
// the table or the sequence have ended (sequenceBound). Any other column
// (text, uuid, numeric, an integer the application fills) can be committed
// below values already read, and nothing tells syncd when: the config is
// refused unless source.bound is off, which accepts that such rows are
// found only by syncd reconcile. A coupon campaign reads a frozen target
// set and needs no bound.
func classifyCursor(ctx context.Context, conn *pgx.Conn, c *config.Config, t *Table) error {
	if t.Temporal || c.Sink.Type == config.SinkCouponGrants {
		return nil
	}
	first := t.Cursor[0]
	reason, err := sequenceOf(ctx, conn, t)
	if err != nil {
		return err
	}
	if reason == "" {
		return nil
	}
	t.unsafe = fmt.Sprintf("first cursor column %q (%s) %s", first.Name, first.Type, reason)
	if c.Source.Bound == config.BoundOff {
		return nil
	}
	return c.Errorf("source.cursor", "%s, so a row committed after rows with higher values were read would be skipped for good; start the cursor with a timestamp stamped at each write (for example [updated_at, %s]) or an identity/bigserial column, or set source.bound: off to accept that such rows are found only by syncd reconcile",
		t.unsafe, c.Source.Cursor[len(c.Source.Cursor)-1])
}

// sequenceOf sets t.Seq when the first cursor column is filled by a
// sequence in commit-compatible order, or says why it is not.
func sequenceOf(ctx context.Context, conn *pgx.Conn, t *Table) (string, error) {
	first := t.Cursor[0]
	if !integerTypes[baseType(first.Type)] {
		return "is not assigned in commit order: its values come from the application, not from the database's clock or a sequence", nil
	}
	var (
		identity, isNextval bool
		oid                 pgtype.Int8
		name                pgtype.Text
		inc, cache          pgtype.Int8
		cycle               pgtype.Bool
	)
	err := conn.QueryRow(ctx, seqQuery, pgutil.Qualified(t.Ident.Schema, t.Ident.Name), first.Name).
		Scan(&identity, &oid, &name, &isNextval, &inc, &cache, &cycle)
	if err != nil {
		return "", fmt.Errorf("read how %s.%s gets its values: %w", t.Ident, first.Name, err)
	}
	switch {
	case !oid.Valid || !(identity || isNextval):
		return "has no identity or nextval() default: its values come from the application, in no particular commit order", nil
	case !inc.Valid:
		return "", fmt.Errorf("read the settings of sequence %s: this role cannot see them", name.String)
	case inc.Int64 < 0:
		return fmt.Sprintf("takes its values from sequence %s, which counts down", name.String), nil
	case cycle.Bool:
		return fmt.Sprintf("takes its values from sequence %s, which cycles back to its start (run ALTER SEQUENCE %s NO CYCLE)", name.String, name.String), nil
	case cache.Int64 > 1:
		return fmt.Sprintf("takes its values from sequence %s with CACHE %d: each session hands out values from its own block, long after other sessions committed higher ones (run ALTER SEQUENCE %s CACHE 1)", name.String, cache.Int64, name.String), nil
	}
	t.Seq, t.SeqName = uint32(oid.Int64), name.String
	return "", nil
}

// sequenceBound bounds a sequence cursor. It reads M0, the largest
// committed value (capped at the sequence's last value, so that an id set
// by hand above it waits until the sequence reaches it instead of carrying
// the watermark past ids still to be handed out), in its own snapshot, and
// only then lists the open
// transactions holding a write lock on the table (or a partition) or a lock
// on the sequence (nextval() takes one until the transaction ends, also
// when the value is taken before the INSERT). With CACHE 1 every value
// below M0 was handed out before M0 was, so before M0 committed: a
// transaction that holds one and has not ended is in that list. When the
// list is empty, rows up to M0 are safe; otherwise the bound holds at the
// watermark until AwaitWriters has seen exactly those transactions end.
// Values a writer sets itself (an explicit id, OVERRIDING SYSTEM VALUE, a
// value from nextval() in an earlier transaction) are outside this
// guarantee, as are UPDATEs, which an id cursor never sees.
func (r *Reader) sequenceBound(ctx context.Context) (Bound, error) {
	first := r.table.Cursor[0]
	if r.cfg.Source.Bound == config.BoundOff {
		why := r.table.unsafe
		if why == "" {
			why = fmt.Sprintf("first cursor column %q (%s) is not a timestamp", first.Name, first.Type)
		}
		return Bound{off: fmt.Sprintf("source.bound is off and the %s: a row committed after rows with higher values were read is skipped by every run and found only by syncd reconcile; schedule reconcile, or remove bound: off where the cursor allows it", why)}, nil
	}
	var (
		b    Bound
		m0   pgtype.Text
		last pgtype.Int8
	)
	col := pgutil.Ident(first.Name)
	// A value set by hand above the sequence (an explicit id) is no proof
	// that lower values were handed out: M0 is capped at the sequence's
	// last value when this role may read it.
	q := "SELECT least(m.v, l.v)::text, l.v, now(), pg_is_in_recovery() FROM (SELECT max(" + col + ") AS v FROM " +
		pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name) + ") AS m, " +
		"(SELECT CASE WHEN has_sequence_privilege($1::oid, 'SELECT,USAGE') THEN pg_sequence_last_value($1::oid) END AS v) AS l"
	if err := r.conn.QueryRow(ctx, q, r.table.Seq).Scan(&m0, &last, &b.Now, &b.Standby); err != nil {
		return Bound{}, fmt.Errorf("read the largest committed %s of %s for the read bound: %w", first.Name, r.table.Ident, err)
	}
	b.Now = b.Now.UTC()
	if last.Valid {
		b.SeqLast = strconv.FormatInt(last.Int64, 10)
	}
	next, err := nextValue(first.Type, m0)
	if err != nil {
		return Bound{}, fmt.Errorf("read bound of %s: %w", r.table.Ident, err)
	}
	ws, err := r.writers(ctx, r.table.Seq)
	if err != nil {
		return Bound{}, err
	}
	b.next, b.pending = next, ws
	b.holdFor(ws)
	if !b.Hold {
		b.Value = next
	}
	return b, nil
}

// nextValue is the exclusive limit just above m0 in an integer type: the
// type's lowest value when the table is empty (nothing is read), "" when
// m0 is the type's highest value (the sequence can give no more).
func nextValue(typ string, m0 pgtype.Text) (string, error) {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	switch baseType(typ) {
	case "smallint":
		lo, hi = math.MinInt16, math.MaxInt16
	case "integer":
		lo, hi = math.MinInt32, math.MaxInt32
	}
	if !m0.Valid {
		return strconv.FormatInt(lo, 10), nil
	}
	v, err := strconv.ParseInt(m0.String, 10, 64)
	if err != nil {
		return "", fmt.Errorf("parse %q as %s: %w", m0.String, typ, err)
	}
	if v >= hi {
		return "", nil
	}
	return strconv.FormatInt(v+1, 10), nil
}
