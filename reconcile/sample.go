package reconcile

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"golang.org/x/sync/errgroup"
)

// The density sample. With differences scattered at more than about
// ln 2 / leaf per row, nearly every range of the first checksum level
// differs, and the checksum pass over both tables only leads to streaming
// most of them again as (key, hash) pairs: two passes where one would do.
// A sample taken before the first level tells that case apart; the line is
// then streamed at once. The sample only chooses how the line is compared:
// every row is still compared by the stream or the checksums, so a wrong
// estimate (a skewed sample, writes in flight) costs time, never a missed
// difference.

const (
	// sampleLeaves is the size of the sample per side, in leaves: 48 ranges
	// of the first level for an integer key, 48 × leaf rows otherwise. At
	// the threshold a keyed sample of 6,144 rows holds about 33 differing
	// keys, far from the none or one of identical tables or ten differences
	// in a million rows.
	sampleLeaves = 48
	// sampleShare: only tables of at least sampleShare times the sample are
	// sampled (98,304 rows at 128-row leaves). Below that the checksum pass
	// is cheap anyway, and the sample would be a large part of it.
	sampleShare = 16
)

// Plans say how a reconcile compared the line (Report.Plan).
const (
	// PlanChecksums: checksum levels, then (key, hash) streams of the
	// ranges that differ.
	PlanChecksums = "checksums"
	// PlanStream: the density sample found the differences too dense for
	// checksums to narrow them; every row's (key, hash) was streamed at
	// once.
	PlanStream = "stream"
)

// sample estimates, before the first checksum level over top, whether the
// differences are so dense that the checksum level would be wasted, and
// records the sample in c.rep.Sample. It takes no sample (and answers
// false) for small tables and for keys without a unique index on either
// side, which the sample reads by key.
func (c *comparer) sample(ctx context.Context, top segment) (bool, error) {
	if !c.src.guard.unique || !c.dst.guard.unique {
		return false, nil
	}
	if c.src.intKey {
		return c.sampleRanges(ctx, top)
	}
	return c.sampleKeys(ctx)
}

// sampleRanges checksums sampleLeaves ranges of the first level, picked at
// random, through the key's index on both sides: the share of differing
// ranges is measured, not inferred from a density, so differences bunched
// in one part of the key range (a gap in a sync, a deleted range of old
// rows) are not mistaken for scattered ones.
func (c *comparer) sampleRanges(ctx context.Context, top segment) (bool, error) {
	kids, _ := c.split([]segment{top})
	if len(kids) < sampleLeaves*sampleShare {
		return false, nil
	}
	picks := rand.Perm(len(kids))[:sampleLeaves]
	sort.Ints(picks)
	segs := make([]segment, len(picks))
	for i, p := range picks {
		segs[i] = kids[p]
	}
	var a, b map[int]sum
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { a, err = c.src.checksums(gctx, segs, segs, true, ""); return err })
	g.Go(func() (err error) { b, err = c.dst.checksums(gctx, segs, segs, true, ""); return err })
	if err := g.Wait(); err != nil {
		return false, fmt.Errorf("density sample: %w", err)
	}
	c.rep.ChecksumQueries += 2
	s := &Sample{By: "key_ranges", Taken: int64(len(segs))}
	var differing, nonEmpty int
	var rows int64
	for i := range segs {
		sa, oka := a[i]
		sb, okb := b[i]
		s.Rows += sa.n + sb.n
		if oka || okb {
			nonEmpty++
		}
		if sa != sb {
			differing++
			rows += max(sa.n, sb.n)
		}
	}
	s.Differing = int64(differing)
	s.Share = c.leftShare(differing, nonEmpty, rows)
	// A third of the ranges empty or more: the key is too sparse for the
	// sample to say much; the checksums find out.
	return c.decide(s, nonEmpty >= sampleLeaves*2/3), nil
}

