package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/watermark"
)

// CheckKeys is Report.Check of a key check (Keys).
const CheckKeys = "keys"

// KeyLeafRows is the largest differing range of keys that the key check
// streams instead of cutting it again (DefaultLeafRows for whole rows).
const KeyLeafRows = 16

// KeyFirstRows is the size of the first level's ranges in the key check of
// an integer key, whose ranges are each read from the key's index: each
// range costs an index descent and an aggregate (about 25 keys' worth of
// summing), so ranges of 128 keys keep the first level within a fifth of
// one sum over the index, and a differing range costs the next level 128
// keys and 8 ranges before its 16-key leaves are streamed.
const KeyFirstRows = 128

// ErrNoKeyCheck is wrapped when the key check does not apply to a source:
// a source in compare mode, or a copy whose key does not identify its rows.
var ErrNoKeyCheck = errors.New("the key check does not apply")

// Keys compares the key sets of cfg's source and its copy (a postgres
// sink) by checksummed ranges over the key alone, so that each side can
// answer from its key index (an index-only scan on a vacuumed table):
// deletes at the cost of a key scan. It finds the copy's extra keys (rows
// deleted at the source, or soft-deleted there and not kept) and the
// source keys the copy lacks; values are not compared. With o.Repair it
// deletes the extra rows through the sink, each only while the copy row is
// still the one it saw (same key and cursor values), then checks again
// (Report.After). Missing keys are reported, never written: the sync
// copies them, or the full reconcile (Run) when they lie behind the
// watermark.
//
// Every source key in scope is summed, whatever the watermark: a copy row
// whose key the source does not hold is extra whatever its cursor. Every
// differing key is read again by key, the copy first and then the source,
// before it is reported or deleted, as Run does: a row inserted at the
// source after the range was read is found by that second read and kept;
// a key the copy lacks whose source row is past the watermark (or whose
// soft-deleted source row the sync has not seen yet) is counted as not
// covered, not reported.
func Keys(ctx context.Context, cfg *config.Config, states StateReader, o Options) (*Report, error) {
	started := time.Now()
	if cfg.Compare() {
		return nil, fmt.Errorf("source %s is in compare mode: each of its runs compares every row and deletes the copy's extra rows itself: %w", cfg.Name, ErrNoKeyCheck)
	}
	c, dst, safe, closeAll, err := open(ctx, cfg, states, o)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	log := c.log
	if !safe {
		return nil, fmt.Errorf("sink table %s of source %s: sink.key (%s) does not identify every row of the copy (no primary key or unique index on exactly those NOT NULL columns); run the full reconcile, which finds and repairs keys held twice or NULL: `syncd reconcile --source %s --repair`: %w",
			cfg.Sink.Table, cfg.Name, strings.Join(cfg.Sink.Key, ", "), cfg.Name, ErrNoKeyCheck)
	}
	rep := newReport(cfg.Name)
	if o.Repair {
		rep.Repair = &RepairCounts{}
		c.repair = func(ctx context.Context, fixes []sink.Fix) error {
			r, err := dst.Repair(ctx, fixes)
			rep.Repair.Deleted += r.Deleted
			return err
		}
	}
	k := c.keyView()
	if hook := o.BeforeRecheck; hook != nil {
		k.recheckWith = func(ctx context.Context, keys [][]string) error {
			hook(keys)
			return c.recheckKeys(ctx, keys)
		}
	}
	if err := k.preferIndex(ctx); err != nil {
		return nil, err
	}
	if err := k.compareKeys(ctx, c, rep); err != nil {
		return nil, err
	}
	if o.Repair && !rep.Equal() {
		rep.Repaired = true
		c.repair = nil
		rep.After = newReport(cfg.Name)
		if err := k.compareKeys(ctx, c, rep.After); err != nil {
			return nil, fmt.Errorf("verify the key repair: %w", err)
		}
		rep.After.DurationMS = time.Since(started).Milliseconds()
	}
	rep.DurationMS = time.Since(started).Milliseconds()
	if rec, ok := states.(StateRecorder); ok {
		if err := RecordKeys(rec, cfg.Name, started, rep); err != nil {
			return nil, err
		}
	}
	log.Info("key check done", "missing", rep.Missing, "extra", rep.Extra, "not_covered", rep.Final().NotCoveredRows(),
		"keys_compared", rep.RowsCompared, "keys_streamed", rep.HashesRead, "rows_fetched", rep.RowsFetched, "deleted", rep.Deleted(),
		"duration", time.Since(started).Round(time.Millisecond).String())
	return rep, nil
}

