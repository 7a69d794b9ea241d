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
// sink role needs and, when the copy does not exist yet, that nothing else
// in the sink holds its name, and runs the DDL the first run would run
// (types and table) in a transaction that it rolls back. Every problem
// comes back in one config error.
func (s *Postgres) Validate(ctx context.Context, cols []page.Column) (exists bool, err error) {
	return s.validate(ctx, cols, NewShared(nil))
}

// validate is Validate with what sh read for all the copies validate
// checks (ValidateShared).
func (s *Postgres) validate(ctx context.Context, cols []page.Column, sh *Shared) (exists bool, err error) {
	d, err := sh.db(ctx, s)
	if err != nil {
		return false, err
	}
	holder, err := d.nameHolder(ctx, s)
	if err != nil {
		return false, err
	}
	var problems []string
	if holder != "" {
		// Something holds the name: the copy, or what keeps it from being
		// created.
		if exists, problems, err = s.problems(ctx, cols); err != nil {
			return exists, err
		}
		if !exists {
			problems = append(problems, s.holderProblem(holder))
		}
	}
	missing, err := s.privilegeProblemsOf(ctx, exists, d)
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
		f, err := d.schema(ctx, s.conn, s.table.Schema)
		if err != nil {
			return exists, err
		}
		schema := ""
		if !f.found {
			schema = "CREATE SCHEMA IF NOT EXISTS " + pgutil.Ident(s.table.Schema)
		}
		if len(problems) == 0 {
			stmts := append(plan.creates, s.createSQL(cols))
			if schema != "" {
				stmts = append([]string{schema}, stmts...)
			}
			if err := sh.try(ctx, s, stmts); err != nil {
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
	return s.privilegeProblemsOf(ctx, exists, nil)
}

// schemaPrivilegeSQL says whether schema $1 exists, and whether the role
// may create a table in it or, when it does not exist, create it.
const schemaPrivilegeSQL = `
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1),
       CASE WHEN EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)
            THEN has_schema_privilege($1, 'USAGE') AND has_schema_privilege($1, 'CREATE')
            ELSE has_database_privilege(current_database(), 'CREATE') END`

// privilegeProblemsOf is privilegeProblems, with the role's privileges
// that d read for all the copies when it is not nil.
func (s *Postgres) privilegeProblemsOf(ctx context.Context, exists bool, d *sharedDB) ([]string, error) {
	var role, db string
	var temp bool
	var what, grant []string
	if d != nil {
		role, db, temp, what, grant = d.role, d.db, d.temp, d.missingWhat, d.missingGrant
	} else {
		if err := s.conn.QueryRow(ctx, `SELECT current_user::text, current_database()::text`).Scan(&role, &db); err != nil {
			return nil, fmt.Errorf("read sink role: %w", err)
		}
		if err := s.conn.QueryRow(ctx, `SELECT has_database_privilege(current_database(), 'TEMP')`).Scan(&temp); err != nil {
			return nil, fmt.Errorf("read privileges of the sink role: %w", err)
		}
		var err error
		if what, grant, err = catalog.Missing(ctx, s.conn); err != nil {
			return nil, err
		}
	}
	var out []string
	need := func(ok bool, what, grant string) {
		if !ok {
			out = append(out, fmt.Sprintf("the sink role %s lacks %s (%s TO %s)", role, what, grant, pgutil.Ident(role)))
		}
	}
	need(temp, "TEMP on database "+db+", which the staging table needs", "GRANT TEMP ON DATABASE "+pgutil.Ident(db))
	for i := range what {
		out = append(out, fmt.Sprintf("the sink role %s lacks %s (%s)", role, what[i], grant[i]))
	}
	if exists {
		privs := []string{"SELECT", "INSERT", "UPDATE", "DELETE"}
		has := make([]bool, len(privs))
		if err := s.conn.QueryRow(ctx, `SELECT has_table_privilege($1::regclass, 'SELECT'), has_table_privilege($1::regclass, 'INSERT'),
       has_table_privilege($1::regclass, 'UPDATE'), has_table_privilege($1::regclass, 'DELETE')`, s.qualified()).Scan(&has[0], &has[1], &has[2], &has[3]); err != nil {
			return nil, fmt.Errorf("read privileges of the sink role: %w", err)
		}
		for i, p := range privs {
			need(has[i], p+" on "+s.table.String(), "GRANT "+p+" ON "+s.qualified())
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
		var f schemaFacts
		if d != nil {
			var err error
			if f, err = d.schema(ctx, s.conn, sc); err != nil {
				return nil, err
			}
		} else if err := s.conn.QueryRow(ctx, schemaPrivilegeSQL, sc).Scan(&f.found, &f.ok); err != nil {
			return nil, fmt.Errorf("read privileges of the sink role: %w", err)
		}
		if f.found {
			need(f.ok, "USAGE and CREATE on schema "+sc+", which creating the copy needs", "GRANT USAGE, CREATE ON SCHEMA "+pgutil.Ident(sc))
		} else {
			need(f.ok, "CREATE on database "+db+" to create schema "+sc, "GRANT CREATE ON DATABASE "+pgutil.Ident(db))
		}
	}
	return out, nil
}
