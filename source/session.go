package source

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Exec implements Querier on the reader's session.
func (r *Reader) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return r.conn.Exec(ctx, sql, args...)
}

// Query implements Querier on the reader's session.
func (r *Reader) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return r.conn.Query(ctx, sql, args...)
}

// QueryRow implements Querier on the reader's session.
func (r *Reader) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return r.conn.QueryRow(ctx, sql, args...)
}

// BeginTx implements Session on the reader's session.
func (r *Reader) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return r.conn.BeginTx(ctx, opts)
}

// TypeMap implements Session: the session's type map.
func (r *Reader) TypeMap() *pgtype.Map { return r.conn.TypeMap() }

// PgConn implements Session: the session's wire connection.
func (r *Reader) PgConn() *pgconn.PgConn { return r.conn.PgConn() }
