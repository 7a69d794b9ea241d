package pgutil

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// fingerprintSQL reads, in one round trip, the system columns of every
// catalog row that describes a table: its pg_class row and those of its
// partitions and inheritance children (xmin and relfilenode: a DDL
// statement, a rename, a TRUNCATE or a rewrite changes them), its columns,
// defaults, constraints, indexes, triggers, rules and policies, the
// dependencies on it (owned sequences, identity), whether it has planner
// statistics, and every type its columns are built on (element, base,
// range subtype and composite attribute types, followed to the end) with
// those types' constraints and enum labels. A row's xmin is the
// transaction that wrote it: any change to any of these rows (every DDL
// statement that could change what syncd reads from the catalog writes
// one) gives another text. PostgreSQL's in-place updates (VACUUM's and
// ANALYZE's relpages and reltuples) keep xmin and are not seen, as
// intended. A table that does not exist gives "".
const fingerprintSQL = `
WITH RECURSIVE rel AS (SELECT to_regclass($1) AS oid),
parts(oid) AS (
  SELECT oid FROM rel WHERE oid IS NOT NULL
  UNION SELECT i.inhrelid FROM pg_inherits i JOIN parts p ON i.inhparent = p.oid
),
types(oid) AS (
  SELECT a.atttypid FROM pg_attribute a JOIN rel ON a.attrelid = rel.oid WHERE a.attnum > 0
  UNION
  SELECT x.oid FROM types ty JOIN pg_type t ON t.oid = ty.oid,
    LATERAL (SELECT t.typelem UNION ALL SELECT t.typbasetype
             UNION ALL SELECT r.rngsubtype FROM pg_range r WHERE r.rngtypid = t.oid
             UNION ALL SELECT a.atttypid FROM pg_attribute a WHERE a.attrelid = t.typrelid AND a.attnum > 0) x(oid)
  WHERE x.oid <> 0
)
SELECT CASE WHEN (SELECT oid FROM rel) IS NULL THEN '' ELSE concat_ws('|',
  (SELECT string_agg(c.oid || ':' || c.xmin || ':' || c.relfilenode, ',' ORDER BY c.oid) FROM pg_class c JOIN parts USING (oid)),
  (SELECT string_agg(a.attnum || ':' || a.xmin, ',' ORDER BY a.attnum) FROM pg_attribute a JOIN rel ON a.attrelid = rel.oid WHERE a.attnum > 0),
  (SELECT string_agg(d.oid || ':' || d.xmin, ',' ORDER BY d.oid) FROM pg_attrdef d JOIN rel ON d.adrelid = rel.oid),
  (SELECT string_agg(k.oid || ':' || k.xmin, ',' ORDER BY k.oid) FROM pg_constraint k WHERE k.conrelid = (SELECT oid FROM rel) OR k.contypid IN (SELECT oid FROM types)),
  (SELECT string_agg(i.indexrelid || ':' || i.xmin, ',' ORDER BY i.indexrelid) FROM pg_index i JOIN rel ON i.indrelid = rel.oid),
  (SELECT string_agg(g.oid || ':' || g.xmin, ',' ORDER BY g.oid) FROM pg_trigger g JOIN rel ON g.tgrelid = rel.oid),
  (SELECT string_agg(w.oid || ':' || w.xmin, ',' ORDER BY w.oid) FROM pg_rewrite w JOIN rel ON w.ev_class = rel.oid),
  (SELECT string_agg(p.oid || ':' || p.xmin, ',' ORDER BY p.oid) FROM pg_policy p JOIN rel ON p.polrelid = rel.oid),
  (SELECT string_agg(d.objid || ':' || d.xmin, ',' ORDER BY d.objid, d.objsubid) FROM pg_depend d JOIN rel ON d.refobjid = rel.oid AND d.refclassid = 'pg_class'::regclass),
  (SELECT 's' || EXISTS (SELECT 1 FROM pg_statistic s JOIN rel ON s.starelid = rel.oid)),
  (SELECT string_agg(t.oid || ':' || t.xmin, ',' ORDER BY t.oid) FROM pg_type t JOIN types USING (oid) WHERE t.oid >= 16384),
  (SELECT string_agg(a.attrelid || '.' || a.attnum || ':' || a.xmin, ',' ORDER BY a.attrelid, a.attnum) FROM pg_attribute a JOIN pg_type t ON a.attrelid = t.typrelid JOIN types USING (oid) WHERE t.typrelid <> 0 AND t.oid >= 16384 AND a.attnum > 0),
  (SELECT string_agg(e.oid || ':' || e.xmin, ',' ORDER BY e.oid) FROM pg_enum e JOIN types ty ON e.enumtypid = ty.oid)
) END`