// sampleKeys draws about sampleLeaves × leaf rows from each side
// (TABLESAMPLE SYSTEM, sized from the planner's row count scaled to the
// table's current size), reads the (key, hash) of the same keys on the
// other side through its unique index and estimates the share of differing
// keys. The copy is sampled too so that its extra rows are seen. On the
// hashed line, differing keys are scattered whatever their order in the
// key, so their share gives the share of differing ranges.
func (c *comparer) sampleKeys(ctx context.Context) (bool, error) {
	target := float64(sampleLeaves * c.leaf)
	var ns, nd float64
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { ns, err = c.src.rowsNow(gctx); return err })
	g.Go(func() (err error) { nd, err = c.dst.rowsNow(gctx); return err })
	if err := g.Wait(); err != nil {
		return false, err
	}
	switch {
	case ns <= 0 && nd <= 0:
		return false, nil // never analyzed: no size to draw a sample by
	case ns <= 0:
		ns = nd
	case nd <= 0:
		nd = ns
	}
	if max(ns, nd) < target*sampleShare {
		return false, nil
	}
	ps, pd := min(1, target/ns), min(1, target/nd)
	limit := int(8 * target)
	src, dst := map[string]pair{}, map[string]pair{}
	var fullS, fullD bool
	g, gctx = errgroup.WithContext(ctx)
	g.Go(func() (err error) { fullS, err = c.src.samplePairs(gctx, ps, limit, src); return err })
	g.Go(func() (err error) { fullD, err = c.dst.samplePairs(gctx, pd, limit, dst); return err })
	if err := g.Wait(); err != nil {
		return false, fmt.Errorf("density sample: %w", err)
	}
	if fullS || fullD {
		// The table is far larger than its statistics say: the sample is
		// not the share it was drawn as.
		c.log.Debug("density sample skipped: the planner's row count is stale", "source_rows", ns, "copy_rows", nd)
		return false, nil
	}
	drawn := int64(len(src) + len(dst))
	// Each key drawn from one side only is read by key on the other.
	union := make([]string, 0, len(src)+len(dst))
	var askSrc, askDst [][]string
	for k, p := range src {
		union = append(union, k)
		if _, ok := dst[k]; !ok {
			askDst = append(askDst, p.raw)
		}
	}
	for k, p := range dst {
		if _, ok := src[k]; !ok {
			union = append(union, k)
			askSrc = append(askSrc, p.raw)
		}
	}
	var foundS, foundD int64
	g, gctx = errgroup.WithContext(ctx)
	g.Go(func() (err error) { foundS, err = c.src.pairsByKey(gctx, askSrc, src); return err })
	g.Go(func() (err error) { foundD, err = c.dst.pairsByKey(gctx, askDst, dst); return err })
	if err := g.Wait(); err != nil {
		return false, fmt.Errorf("density sample: %w", err)
	}
	c.hashesRead.Add(drawn + foundS + foundD)
	// Each sampled key weighs the inverse of its chance to be drawn: a key
	// held by one side only could be drawn from that side only, so missing
	// and extra keys would otherwise count half as much as changed ones.
	s := &Sample{By: "keys", Taken: int64(len(union)), Rows: drawn + foundS + foundD}
	var all, differing float64
	for _, k := range union {
		a, aok := src[k]
		b, bok := dst[k]
		w := 1 / (1 - (1-ps*b2f(aok))*(1-pd*b2f(bok)))
		all += w
		if !aok || !bok || a.hash != b.hash {
			differing += w
			s.Differing++
		}
	}
	if all > 0 {
		s.Share = -math.Expm1(-differing / all * float64(c.leaf))
	}
	return c.decide(s, s.Taken >= int64(target/4)), nil
}

