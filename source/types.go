package source

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/page"
)

// firstNormalOID is PostgreSQL's FirstNormalObjectId: every object with a
// lower OID was made by initdb.
const firstNormalOID = 16384

// userTypes returns the user-defined types the columns need, each after the
// types it is built on (a domain over an enum comes after the enum), so the
// sink can create them in order. Built-in types are left out. A type that
// belongs to an extension comes as Kind 'x', naming the extension and the
// columns that need it, and what it is built on is left to the extension.
func userTypes(ctx context.Context, conn *pgx.Conn, cols []page.Column) ([]page.UserType, error) {
	var out []page.UserType
	seen := map[uint32]bool{}
	ext := map[uint32]int{} // an extension's type: its index in out
	var col string          // the column being visited
	var visit func(oid uint32) error
	visit = func(oid uint32) error {
		if i, ok := ext[oid]; ok {
			if cs := out[i].Columns; len(cs) == 0 || cs[len(cs)-1] != col {
				out[i].Columns = append(out[i].Columns, col)
			}
			return nil
		}
		if seen[oid] || oid < firstNormalOID {
			// A type below FirstNormalObjectId is built in (initdb's, in
			// pg_catalog or information_schema, never an extension's): the
			// sink has it, and asking the catalog costs a round trip per
			// column.
			return nil
		}
		seen[oid] = true
		var (
			schema, name, base string
			kind               string
			elem, baseOID, rel uint32
			sub                uint32
			notNull            bool
			def                *string
			extName, extVer    *string
			extSchema          *string
		)
		err := conn.QueryRow(ctx, `
SELECT n.nspname, t.typname, t.typtype::text, t.typelem, t.typbasetype, t.typrelid,
       coalesce(r.rngsubtype, 0), t.typnotnull, pg_get_expr(t.typdefaultbin, 0),
       CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod)
            WHEN t.typtype = 'r' THEN format_type(r.rngsubtype, NULL) ELSE '' END,
       e.extname::text, e.extversion, en.nspname::text
FROM pg_type t
JOIN pg_namespace n ON n.oid = t.typnamespace
LEFT JOIN pg_range r ON r.rngtypid = t.oid
LEFT JOIN pg_depend d ON d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
LEFT JOIN pg_extension e ON e.oid = d.refobjid
LEFT JOIN pg_namespace en ON en.oid = e.extnamespace
WHERE t.oid = $1`, oid).Scan(&schema, &name, &kind, &elem, &baseOID, &rel, &sub, &notNull, &def, &base, &extName, &extVer, &extSchema)
		if err != nil {
			return fmt.Errorf("read type %d: %w", oid, err)
		}
		if extName != nil {
			ext[oid] = len(out)
			out = append(out, page.UserType{Schema: schema, Name: name, Kind: 'x', Extension: *extName,
				ExtVersion: *extVer, ExtSchema: *extSchema, Columns: []string{col}})
			return nil
		}
		if elem != 0 && kind == "b" {
			return visit(elem) // an array: its element type
		}
		if schema == "pg_catalog" || schema == "information_schema" {
			return nil
		}
		ut := page.UserType{Schema: schema, Name: name, Kind: kind[0], Base: base, NotNull: notNull}
		if def != nil {
			ut.Default = *def
		}
		switch ut.Kind {
		case 'e':
			rows, err := conn.Query(ctx, `SELECT enumlabel::text FROM pg_enum WHERE enumtypid = $1 ORDER BY enumsortorder`, oid)
			if err != nil {
				return fmt.Errorf("read labels of enum %s.%s: %w", schema, name, err)
			}
			if ut.Labels, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return fmt.Errorf("read labels of enum %s.%s: %w", schema, name, err)
			}
		case 'd':
			if err := visit(baseOID); err != nil {
				return err
			}
			rows, err := conn.Query(ctx, `SELECT conname::text, pg_get_constraintdef(oid) FROM pg_constraint WHERE contypid = $1 AND contype = 'c' ORDER BY conname`, oid)
			if err != nil {
				return fmt.Errorf("read constraints of domain %s.%s: %w", schema, name, err)
			}
			var cn, def string
			if _, err := pgx.ForEachRow(rows, []any{&cn, &def}, func() error {
				ut.CheckNames, ut.Checks = append(ut.CheckNames, cn), append(ut.Checks, def)
				return nil
			}); err != nil {
				return fmt.Errorf("read constraints of domain %s.%s: %w", schema, name, err)
			}
		case 'r':
			if err := visit(sub); err != nil {
				return err
			}
		case 'c':
			rows, err := conn.Query(ctx, `SELECT attname::text, format_type(atttypid, atttypmod), atttypid::int8 FROM pg_attribute
WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, rel)
			if err != nil {
				return fmt.Errorf("read fields of type %s.%s: %w", schema, name, err)
			}
			var f page.Field
			var typ int64
			var oids []uint32
			_, err = pgx.ForEachRow(rows, []any{&f.Name, &f.Type, &typ}, func() error {
				ut.Fields = append(ut.Fields, f)
				oids = append(oids, uint32(typ))
				return nil
			})
			if err != nil {
				return fmt.Errorf("read fields of type %s.%s: %w", schema, name, err)
			}
			for _, o := range oids {
				if err := visit(o); err != nil {
					return err
				}
			}
		default:
			return nil // a base or pseudo type of an extension: the sink must have it
		}
		out = append(out, ut)
		return nil
	}
	for _, c := range cols {
		col = c.Name
		if err := visit(c.TypeOID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// tableChecks returns the definitions of the table's check constraints, to
// compare with the copy's.
func tableChecks(ctx context.Context, conn *pgx.Conn, schema, name string) ([]string, error) {
	rows, err := conn.Query(ctx, `
SELECT pg_get_constraintdef(k.oid)
FROM pg_constraint k
JOIN pg_class c ON c.oid = k.conrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND k.contype = 'c'`, schema, name)
	if err != nil {
		return nil, fmt.Errorf("read check constraints of %s.%s: %w", schema, name, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// RefreshTypes reads the user-defined types of the selected columns again.
// A run calls it after taking its read bound: PostgreSQL never removes an
// enum label and a row can use a new label only once ADD VALUE committed,
// so every label a row under the bound holds is then known, and the sink
// can add it before that row is applied.
func (r *Reader) RefreshTypes(ctx context.Context) error {
	types, err := userTypes(ctx, r.conn, r.table.Columns)
	if err != nil {
		return fmt.Errorf("describe types of %s: %w", r.table.Ident, err)
	}
	r.table.Types = types
	return nil
}