// Fingerprint reads the catalog fingerprint of table (see fingerprintSQL)
// in one round trip: the same text as before means no catalog row that
// describes the table changed since; "" means the table does not exist.
func Fingerprint(ctx context.Context, conn *pgx.Conn, schema, name string) (string, error) {
	var fp string
	if err := conn.QueryRow(ctx, fingerprintSQL, Qualified(schema, name)).Scan(&fp); err != nil {
		return "", fmt.Errorf("read the catalog fingerprint of %s.%s: %w", schema, name, err)
	}
	return fp, nil
}

// QueueFingerprint queues the read of Fingerprint in b, for a caller that
// sends it with other statements in one round trip: *fp is set, and *ok
// to true, once b's results are read, unless the read failed.
func QueueFingerprint(b *pgx.Batch, schema, name string, fp *string, ok *bool) {
	b.Queue(fingerprintSQL, Qualified(schema, name)).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(fp); err != nil {
			return fmt.Errorf("read the catalog fingerprint of %s.%s: %w", schema, name, err)
		}
		*ok = true
		return nil
	})
}

// tableFingerprintsSQL reads, in one round trip, a fingerprint of each
// ordinary and partitioned table of a schema (not the partitions), by
// name: what matching a pattern source against the catalog reads of a
// table (source.Expand). Its pg_class row (a rename, a move to another
// schema, a rewrite), its schema's row, its columns (added, dropped,
// renamed, retyped, NOT NULL), defaults, indexes (their state flags too:
// CREATE INDEX CONCURRENTLY validates an index in place), constraints
// (a primary key, a unique key), the types of its columns, and the
// sequences its defaults and identity columns take values from (their
// settings in pg_sequence: CACHE, INCREMENT, CYCLE), each as oid and
// xmin. A table created, dropped, renamed or moved in or out of the
// schema changes the list of names.
const tableFingerprintsSQL = `
SELECT c.relname::text, md5(concat_ws('|',
  c.oid || ':' || c.xmin || ':' || c.relkind::text || ':' || n.oid || ':' || n.xmin,
  coalesce((SELECT string_agg(a.attnum || ':' || a.xmin, ',' ORDER BY a.attnum) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0), ''),
  coalesce((SELECT string_agg(d.oid || ':' || d.xmin, ',' ORDER BY d.oid) FROM pg_attrdef d WHERE d.adrelid = c.oid), ''),
  coalesce((SELECT string_agg(i.indexrelid || ':' || i.xmin || ':' || i.indisvalid || i.indisready || i.indislive, ',' ORDER BY i.indexrelid) FROM pg_index i WHERE i.indrelid = c.oid), ''),
  coalesce((SELECT string_agg(k.oid || ':' || k.xmin, ',' ORDER BY k.oid) FROM pg_constraint k WHERE k.conrelid = c.oid), ''),
  coalesce((SELECT string_agg(t.oid || ':' || t.xmin, ',' ORDER BY t.oid) FROM pg_type t
     WHERE t.oid >= 16384 AND t.oid IN (SELECT a.atttypid FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0)), ''),
  coalesce((SELECT string_agg(s.oid || ':' || s.xmin || ':' || q.xmin, ',' ORDER BY s.oid)
     FROM (SELECT d.objid FROM pg_depend d
           WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = c.oid AND d.classid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
           UNION
           SELECT unnest(ARRAY(SELECT d.refobjid FROM pg_depend d
                               WHERE d.classid = 'pg_attrdef'::regclass AND d.objid = ad.oid AND d.refclassid = 'pg_class'::regclass))
           FROM pg_attrdef ad WHERE ad.adrelid = c.oid) u(oid)
     JOIN pg_class s ON s.oid = u.oid JOIN pg_sequence q ON q.seqrelid = s.oid), '')
))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r','p') AND NOT c.relispartition
ORDER BY c.relname`

// TableFingerprints reads the names of the ordinary and partitioned tables
// of schema (not the partitions), sorted, and a catalog fingerprint of each
// (see tableFingerprintsSQL), in one round trip: a table whose fingerprint
// is the one read before has had no DDL since that matters to a pattern
// source's match.
func TableFingerprints(ctx context.Context, conn *pgx.Conn, schema string) (names []string, fps map[string]string, err error) {
	rows, err := conn.Query(ctx, tableFingerprintsSQL, schema)
	if err != nil {
		return nil, nil, fmt.Errorf("read the catalog fingerprints of the tables of schema %s: %w", schema, err)
	}
	fps = map[string]string{}
	var name, fp string
	_, err = pgx.ForEachRow(rows, []any{&name, &fp}, func() error {
		names = append(names, name)
		fps[name] = fp
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read the catalog fingerprints of the tables of schema %s: %w", schema, err)
	}
	return names, fps, nil
}
