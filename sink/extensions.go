package sink

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
)

// extNeed is an extension the source's columns need, with what needs it.
type extNeed struct {
	name, version, schema string
	uses                  []string // `column "email" (type public.citext)`
}

// needsOf groups the extension types (Kind 'x') by extension, in the
// order the columns first need them.
func needsOf(types []page.UserType) []*extNeed {
	var out []*extNeed
	by := map[string]*extNeed{}
	for _, ut := range types {
		if ut.Kind != 'x' {
			continue
		}
		n := by[ut.Extension]
		if n == nil {
			n = &extNeed{name: ut.Extension, version: ut.ExtVersion, schema: ut.ExtSchema}
			by[ut.Extension] = n
			out = append(out, n)
		}
		for _, c := range ut.Columns {
			n.uses = append(n.uses, fmt.Sprintf("column %q (type %s)", c, pgutil.Qualified(ut.Schema, ut.Name)))
		}
	}
	return out
}

// planExtensions plans the CREATE EXTENSION of every extension the
// source's columns need that the sink database lacks, in the schema it has
// in the source (created first when the sink lacks it). Unless createExt
// is set and the sink role may create the extension (a superuser, or a
// trusted extension and CREATE on the database), a missing extension is a
// problem that names the columns, the statement to run on the sink and the
// key that lets syncd run it.
func planExtensions(ctx context.Context, conn *pgx.Conn, types []page.UserType, createExt bool, schemas map[string]bool, p *typePlan) error {
	for _, n := range needsOf(types) {
		var have, available, trusted, super, createDB, schemaOK bool
		var role, db string
		err := conn.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = $1),
       EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = $1),
       coalesce((SELECT v.trusted FROM pg_available_extension_versions v
                 JOIN pg_available_extensions a ON a.name = v.name AND a.default_version = v.version
                 WHERE v.name = $1), false),
       coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false),
       has_database_privilege(current_database(), 'CREATE'),
       EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $2),
       current_user::text, current_database()::text`, n.name, n.schema).
			Scan(&have, &available, &trusted, &super, &createDB, &schemaOK, &role, &db)
		if err != nil {
			return fmt.Errorf("read extension %s in the sink: %w", n.name, err)
		}
		if have {
			continue
		}
		stmt := "CREATE EXTENSION IF NOT EXISTS " + pgutil.Ident(n.name) + " SCHEMA " + pgutil.Ident(n.schema)
		what := fmt.Sprintf("%s need%s extension %s (version %s in the source), which the sink database %s lacks",
			strings.Join(n.uses, ", "), plural(len(n.uses)), n.name, n.version, db)
		var why string
		switch {
		case !available:
			why = fmt.Sprintf("; the sink's server does not have extension %s installed (pg_available_extensions): install it there, then run %s on the sink database", n.name, stmt)
		case !createExt:
			why = fmt.Sprintf("; run %s on the sink database, or set sink.create_extensions: true to let syncd run it", stmt)
		case !super && !trusted:
			why = fmt.Sprintf("; sink.create_extensions is set, but %s is not a trusted extension and the sink role %s is not a superuser: run %s on the sink database as a superuser", n.name, role, stmt)
		case !super && !createDB:
			why = fmt.Sprintf("; sink.create_extensions is set, but the sink role %s lacks CREATE on database %s, which a trusted extension needs: run %s on the sink database as a role that has it, or GRANT CREATE ON DATABASE %s TO %s",
				role, db, stmt, pgutil.Ident(db), pgutil.Ident(role))
		}
		if why != "" {
			p.problems = append(p.problems, what+why)
			continue
		}
		if !schemaOK && !schemas[n.schema] {
			p.creates = append(p.creates, "CREATE SCHEMA IF NOT EXISTS "+pgutil.Ident(n.schema))
		}
		schemas[n.schema] = true
		p.creates = append(p.creates, stmt)
	}
	return nil
}

func plural(n int) string {
	if n == 1 {
		return "s"
	}
	return ""
}
