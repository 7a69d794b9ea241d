package reconcile

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
)

// keyGuard is what a table's catalog guarantees about the rows of sink.key.
type keyGuard struct {
	exists bool
	// notNull: every key column is NOT NULL, so no row has a NULL key.
	notNull bool
	// unique: a valid unique index (no predicate, no expressions) covers
	// only key columns, so with notNull no key is held twice.
	unique bool
	// arbiter: a unique index on exactly the key columns, which the sink's
	// ON CONFLICT needs.
	arbiter bool
}

// identifies reports whether the key identifies every row: then duplicate
// and NULL keys are impossible and need no scan.
func (g keyGuard) identifies() bool { return g.notNull && g.unique }

// readKeyGuard reads the key guarantees of table t from its catalog.
func readKeyGuard(ctx context.Context, conn source.Querier, t config.Table, key []string) (keyGuard, error) {
	var g keyGuard
	err := conn.QueryRow(ctx, `
WITH c AS (SELECT to_regclass($1) AS oid),
idx AS (
  SELECT (SELECT bool_and(a.attname = ANY($2::text[])) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum = ANY(i.indkey)) AS subset,
         (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum = ANY(i.indkey))
           = (SELECT array_agg(k ORDER BY k) FROM unnest($2::text[]) k) AS exact
  FROM c JOIN pg_index i ON i.indrelid = c.oid
  WHERE i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL)
SELECT c.oid IS NOT NULL,
       coalesce((SELECT bool_and(a.attnotnull) FROM pg_attribute a
                 WHERE a.attrelid = c.oid AND a.attname = ANY($2::text[]) AND a.attnum > 0 AND NOT a.attisdropped), false),
       coalesce((SELECT bool_or(subset) FROM idx), false),
       coalesce((SELECT bool_or(exact) FROM idx), false)
FROM c`, pgutil.Qualified(t.Schema, t.Name), key).Scan(&g.exists, &g.notNull, &g.unique, &g.arbiter)
	if err != nil {
		return g, fmt.Errorf("read the key constraints of %s: %w", t, err)
	}
	return g, nil
}

// nullKey is the condition that some key column of the side is NULL.
func (sd *side) nullKey() string {
	parts := make([]string, len(sd.keys))
	for i, k := range sd.keys {
		parts[i] = ident(k.Name) + " IS NULL"
	}
	return strings.Join(parts, " OR ")
}

// keyChecks finds the rows the key cannot identify, on the sides whose
// catalog allows them: rows with a NULL key (either side) and keys the copy
// holds more than once. Each is a difference; with repair, the copy's
// NULL-key rows are deleted and a duplicated key is left with the source's
// row only. Their keys are left out of the comparison that follows.
func (c *comparer) keyChecks(ctx context.Context) error {
	var fixes []sink.Fix
	flush := func(force bool) error {
		if c.replace == nil || len(fixes) == 0 || (!force && len(fixes) < batchRows) {
			return nil
		}
		err := c.replace(ctx, fixes)
		fixes = fixes[:0]
		return err
	}
	for _, sd := range []*side{c.src, c.dst} {
		if sd.guard.notNull {
			continue
		}
		c.rep.KeyScans++
		cond := sd.nullKey()
		if sd.role == "source" {
			cond = and(c.cov.scope, cond)
		}
		err := sd.read(ctx, "SELECT "+sd.selectList()+" FROM "+sd.qualified()+" y WHERE "+cond, nil, nil, func(r row) {
			c.rep.RowsFetched++
			c.rep.NullKey++
			if len(c.rep.Keys.NullKey) < MaxKeys {
				c.rep.Keys.NullKey = append(c.rep.Keys.NullKey, c.display(&r)+" ("+sd.role+")")
			}
			if sd.role == "copy" {
				fixes = append(fixes, sink.Fix{Seen: r.raw})
			}
		})
		if err != nil {
			return err
		}
		if err := flush(true); err != nil {
			return err
		}
	}
	if c.dst.guard.unique {
		return nil
	}
	c.rep.KeyScans++
	dups, err := c.dst.duplicateKeys(ctx)
	if err != nil {
		return err
	}
	for len(dups) > 0 {
		n := min(len(dups), batchRows/4)
		if err := c.duplicates(ctx, dups[:n], &fixes); err != nil {
			return err
		}
		if err := flush(false); err != nil {
			return err
		}
		dups = dups[n:]
	}
	return flush(true)
}

// duplicateKeys returns the text of every key the side holds more than
// once (NULL keys aside).
func (sd *side) duplicateKeys(ctx context.Context) ([][]string, error) {
	cols, texts := make([]string, len(sd.keys)), make([]string, len(sd.keys))
	for i, k := range sd.keys {
		cols[i] = ident(k.Name)
		texts[i] = cols[i] + "::text"
	}
	// Grouped by the key's own type: values its equality says are equal
	// (numeric 1.0 and 1.00) are one key, as for a unique index.
	rows, err := sd.conn.Query(ctx, "SELECT ARRAY["+strings.Join(texts, ", ")+"] FROM "+sd.qualified()+" WHERE NOT ("+sd.nullKey()+
		") GROUP BY "+strings.Join(cols, ", ")+" HAVING count(*) > 1")
	if err != nil {
		return nil, fmt.Errorf("find keys held twice in %s %s: %w", sd.role, sd.table, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	if err != nil {
		return nil, fmt.Errorf("find keys held twice in %s %s: %w", sd.role, sd.table, err)
	}
	return out, nil
}

// duplicates records the keys the copy holds more than once and the fixes
// that leave one correct row for each: delete every copy row of the key,
// insert the source's row when the copy must hold it.
func (c *comparer) duplicates(ctx context.Context, keys [][]string, fixes *[]sink.Fix) error {
	dstRows, srcRows := map[string][]*row{}, map[string]*row{}
	var order []string
	if err := c.dst.fetchKeys(ctx, keys, func(r row) {
		k := c.key(&r)
		if dstRows[k] == nil {
			order = append(order, k)
		}
		dstRows[k] = append(dstRows[k], &r)
		c.rep.RowsFetched++
	}); err != nil {
		return err
	}
	if err := c.src.fetchKeys(ctx, keys, func(r row) {
		srcRows[c.key(&r)] = &r
		c.rep.RowsFetched++
	}); err != nil {
		return err
	}
	for _, k := range order {
		held := dstRows[k]
		if len(held) < 2 {
			continue // a writer removed the duplicate meanwhile
		}
		c.skip[k] = true
		c.rep.Duplicate++
		if len(c.rep.Keys.Duplicate) < MaxKeys {
			c.rep.Keys.Duplicate = append(c.rep.Keys.Duplicate, c.display(held[0]))
		}
		for _, d := range held {
			*fixes = append(*fixes, sink.Fix{Seen: d.raw})
		}
		if s := srcRows[k]; s != nil && s.inScope {
			*fixes = append(*fixes, sink.Fix{Row: s.raw})
		}
	}
	return nil
}
