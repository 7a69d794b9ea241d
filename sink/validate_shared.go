package sink

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/page"
)

// Shared is what `syncd validate` reads once for all the copies it checks
// in one sink database instead of once per copy, and the trial creations
// it shares between copies of one shape (ValidateShared). A copy's answer
// is the same as Validate's.
//
// Its facts are those of the moment validate first read them: validate
// reports on the sink as it found it, and a fact read once for 300 copies
// says what reading it 300 times a few milliseconds apart would (a grant
// given or a table made while validate runs is a change after the report
// either way). It lives for one validate command only.
type Shared struct {
	// copies are the copies validate checks, by sink DSN: the first copy
	// checked in a database looks up all their names at once.
	copies map[string][]config.Table

	mu     sync.Mutex
	dbs    map[string]*sharedDB
	trials map[string]*sharedTrial
	fsync  map[string]*sharedFsync
}

// NewShared is a Shared for validating the copies of cfgs.
func NewShared(cfgs []*config.Config) *Shared {
	sh := &Shared{copies: map[string][]config.Table{}, dbs: map[string]*sharedDB{},
		trials: map[string]*sharedTrial{}, fsync: map[string]*sharedFsync{}}
	for _, c := range cfgs {
		if c.Sink.Ident.Name != "" {
			sh.copies[c.Sink.DSN] = append(sh.copies[c.Sink.DSN], c.Sink.Ident)
		}
	}
	return sh
}

// sharedDB is what one sink database (one DSN, so one role) says about
// the copies to create there.
type sharedDB struct {
	once     sync.Once
	err      error
	role, db string
	temp     bool // TEMP on the database
	// catalog is false when the sink has no syncd catalog (no
	// syncd.catalog_version): no copy has a record there.
	catalog bool
	// missingWhat and missingGrant are catalog.Missing's answer.
	missingWhat, missingGrant []string

	mu      sync.Mutex
	schemas map[string]schemaFacts
	// holders say what holds each copy's name in the sink ("" nothing):
	// see nameHolder.
	holders map[config.Table]string
}

// schemaFacts is whether a schema exists and whether the role may create
// a table in it (USAGE and CREATE on it), or create it (CREATE on the
// database) when it does not.
type schemaFacts struct{ found, ok bool }

// namesSQL looks up, for each name (schema, name) of a copy to create,
// what already holds it and what the copy's CREATE TABLE IF NOT EXISTS
// would meet: any relation of that name (which IF NOT EXISTS takes for
// the copy and skips: a view, a sequence, a foreign table...), else a type
// of that name (the table's row type collides with it; an array type
// PostgreSQL named itself is renamed out of the way instead, so it does
// not count), and the schema and the role's privileges to create the copy
// in it or to create it.
const namesSQL = `
SELECT t.schema, t.name,
       coalesce((SELECT 'rel ' || c.relkind::text FROM pg_class c
                 WHERE c.relnamespace = n.oid AND c.relname = t.name::name),
                (SELECT 'type ' || y.typtype::text FROM pg_type y
                 WHERE y.typnamespace = n.oid AND y.typname = t.name::name
                   AND NOT (y.typelem <> 0 AND EXISTS (SELECT 1 FROM pg_type e WHERE e.oid = y.typelem AND e.typarray = y.oid))),
                ''),
       n.oid IS NOT NULL,
       CASE WHEN n.oid IS NOT NULL THEN has_schema_privilege(n.oid, 'USAGE') AND has_schema_privilege(n.oid, 'CREATE')
            ELSE has_database_privilege(current_database(), 'CREATE') END
FROM unnest($1::text[], $2::text[]) AS t(schema, name)
LEFT JOIN pg_namespace n ON n.nspname = t.schema`

