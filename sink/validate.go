package sink

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
)

// Validate is Check for `syncd validate`: it also checks the privileges the
// sink role needs and, when the copy does not exist yet, runs the DDL the
// first run would run (types and table) in a transaction that it rolls
// back. Every problem comes back in one config error.
func (s *Postgres) Validate(ctx context.Context, cols []page.Column) (exists bool, err error) {
	exists, problems, err := s.problems(ctx, cols)
	if err != nil {
		return exists, err
	}
	missing, err := s.privilegeProblems(ctx, exists)
	if err != nil {
		return exists, err
	}
	problems = append(problems, missing...)
	if !exists {
		plan, err := planTypes(ctx, s.conn, s.srcTypes, false, s.cfg.Sink.CreateExtensions)
		if err != nil {
			return exists, err
		}
		problems = append(problems, plan.problems...)
		schema, err := s.schemaSQL(ctx)
		if err != nil {
			return exists, err
		}
		if len(problems) == 0 {
			stmts := append(plan.creates, s.createSQL(cols))
			if schema != "" {
				stmts = append([]string{schema}, stmts...)
			}
			if err := s.tryCreate(ctx, stmts); err != nil {
				problems = append(problems, "creating the copy fails: "+err.Error())
			}
		}
	}
	if len(problems) > 0 && exists {
		return true, s.problemsError(problems)
	}
	if len(problems) > 0 {
		return false, s.cfg.Errorf("sink.table", "the copy %s (source %s) has %d problem(s): %s",
			s.table, s.cfg.Name, len(problems), strings.Join(problems, "; "))
	}
	if !exists {
		return false, nil
	}
	if err := s.checkKey(ctx); err != nil {
		return true, err
	}
	return true, s.checkKeyNotNull(ctx)
}

// tryCreate runs stmts in a transaction and rolls it back.
func (s *Postgres) tryCreate(ctx context.Context, stmts []string) error {
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // nothing to keep
	for _, q := range stmts {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", statement(q), err)
		}
	}
	return nil
}

// privilegeProblems lists the privileges the sink role lacks: CREATE on the
// schemas (or the database, for a schema to create) when the copy is to be
// created, SELECT, INSERT, UPDATE and DELETE on an existing copy, and TEMP
// for the staging table. Each comes with its GRANT.
func (s *Postgres) privilegeProblems(ctx context.Context, exists bool) ([]string, error) {
	var role, db string
	if err := s.conn.QueryRow(ctx, `SELECT current_user::text, current_database()::text`).Scan(&role, &db); err != nil {
		return nil, fmt.Errorf("read sink role: %w", err)
	}
	var out []string
	need := func(ok bool, what, grant string) {
		if !ok {
			out = append(out, fmt.Sprintf("the sink role %s lacks %s (%s TO %s)", role, what, grant, pgutil.Ident(role)))
		}
	}
	var temp bool
	if err := s.conn.QueryRow(ctx, `SELECT has_database_privilege(current_database(), 'TEMP')`).Scan(&temp); err != nil {
		return nil, fmt.Errorf("read privileges of the sink role: %w", err)
	}
	need(temp, "TEMP on database "+db+", which the staging table needs", "GRANT TEMP ON DATABASE "+pgutil.Ident(db))
	what, grant, err := catalog.Missing(ctx, s.conn)
	if err != nil {
		return nil, err
	}
	for i := range what {
		out = append(out, fmt.Sprintf("the sink role %s lacks %s (%s)", role, what[i], grant[i]))
	}
	if exists {
		for _, p := range []string{"SELECT", "INSERT", "UPDATE", "DELETE"} {
			var ok bool
			if err := s.conn.QueryRow(ctx, `SELECT has_table_privilege($1::regclass, $2)`, s.qualified(), p).Scan(&ok); err != nil {
				return nil, fmt.Errorf("read privileges of the sink role: %w", err)
			}
			need(ok, p+" on "+s.table.String(), "GRANT "+p+" ON "+s.qualified())
		}
		return out, nil
	}
	schemas := []string{s.table.Schema}
	for _, t := range s.srcTypes {
		if !slices.Contains(schemas, t.Schema) {
			schemas = append(schemas, t.Schema)
		}
	}
	for _, sc := range schemas {
		var found, ok bool
		err := s.conn.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1),
       CASE WHEN EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)
            THEN has_schema_privilege($1, 'USAGE') AND has_schema_privilege($1, 'CREATE')
            ELSE has_database_privilege(current_database(), 'CREATE') END`, sc).Scan(&found, &ok)
		if err != nil {
			return nil, fmt.Errorf("read privileges of the sink role: %w", err)
		}
		if found {
			need(ok, "USAGE and CREATE on schema "+sc+", which creating the copy needs", "GRANT USAGE, CREATE ON SCHEMA "+pgutil.Ident(sc))
		} else {
			need(ok, "CREATE on database "+db+" to create schema "+sc, "GRANT CREATE ON DATABASE "+pgutil.Ident(db))
		}
	}
	return out, nil
}
