package source

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/watermark"
)

// Heaps returns the heaps a read of table (schema-qualified and quoted)
// scans: the table first, then, recursively, its inheritance children
// ordered by OID, each with the relfilenode its rows are in now. A rewrite of
// the table (CLUSTER, VACUUM FULL, pg_repack, a rewriting ALTER TABLE,
// TRUNCATE) gives it a new relfilenode; dropping and creating it again, a
// new OID. Read it in a transaction that already holds a lock on the
// table and its children (a query of the table takes it) so that no
// rewrite commits between this and reading the heaps.
func Heaps(ctx context.Context, conn *pgx.Conn, table string) ([]watermark.LoadHeap, error) {
	rows, err := conn.Query(ctx, `
WITH RECURSIVE t(oid) AS (
  SELECT $1::regclass::oid
  UNION SELECT i.inhrelid FROM pg_inherits i JOIN t ON i.inhparent = t.oid
)
SELECT oid::int8, coalesce(pg_relation_filenode(oid), 0)::int8 FROM t ORDER BY oid <> $1::regclass, oid`, table)
	if err != nil {
		return nil, fmt.Errorf("read the heaps of %s: %w", table, err)
	}
	heaps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (watermark.LoadHeap, error) {
		var oid, node int64
		err := r.Scan(&oid, &node)
		return watermark.LoadHeap{OID: uint32(oid), Filenode: uint32(node)}, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the heaps of %s: %w", table, err)
	}
	return heaps, nil
}

// HeapBlocks implements Snapshotter: whether the table is a plain table
// (not a view, a partitioned table, a foreign table) and the size of its
// heap in blocks.
func (r *Reader) HeapBlocks(ctx context.Context) (plain bool, blocks int64, err error) {
	var kind string
	if err := r.conn.QueryRow(ctx, "SELECT relkind::text, pg_relation_size(oid) / current_setting('block_size')::int8 FROM pg_class WHERE oid = $1::regclass",
		pgutil.Qualified(r.table.Ident.Schema, r.table.Ident.Name)).Scan(&kind, &blocks); err != nil {
		return false, 0, fmt.Errorf("first load of %s: read the kind of the source table: %w", r.table.Ident, err)
	}
	return kind == "r", blocks, nil
}