// db returns the facts of s's sink database, read on s's session the
// first time: the role, its TEMP and catalog privileges, and what holds
// the names of all the copies validate checks there, in one query.
func (sh *Shared) db(ctx context.Context, s *Postgres) (*sharedDB, error) {
	dsn := s.cfg.Sink.DSN
	sh.mu.Lock()
	d := sh.dbs[dsn]
	if d == nil {
		d = &sharedDB{schemas: map[string]schemaFacts{}, holders: map[config.Table]string{}}
		sh.dbs[dsn] = d
	}
	sh.mu.Unlock()
	d.once.Do(func() {
		if err := s.conn.QueryRow(ctx, `SELECT current_user::text, current_database()::text, has_database_privilege(current_database(), 'TEMP'),
       to_regclass('syncd.catalog_version') IS NOT NULL`).Scan(&d.role, &d.db, &d.temp, &d.catalog); err != nil {
			d.err = fmt.Errorf("read the sink role's privileges: %w", err)
			return
		}
		if d.missingWhat, d.missingGrant, d.err = catalog.Missing(ctx, s.conn); d.err != nil {
			return
		}
		if len(sh.copies[dsn]) > 0 {
			d.err = d.lookUp(ctx, s.conn, sh.copies[dsn])
		}
	})
	if d.err != nil {
		// Not kept: the next copy asks again (its own error, if any).
		sh.mu.Lock()
		if sh.dbs[dsn] == d {
			delete(sh.dbs, dsn)
		}
		sh.mu.Unlock()
		return nil, d.err
	}
	return d, nil
}

// lookUp reads what holds each of tables' names (namesSQL), and their
// schemas.
func (d *sharedDB) lookUp(ctx context.Context, conn *pgx.Conn, tables []config.Table) error {
	schemas, names := make([]string, len(tables)), make([]string, len(tables))
	for i, t := range tables {
		schemas[i], names[i] = t.Schema, t.Name
	}
	rows, err := conn.Query(ctx, namesSQL, schemas, names)
	if err != nil {
		return fmt.Errorf("look up the copies' names in the sink: %w", err)
	}
	var t config.Table
	var holder string
	var sf schemaFacts
	d.mu.Lock()
	defer d.mu.Unlock()
	_, err = pgx.ForEachRow(rows, []any{&t.Schema, &t.Name, &holder, &sf.found, &sf.ok}, func() error {
		d.holders[t] = holder
		d.schemas[t.Schema] = sf
		return nil
	})
	if err != nil {
		return fmt.Errorf("look up the copies' names in the sink: %w", err)
	}
	return nil
}

