package sink

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
)

// This file creates in the sink the user-defined types the source's columns
// need (enum, domain, composite, range; arrays of them come with them) and
// keeps enum labels up to date; the types of extensions come with CREATE
// EXTENSION (extensions.go).

// typePlan is what the sink needs to hold the source's types: ADD VALUE
// statements for enums that lack labels (run outside a transaction block,
// which servers before 12 require), CREATE statements for missing schemas
// and types (run in the transaction that creates the copy), and the types
// that exist with another definition.
type typePlan struct {
	labels   []string
	creates  []string
	problems []string
}

// sinkType is a type of the sink database as the catalog describes it.
type sinkType struct {
	kind    string
	labels  []string
	base    string
	notNull bool
	def     string
	checks  []string
	fields  []page.Field
}

func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// planTypes compares the source's types with the sink's. With enumsOnly it
// only plans the labels of enums that exist in the sink (an existing copy:
// the column check decides whether the copy's types fit). Otherwise it
// first plans the extensions the types need (createExt: the sink role may
// be asked to create the missing ones, sink.create_extensions).
func planTypes(ctx context.Context, conn *pgx.Conn, types []page.UserType, enumsOnly, createExt bool) (typePlan, error) {
	var p typePlan
	schemas := map[string]bool{}
	if !enumsOnly {
		if err := planExtensions(ctx, conn, types, createExt, schemas, &p); err != nil {
			return p, err
		}
	}
	for _, ut := range types {
		if ut.Kind == 'x' || enumsOnly && ut.Kind != 'e' {
			continue
		}
		qn := pgutil.Qualified(ut.Schema, ut.Name)
		have, found, err := readSinkType(ctx, conn, ut.Schema, ut.Name)
		if err != nil {
			return p, err
		}
		if !found {
			if enumsOnly {
				continue
			}
			if !schemas[ut.Schema] {
				schemas[ut.Schema] = true
				var ok bool
				if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, ut.Schema).Scan(&ok); err != nil {
					return p, fmt.Errorf("read schema %s in the sink: %w", ut.Schema, err)
				}
				if !ok {
					p.creates = append(p.creates, "CREATE SCHEMA IF NOT EXISTS "+pgutil.Ident(ut.Schema))
				}
			}
			p.creates = append(p.creates, createType(qn, ut))
			continue
		}
		if have.kind != string(ut.Kind) {
			p.problems = append(p.problems, fmt.Sprintf("type %s exists in the sink as another kind of type (%s, source %s); drop or rename it", qn, kindName(have.kind[0]), kindName(ut.Kind)))
			continue
		}
		if ut.Kind == 'e' {
			stmts, problem := enumLabels(qn, ut.Labels, have.labels)
			p.labels = append(p.labels, stmts...)
			if problem != "" {
				p.problems = append(p.problems, problem)
			}
			continue
		}
		if d := typeDiff(ut, have); d != "" {
			p.problems = append(p.problems, fmt.Sprintf("type %s differs in the sink: %s; drop it so syncd creates it as in the source, or make it the same", qn, d))
		}
	}
	return p, nil
}

func kindName(k byte) string {
	switch k {
	case 'e':
		return "enum"
	case 'd':
		return "domain"
	case 'c':
		return "composite"
	case 'r':
		return "range"
	}
	return "base"
}

func createType(qn string, ut page.UserType) string {
	switch ut.Kind {
	case 'e':
		labels := make([]string, len(ut.Labels))
		for i, l := range ut.Labels {
			labels[i] = literal(l)
		}
		return "CREATE TYPE " + qn + " AS ENUM (" + strings.Join(labels, ", ") + ")"
	case 'd':
		q := "CREATE DOMAIN " + qn + " AS " + ut.Base
		if ut.Default != "" {
			q += " DEFAULT " + ut.Default
		}
		if ut.NotNull {
			q += " NOT NULL"
		}
		for i, c := range ut.Checks {
			if i < len(ut.CheckNames) {
				q += " CONSTRAINT " + pgutil.Ident(ut.CheckNames[i])
			}
			q += " " + checkDef(c)
		}
		return q
	case 'c':
		fields := make([]string, len(ut.Fields))
		for i, f := range ut.Fields {
			fields[i] = pgutil.Ident(f.Name) + " " + f.Type
		}
		return "CREATE TYPE " + qn + " AS (" + strings.Join(fields, ", ") + ")"
	}
	return "CREATE TYPE " + qn + " AS RANGE (subtype = " + ut.Base + ")"
}