// Deleted is the number of copy rows a repair deleted (0 without one).
func (r *Report) Deleted() int64 {
	if r.Repair == nil {
		return 0
	}
	return r.Repair.Deleted
}

// RecordKeys stores the outcome of a key check of source name begun at
// started in its state (LastKeyCheck); an older outcome never replaces a
// newer one. A key check never proves the copy equal value by value, so
// it leaves LastCleanReconcile alone.
func RecordKeys(rec StateRecorder, name string, started time.Time, rep *Report) error {
	final := rep.Final()
	res := &watermark.ReconcileResult{At: started.UTC(), Repaired: rep.Repaired, Deleted: rep.Deleted(),
		Differences: nonZero(final.Differences()), NotCovered: nonZero(final.NotCovered)}
	err := rec.Update(name, func(st *watermark.State) error {
		if st.LastKeyCheck == nil || started.After(st.LastKeyCheck.At) {
			st.LastKeyCheck = res
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("key check of %s done but its outcome could not be recorded in the state file: %w", name, err)
	}
	return nil
}

// looseSourceKey says whether a key column of the source has a
// nondeterministic collation, under which keys of different texts can be
// equal (read once per comparer): only then does recheckKeys ask the
// source for keys equal to the copy's.
func (c *comparer) looseSourceKey(ctx context.Context) (bool, error) {
	c.looseOnce.Do(func() {
		names := make([]string, len(c.src.keys))
		for i, k := range c.src.keys {
			names[i] = k.Name
		}
		c.looseErr = c.src.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_collation k ON k.oid = a.attcollation
WHERE a.attrelid = $1::regclass AND a.attname = ANY($2) AND NOT k.collisdeterministic)`, c.src.qualified(), names).Scan(&c.looseKey)
		if c.looseErr != nil {
			c.looseErr = fmt.Errorf("read the collations of the source's key columns of %s: %w", c.src.table, c.looseErr)
		}
	})
	return c.looseKey, c.looseErr
}

// keyView is a comparer over the key columns alone: its sides hash and
// stream only the key (the key index can answer them) and sum every
// source row in scope, whatever the watermark. The differing keys its
// streams find are re-read through c (recheckKeys), whose sides read
// whole rows and know which source rows are synced.
func (c *comparer) keyView() *comparer {
	src, dst := *c.src, *c.dst
	// An integer key is hashed by its value, when both servers agree on
	// PostgreSQL's own hashes: hashint8extended is computed from the
	// value, not its bytes, and costs half of hashing its text. Every
	// query of the key view hashes the row of alias y.
	//
	// Seeded with the key itself: hashint8extended(k, 0) hashes only the
	// low 32 bits of k xor its high 32 bits, so 1 and 2^32 hash alike;
	// the seed mixes all 64 bits of k in, and two keys hash alike only by
	// chance, about 2^-64 for a pair.
	//
	// Why the sums cannot hide a deleted row: a range is equal on both
	// sides when its count of keys and the exact sum (numeric, no
	// wrap-around) of its keys' 64-bit hashes are. A deleted or an extra
	// key alone changes the count, so deletes are found without any
	// probability. Only a range holding as many extra keys as missing
	// ones with equal sums of hashes would look equal: for pseudo-random
	// 64-bit hashes that is a chance of about 2^-64 per such range, once
	// in ~10^19 checks of a range that differs that way; and the keys of
	// the ranges that differ are compared themselves, not by hash.
	//
	// Any other key is hashed by its values too (keyHash: uuid and text
	// by their bytes, integers by value, other types by their canonical
	// text, column hashes chained so that the order of the values
	// counts), twice: once, seeded with lineSeed, for its place on the
	// hash line and once, seeded with sumSeed, to be summed, so that a
	// range's sum is unrelated to where its keys lie in it. The same
	// argument holds: counts find every deleted or extra key, and only
	// equal counts with equal sums of differing keys (chance about 2^-64
	// per range) could hide a difference.
	agree := src.hash("t") == fastHash("t")
	intHash := src.intKey && agree
	families := valueFamilies(src.keys, dst.keys)
	for _, sd := range []*side{&src, &dst} {
		sd.cols, sd.synced = sd.keys, ""
		switch {
		case intHash:
			key := "(y." + ident(sd.keys[0].Name) + ")::int8"
			sd.hash = func(string) string { return "hashint8extended(" + key + ", " + key + ")" }
		case agree && !sd.intKey:
			keys := sd.keys
			sd.hash = func(string) string { return keyHash("y.", keys, families, sumSeed) }
			sd.line = func(a string) string { return keyHash(a+".", keys, families, lineSeed) }
		}
	}
	// A key costs a few bytes to sum in the database and about 60 to
	// stream: cut differing ranges down to fewer rows than a whole-row
	// comparison does before streaming them.
	leaf := c.leaf
	if leaf == DefaultLeafRows {
		leaf = KeyLeafRows
	}
	k := &comparer{src: &src, dst: &dst, leaf: leaf, log: c.log, cov: c.cov, recheckWith: c.recheckKeys}
	if src.intKey {
		// Below the first level an integer key is read by index ranges
		// anyway: a coarser first level costs fewer ranges and groups.
		// A hash line scans the table at every level: there one level
		// down to the leaves is cheaper.
		k.first = KeyFirstRows
	}
	for i := range c.keyIdx {
		k.keyIdx = append(k.keyIdx, i)
	}
	return k
}

// preferIndex makes each side whose key sums name the key columns alone
// (no source.where or soft-delete condition) read them from an index: an
// index-only scan reads the key index instead of the heap, but the
// planner, costing a whole index's pages as random reads, picks a
// sequential scan of the table for a full pass. Only while the visibility
// map covers at least half of the table (VACUUM sets it): otherwise an
// index-only scan visits the heap for most rows anyway.
//
// It also gives each session the memory the first level's hash table of
// up to maxFanout ranges needs (about 18 MB), so that it is not spilled to
// disk in batches at PostgreSQL's default work_mem (4 MB).
func (k *comparer) preferIndex(ctx context.Context) error {
	for _, sd := range []*side{k.src, k.dst} {
		if _, err := sd.conn.Exec(ctx, "SET work_mem = '64MB'"); err != nil {
			return fmt.Errorf("key check of %s %s: %w", sd.role, sd.table, err)
		}
		if sd.scope != "" && sd.scope != "NOT ("+sd.nullKey()+")" {
			continue
		}
		var pages, visible float64
		if err := sd.conn.QueryRow(ctx, "SELECT coalesce(max(relpages), 0)::float8, coalesce(max(relallvisible), 0)::float8 FROM pg_class WHERE oid = to_regclass($1)",
			sd.qualified()).Scan(&pages, &visible); err != nil {
			return fmt.Errorf("read the visibility map's coverage of %s %s: %w", sd.role, sd.table, err)
		}
		if pages > 0 && 2*visible < pages {
			k.log.Debug("key check reads the heap: the visibility map covers less than half of the table; VACUUM it", "side", sd.role, "table", sd.table.String(), "pages", pages, "all_visible", visible)
			continue
		}
		if _, err := sd.conn.Exec(ctx, "SET enable_seqscan = off"); err != nil {
			return fmt.Errorf("key check of %s %s: %w", sd.role, sd.table, err)
		}
		// An integer key with a unique index of its own: sum each range
		// by a range scan of that index.
		sd.ranged = sd.intKey && sd.guard.unique
	}
	return nil
}

// compareKeys makes one comparison of the key sets into rep, through the
// checksum levels of bisect; c is the whole-row comparer that re-reads
// the differing keys.
func (k *comparer) compareKeys(ctx context.Context, c *comparer, rep *Report) error {
	rep.Check, rep.Plan = CheckKeys, PlanChecksums
	rep.Boundary = "every key of the source"
	if k.cov.where != "" || k.src.scope != "" {
		rep.Boundary += " in scope (" + k.src.scope + ")"
	}
	rep.Boundary += "; a key the copy lacks counts when its row is synced: " + k.cov.boundary
	k.rep, c.rep = rep, rep
	k.level, k.skip, c.skip = 0, map[string]bool{}, map[string]bool{}
	defer rep.sortKeys()
	top, ok, err := k.top(ctx)
	if err != nil || !ok {
		return err
	}
	k.hashesRead.Store(0)
	defer func() { rep.HashesRead = k.hashesRead.Load() }()
	return k.bisect(ctx, []segment{top})
}

// keyKind classifies one key by its source row s and copy row d (nil:
// absent) by presence alone: extra when the copy holds a key the source
// does not (in scope), missing when the copy lacks a synced source row's
// key, unsynced when the source row is past the watermark (the sync has
// not seen it yet), else same, whatever the values.
func keyKind(s, d *row) kind {
	in := s != nil && s.inScope
	switch {
	case in == (d != nil):
		return same
	case s != nil && !s.synced:
		return unsynced
	case in:
		return missing
	}
	return extra
}

// recheckKeys re-reads keys on both sides, the copy first (see recheck),
// and records each still differing by presence; with repair, the extra
// copy rows are deleted, each guarded by the key and cursor values read
// here, so a row a concurrent sync has just written is left to it.
// Without repair the copy's keys alone are read: presence needs no more.
func (c *comparer) recheckKeys(ctx context.Context, keys [][]string) error {
	dstRows, srcRows, err := c.reread(ctx, keys, c.repair == nil)
	if err != nil {
		return err
	}
	reason := ReasonPending
	if c.cov.noWatermark {
		reason = ReasonNoWatermark
	}
	var fixes []sink.Fix
	note := func(s, d *row) {
		switch keyKind(s, d) {
		case unsynced:
			c.rep.SkippedUnsynced++
			c.rep.NotCovered[reason]++
		case missing:
			c.rep.Missing++
			if len(c.rep.Keys.Missing) < MaxKeys {
				c.rep.Keys.Missing = append(c.rep.Keys.Missing, c.display(s))
			}
		case extra:
			c.rep.Extra++
			if len(c.rep.Keys.Extra) < MaxKeys {
				c.rep.Keys.Extra = append(c.rep.Keys.Extra, c.display(d))
			}
			fixes = append(fixes, sink.Fix{Seen: d.raw})
		}
	}
	// A copy row whose key text the source lacks may still have its key in
	// the source under the source's own equality (a nondeterministic
	// collation: 'Alpha' in the copy, 'alpha' in the source after a change
	// of case only): it is not a deleted row, and is judged against the
	// row the source holds for it, never deleted. One round trip for all.
	var alone []*row
	var aloneKeys [][]string
	for k, d := range dstRows {
		if s := srcRows[k]; s != nil {
			note(s, d)
			continue
		}
		key := make([]string, len(c.keyIdx))
		for i, j := range c.keyIdx {
			key[i] = string(d.raw[j])
		}
		alone, aloneKeys = append(alone, d), append(aloneKeys, key)
	}
	equal := map[int]*row{}   // by the index in alone
	held := map[string]bool{} // the keys of the rows in equal
	if len(alone) > 0 {
		loose, err := c.looseSourceKey(ctx)
		if err != nil {
			return err
		}
		if loose {
			err := c.src.fetchEqual(ctx, aloneKeys, func(i int, r row) { equal[i], held[c.key(&r)] = &r, true })
			if err != nil {
				return err
			}
		}
	}
	for i, d := range alone {
		note(equal[i], d)
	}
	for k, s := range srcRows {
		if dstRows[k] == nil && !held[k] {
			note(s, nil)
		}
	}
	if c.repair != nil && len(fixes) > 0 {
		return c.repair(ctx, fixes)
	}
	return nil
}