// decide records s and whether the line is streamed at once: when enough
// was sampled and more than half of the rows are estimated to lie in
// differing ranges of leaf rows (the rule of dense).
func (c *comparer) decide(s *Sample, enough bool) bool {
	c.rep.Sample = s
	dense := enough && s.Share > 0.5
	c.log.Debug("density sample", "by", s.By, "taken", s.Taken, "differing", s.Differing, "rows", s.Rows,
		"share", s.Share, "enough", enough, "stream", dense)
	return dense
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// pair is a row's (key, row hash) as the sample reads it.
type pair struct {
	raw  []string // the key columns' text output, to look the key up
	hash string
}

// compared is the condition selecting the side's compared rows, as the
// checksums select them.
func (sd *side) compared() string {
	if sd.synced == "" {
		return sd.scope
	}
	return and(sd.scope, sd.synced)
}

// rowsNow is the planner's row count of the side's table scaled to its
// current size, as the planner scales it; 0 when the table was never
// analyzed or is not a table (a view, a foreign table).
func (sd *side) rowsNow(ctx context.Context) (float64, error) {
	var n float64
	err := sd.conn.QueryRow(ctx, `
SELECT coalesce(max(CASE WHEN c.relkind NOT IN ('r', 'p', 'm') OR c.reltuples <= 0 THEN 0
                         WHEN c.relpages > 0 THEN c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
                         ELSE c.reltuples END), 0)::float8
FROM pg_class c WHERE c.oid = to_regclass($1)`, sd.qualified()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("estimate rows of %s %s: %w", sd.role, sd.table, err)
	}
	return n, nil
}

// pairSelect is the select list of a (key, hash) read: the row hash, the
// canonical key texts and the key columns' text output, as arrays.
func (sd *side) pairSelect() string {
	canons, raws := make([]string, len(sd.keys)), make([]string, len(sd.keys))
	for i, k := range sd.keys {
		canons[i] = canonOf("y.", k)
		raws[i] = "y." + ident(k.Name) + "::text"
	}
	return sd.hash(rowText("y.", sd.cols)) + "::text, ARRAY[" + strings.Join(canons, ", ") + "]::text[], ARRAY[" + strings.Join(raws, ", ") + "]::text[]"
}

// samplePairs reads the (key, hash) of the compared rows in a share p of
// the side's pages, at most limit of them, into out; full says that the
// limit was reached.
func (sd *side) samplePairs(ctx context.Context, p float64, limit int, out map[string]pair) (full bool, err error) {
	q := "SELECT " + sd.pairSelect() + " FROM " + sd.qualified() + " y TABLESAMPLE SYSTEM ($1)"
	if cond := sd.compared(); cond != "" {
		q += " WHERE " + cond
	}
	q += " LIMIT $2"
	n, err := sd.readPairs(ctx, q, []any{100 * p, limit}, out)
	if err != nil {
		return false, fmt.Errorf("sample the rows of %s %s: %w", sd.role, sd.table, err)
	}
	return n >= int64(limit), nil
}

// pairsByKey reads the (key, hash) of the side's compared rows with the
// given keys (the text of each key column) into out and counts them.
func (sd *side) pairsByKey(ctx context.Context, keys [][]string, out map[string]pair) (int64, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	cols, casts, params, names := make([]string, len(sd.keys)), make([]string, len(sd.keys)), make([]string, len(sd.keys)), make([]string, len(sd.keys))
	args := make([]any, len(sd.keys))
	for i, k := range sd.keys {
		cols[i] = "y." + ident(k.Name)
		casts[i] = fmt.Sprintf("u.syncd_k%d::%s", i+1, k.Type)
		params[i] = fmt.Sprintf("$%d::text[]", i+1)
		names[i] = fmt.Sprintf("syncd_k%d", i+1)
		vals := make([]string, len(keys))
		for j, key := range keys {
			vals[j] = key[i]
		}
		args[i] = vals
	}
	q := "SELECT " + sd.pairSelect() + " FROM " + sd.qualified() + " y WHERE (" + strings.Join(cols, ", ") + ") IN (SELECT " +
		strings.Join(casts, ", ") + " FROM unnest(" + strings.Join(params, ", ") + ") AS u(" + strings.Join(names, ", ") + "))"
	if cond := sd.compared(); cond != "" {
		q += " AND (" + cond + ")"
	}
	n, err := sd.readPairs(ctx, q, args, out)
	if err != nil {
		return 0, fmt.Errorf("read sampled keys of %s %s: %w", sd.role, sd.table, err)
	}
	return n, nil
}

// readPairs runs q, which selects pairSelect, into out by canonical key.
func (sd *side) readPairs(ctx context.Context, q string, args []any, out map[string]pair) (int64, error) {
	rows, err := sd.conn.Query(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	var h string
	var canons, raws []string
	for rows.Next() {
		if err := rows.Scan(&h, &canons, &raws); err != nil {
			return n, err
		}
		out[strings.Join(canons, "\x00")] = pair{raw: raws, hash: h}
		n++
	}
	return n, rows.Err()
}
