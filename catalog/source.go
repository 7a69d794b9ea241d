package catalog

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// sourceSQL reads a source table's identity in one round trip: the
// cluster's system identifier (when the role may read pg_control_system),
// the database, the table's oid, the heap files of the table and of every
// table read through it, and its live columns.
const sourceSQL = `
WITH RECURSIVE t AS (
  SELECT $1::regclass::oid AS oid
  UNION
  SELECT i.inhrelid FROM pg_inherits i JOIN t ON i.inhparent = t.oid
)
SELECT CASE WHEN has_function_privilege('pg_control_system()', 'EXECUTE')
            THEN (SELECT system_identifier::text FROM pg_control_system()) ELSE '' END,
       current_database(),
       $1::regclass::oid,
       (SELECT string_agg(c.oid::text || ':' || c.relfilenode::text, ',' ORDER BY c.oid)
          FROM pg_class c JOIN t ON t.oid = c.oid),
       (SELECT coalesce(json_agg(json_build_object('num', a.attnum, 'name', a.attname,
                                 'type', format_type(a.atttypid, a.atttypmod)) ORDER BY a.attnum), '[]')
          FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped)`

// RowQuerier runs a query that returns one row: a *pgx.Conn, or the
// source's session (source.Querier).
type RowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ReadSource reads the identity of the source table table (a
// schema-qualified, quoted name) on the source's session.
func ReadSource(ctx context.Context, conn RowQuerier, table, name string) (Source, error) {
	return scanSource(conn.QueryRow(ctx, sourceSQL, table), name)
}

// QueueSource queues ReadSource's query on b, a batch the caller sends on
// the source's session with statements of its own (the run's first round
// trip): done receives the identity, or the error, when the batch's
// results are read.
func QueueSource(b *pgx.Batch, table, name string, done func(Source, error)) {
	b.Queue(sourceSQL, table).QueryRow(func(row pgx.Row) error {
		s, err := scanSource(row, name)
		done(s, err)
		return err
	})
}

func scanSource(row pgx.Row, name string) (Source, error) {
	s := Source{Table: name}
	var cols []byte
	if err := row.Scan(&s.System, &s.Database, &s.OID, &s.Heap, &cols); err != nil {
		return Source{}, fmt.Errorf("read the identity of source table %s: %w", name, err)
	}
	if err := json.Unmarshal(cols, &s.Columns); err != nil {
		return Source{}, fmt.Errorf("read the columns of source table %s: %w", name, err)
	}
	return s, nil
}