// nameHolder says what holds the name of s's copy in the sink: "" when
// nothing, else "rel K" (a relation of relkind K) or "type T" (a type of
// typtype T). A name validate did not look up with the others is looked
// up alone.
func (d *sharedDB) nameHolder(ctx context.Context, s *Postgres) (string, error) {
	d.mu.Lock()
	h, ok := d.holders[s.table]
	d.mu.Unlock()
	if ok {
		return h, nil
	}
	if err := d.lookUp(ctx, s.conn, []config.Table{s.table}); err != nil {
		return "", err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.holders[s.table], nil
}

// schema is the facts of schema sc (looked up with the copies' names, or
// alone the first time it is asked about: a type's schema).
func (d *sharedDB) schema(ctx context.Context, conn *pgx.Conn, sc string) (schemaFacts, error) {
	d.mu.Lock()
	f, ok := d.schemas[sc]
	d.mu.Unlock()
	if ok {
		return f, nil
	}
	if err := conn.QueryRow(ctx, schemaPrivilegeSQL, sc).Scan(&f.found, &f.ok); err != nil {
		return f, fmt.Errorf("read privileges of the sink role: %w", err)
	}
	d.mu.Lock()
	d.schemas[sc] = f
	d.mu.Unlock()
	return f, nil
}

// holderProblem is the problem of a copy to create whose name something
// else holds in the sink (nameHolder, not ""). CREATE TABLE
// IF NOT EXISTS would skip a relation of that name (and the first run then
// write into a view or a sequence) and fails on a type of that name.
func (s *Postgres) holderProblem(h string) string {
	kind, code, _ := strings.Cut(h, " ")
	if kind == "rel" && (code == "r" || code == "p") {
		// A table without a column (columns found none).
		return fmt.Sprintf("%s in the sink is a table without columns: drop it so that syncd creates the copy, or add the source's columns to it", s.table)
	}
	what := map[string]string{
		"rel v": "a view", "rel m": "a materialized view", "rel f": "a foreign table", "rel S": "a sequence",
		"rel i": "an index", "rel I": "a partitioned index", "rel c": "a composite type", "rel t": "a TOAST table",
		"type e": "the name of an enum type", "type d": "the name of a domain", "type r": "the name of a range type",
		"type m": "the name of a multirange type", "type b": "the name of a base type", "type p": "the name of a pseudo-type",
		"type c": "the name of a composite type",
	}[h]
	if what == "" {
		what = "taken (" + h + ")"
	}
	return fmt.Sprintf("%s in the sink is %s, not a table, so the copy cannot be created there: drop or rename it, or choose another sink.table", s.table, what)
}

// sharedTrial is the trial creation of one shape of copy in one sink
// database: the first copy of the shape runs it, the others wait for it.
type sharedTrial struct {
	done chan struct{}
	err  error
}

// try is tryCreate shared between the copies of one shape: the same
// statements but for the copy's name, in the same sink database (so the
// same role, schema and types). A trial that succeeded for one copy of the
// shape proves its DDL for all of them; what it proved about the name
// itself (that it is free, and that the role may create in the schema)
// each copy's Validate checks in the catalog (nameHolder, schema). A failed
// trial is run again by each copy of the shape, so that its message names
// that copy's own statement.
func (sh *Shared) try(ctx context.Context, s *Postgres, stmts []string) error {
	last := len(stmts) - 1
	head := "CREATE TABLE IF NOT EXISTS " + s.qualified() + " ("
	if last < 0 || !strings.HasPrefix(stmts[last], head) {
		return s.tryCreate(ctx, stmts)
	}
	shape := append(append([]string{s.cfg.Sink.DSN}, stmts[:last]...), strings.TrimPrefix(stmts[last], head))
	key := strings.Join(shape, "\x00")
	sh.mu.Lock()
	t, ok := sh.trials[key]
	if !ok {
		t = &sharedTrial{done: make(chan struct{})}
		sh.trials[key] = t
	}
	sh.mu.Unlock()
	if !ok {
		t.err = s.tryCreate(ctx, stmts)
		close(t.done)
		return t.err
	}
	select {
	case <-t.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if t.err == nil {
		return nil
	}
	return s.tryCreate(ctx, stmts)
}

// sharedFsync is FsyncWarning's answer for one sink database.
type sharedFsync struct {
	once sync.Once
	w    string
	err  error
}

// FsyncWarning is FsyncWarning read once per sink database (a server
// setting, the same for every copy there).
func (sh *Shared) FsyncWarning(ctx context.Context, conn *pgx.Conn, dsn string) (string, error) {
	sh.mu.Lock()
	f := sh.fsync[dsn]
	if f == nil {
		f = &sharedFsync{}
		sh.fsync[dsn] = f
	}
	sh.mu.Unlock()
	f.once.Do(func() { f.w, f.err = FsyncWarning(ctx, conn, dsn) })
	return f.w, f.err
}

// Free says that nothing held the copy's name in the sink when validate
// looked (so the copy does not exist, and has no columns): false when it
// does not know.
func (sh *Shared) Free(ctx context.Context, s *Postgres) bool {
	d, err := sh.db(ctx, s)
	if err != nil {
		return false
	}
	h, err := d.nameHolder(ctx, s)
	return err == nil && h == ""
}

// NoCatalog says that the sink had no syncd catalog when validate looked,
// so catalog.Read finds no record of any copy there: false when it does not
// know.
func (sh *Shared) NoCatalog(ctx context.Context, s *Postgres) bool {
	d, err := sh.db(ctx, s)
	return err == nil && !d.catalog
}

// ValidateShared is Validate for one of many copies validate checks, with
// what sh read once for all of them (see Shared).
func (s *Postgres) ValidateShared(ctx context.Context, cols []page.Column, sh *Shared) (exists bool, err error) {
	return s.validate(ctx, cols, sh)
}