// enumLabels plans the ADD VALUE statements that give the sink's enum every
// source label in the source's order. Labels the sink has and the source
// does not are kept (they hold no source value); labels in another order
// are a problem, since the copy would sort differently.
func enumLabels(qn string, src, dst []string) ([]string, string) {
	var common []string
	for _, l := range dst {
		if slices.Contains(src, l) {
			common = append(common, l)
		}
	}
	var srcCommon []string
	for _, l := range src {
		if slices.Contains(dst, l) {
			srcCommon = append(srcCommon, l)
		}
	}
	if !slices.Equal(common, srcCommon) {
		return nil, fmt.Sprintf("enum %s orders its labels (%s) unlike the source (%s); recreate it in the source's order", qn, strings.Join(common, ", "), strings.Join(srcCommon, ", "))
	}
	have := map[string]bool{}
	for _, l := range dst {
		have[l] = true
	}
	var stmts []string
	for i, l := range src {
		if have[l] {
			continue
		}
		q := "ALTER TYPE " + qn + " ADD VALUE IF NOT EXISTS " + literal(l)
		if i > 0 {
			q += " AFTER " + literal(src[i-1])
		} else if j := slices.IndexFunc(src, func(x string) bool { return have[x] }); j >= 0 {
			q += " BEFORE " + literal(src[j])
		}
		stmts = append(stmts, q)
		have[l] = true
	}
	return stmts, ""
}

// typeDiff names how a domain, composite or range type of the sink differs
// from the source's, or returns "".
func typeDiff(ut page.UserType, have sinkType) string {
	var d []string
	switch ut.Kind {
	case 'd':
		if ut.Base != have.base {
			d = append(d, fmt.Sprintf("base type %s, source %s", have.base, ut.Base))
		}
		if ut.NotNull != have.notNull {
			d = append(d, fmt.Sprintf("NOT NULL %t, source %t", have.notNull, ut.NotNull))
		}
		if ut.Default != have.def {
			d = append(d, fmt.Sprintf("default %q, source %q", have.def, ut.Default))
		}
		a, b := checkDefs(ut.Checks), checkDefs(have.checks)
		if !slices.Equal(a, b) {
			d = append(d, fmt.Sprintf("constraints [%s], source [%s]", strings.Join(b, "; "), strings.Join(a, "; ")))
		}
	case 'c':
		if !slices.Equal(ut.Fields, have.fields) {
			d = append(d, fmt.Sprintf("fields (%s), source (%s)", fieldList(have.fields), fieldList(ut.Fields)))
		}
	case 'r':
		if ut.Base != have.base {
			d = append(d, fmt.Sprintf("subtype %s, source %s", have.base, ut.Base))
		}
	}
	return strings.Join(d, ", ")
}

func fieldList(fs []page.Field) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = f.Name + " " + f.Type
	}
	return strings.Join(parts, ", ")
}

func readSinkType(ctx context.Context, conn *pgx.Conn, schema, name string) (sinkType, bool, error) {
	var t sinkType
	var oid, rel uint32
	var def *string
	err := conn.QueryRow(ctx, `
SELECT t.oid, t.typtype::text, t.typrelid, t.typnotnull, pg_get_expr(t.typdefaultbin, 0),
       CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod)
            WHEN t.typtype = 'r' THEN format_type(r.rngsubtype, NULL) ELSE '' END
FROM pg_type t
JOIN pg_namespace n ON n.oid = t.typnamespace
LEFT JOIN pg_range r ON r.rngtypid = t.oid
WHERE n.nspname = $1 AND t.typname = $2`, schema, name).Scan(&oid, &t.kind, &rel, &t.notNull, &def, &t.base)
	if err == pgx.ErrNoRows {
		return t, false, nil
	}
	if err != nil {
		return t, false, fmt.Errorf("read type %s.%s in the sink: %w", schema, name, err)
	}
	if def != nil {
		t.def = *def
	}
	var q string
	var arg uint32
	switch t.kind {
	case "e":
		q, arg = `SELECT enumlabel::text FROM pg_enum WHERE enumtypid = $1 ORDER BY enumsortorder`, oid
	case "d":
		q, arg = `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE contypid = $1 AND contype = 'c'`, oid
	case "c":
		rows, err := conn.Query(ctx, `SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute
WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, rel)
		if err != nil {
			return t, false, fmt.Errorf("read fields of type %s.%s in the sink: %w", schema, name, err)
		}
		t.fields, err = pgx.CollectRows(rows, pgx.RowToStructByPos[page.Field])
		if err != nil {
			return t, false, fmt.Errorf("read fields of type %s.%s in the sink: %w", schema, name, err)
		}
		return t, true, nil
	default:
		return t, true, nil
	}
	rows, err := conn.Query(ctx, q, arg)
	if err != nil {
		return t, false, fmt.Errorf("read type %s.%s in the sink: %w", schema, name, err)
	}
	vals, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return t, false, fmt.Errorf("read type %s.%s in the sink: %w", schema, name, err)
	}
	if t.kind == "e" {
		t.labels = vals
	} else {
		t.checks = vals
	}
	return t, true, nil
}

// SyncEnumLabels adds to the sink's enums the labels the source's enums
// gained (ALTER TYPE ... ADD VALUE, in the source's order), each statement
// on its own outside a transaction block, so a row using a new label can be
// applied right after. Enums the sink does not have are left to the copy's
// creation. It returns the statements it ran. A schema-change detector can
// call it with the source's current types (source.Table.Types).
func SyncEnumLabels(ctx context.Context, conn *pgx.Conn, types []page.UserType) ([]string, error) {
	p, err := planTypes(ctx, conn, types, true, false)
	if err != nil {
		return nil, err
	}
	for _, q := range p.labels {
		if _, err := conn.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("add enum label in the sink (%s): %w", q, err)
		}
	}
	return p.labels, nil
}
