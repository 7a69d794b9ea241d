// Package catalog owns syncd's own record, kept in the sink database, of
// what each copy is: which source writes it (the source's name, and where
// its table lives: the source cluster's system identifier, the database,
// the table's OID and heap files, its columns by attnum) and the cursor of
// the last page applied, written in that page's own transaction.
//
// The state file (package watermark) stays where a process keeps its
// watermark; the catalog is what the copy itself knows, readable by every
// process that reaches the sink. A run uses it to refuse a second writer
// of a copy, to notice a source table that was re-created or rewritten
// under its copy, and to resume from the sink's own point when the state
// file is lost, older than the sink, or ahead of a sink restored from a
// backup (docs/WATERMARK.md, "The sink's record").
//
// Each record also says how the copy's last recorded run ended (when, the
// read bound it reached, whether it caught up, and the point up to which
// the copy holds every source row), so that any replica of a fleet can
// tell how fresh a copy is that another replica runs (run.go).
//
// The catalog lives in the schema syncd, created on first use and
// upgraded in place under an advisory lock, so several processes may
// start on one sink at once.
package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/internal/pgutil"
)

// Schema is the sink schema that holds the catalog.
const Schema = "syncd"

// Version is the catalog format this build writes. A catalog of a newer
// version is refused, never rewritten.
const Version = 2

// ErrNewer is wrapped by Ensure's error when the catalog was written by a
// newer syncd.
var ErrNewer = errors.New("the sink's syncd catalog was written by a newer syncd")

// Source is where a copy's rows come from, as the source database tells
// it.
type Source struct {
	// System is the source cluster's system identifier ("" when the source
	// role may not read it); Database the source database's name.
	System   string `json:"system,omitempty"`
	Database string `json:"database"`
	// Table is the source table, schema-qualified; OID its pg_class oid.
	Table string `json:"table"`
	OID   uint32 `json:"oid"`
	// Heap lists "oid:relfilenode" of the table and of every partition or
	// inheritance child read through it, sorted: a TRUNCATE, VACUUM FULL,
	// CLUSTER, pg_repack or rewriting ALTER TABLE gives a table a new
	// relfilenode, and an attached or detached partition changes the list.
	Heap string `json:"heap"`
	// Columns are the table's live columns by attnum.
	Columns []Column `json:"columns,omitempty"`
	// Cursor names the cursor columns (source.cursor) the record's cursor
	// is a position in (empty in a record that did not say).
	Cursor []string `json:"cursor,omitempty"`
}

// Column is one source column: its attnum, which a rename keeps, its name
// and its type.
type Column struct {
	Num  int16  `json:"num"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// Same reports whether a and b name the same source table: the same
// cluster (when both know its identifier), database and table name.
func (a Source) Same(b Source) bool {
	return (a.System == "" || b.System == "" || a.System == b.System) && a.Database == b.Database && a.Table == b.Table
}

// String names the source table: "db.schema.table (cluster 123...)".
func (a Source) String() string {
	s := fmt.Sprintf("table %s in database %s", a.Table, a.Database)
	if a.System != "" {
		s += " of cluster " + a.System
	}
	return s
}

// Record is what the catalog holds about one copy.
type Record struct {
	// Copy is the sink table, schema-qualified as config.Table prints it.
	Copy string
	// SourceName is the name of the source that writes the copy.
	SourceName string
	Source     Source
	// Cursor is the cursor of the last page applied to the copy (nil: no
	// page applied since the copy was registered, or since a resync).
	Cursor []string
	// Pages and Rows count the pages and rows applied with a cursor.
	Pages, Rows int64
	// Writer is the host and process that last claimed the copy, and
	// StateFile the state file it uses.
	Writer, StateFile string
	// ResyncedAt is the resync of the source's state file that the record
	// last followed (zero: none).
	ResyncedAt   time.Time
	RegisteredAt time.Time
	UpdatedAt    time.Time
	// Run is how the copy's last recorded run ended (zero RunAt: none
	// recorded yet, or a catalog of format 1).
	Run Run
	// ReadAt is the sink's clock when the record was read: the ages of
	// UpdatedAt and Run.At are measured from it, never from this host's
	// clock.
	ReadAt time.Time
}

// ddl creates the catalog's tables in the schema syncd (created first,
// when it is missing, by createSchema: CREATE SCHEMA IF NOT EXISTS checks
// the database's CREATE privilege even when the schema exists).
const ddl = `
CREATE TABLE IF NOT EXISTS syncd.catalog_version (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  version integer NOT NULL
);
CREATE TABLE IF NOT EXISTS syncd.copies (
  copy_table      text PRIMARY KEY,
  source_name     text NOT NULL,
  source          jsonb NOT NULL,
  cursor          text[],
  pages           bigint NOT NULL DEFAULT 0,
  rows            bigint NOT NULL DEFAULT 0,
  writer          text NOT NULL DEFAULT '',
  state_file      text NOT NULL DEFAULT '',
  resynced_at     timestamptz,
  registered_at   timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now()
);
INSERT INTO syncd.catalog_version (version) VALUES (1) ON CONFLICT (one) DO NOTHING`

// migrations[v] upgrades a catalog of format v to v+1, in the transaction
// that holds the catalog's advisory lock; each ends by setting the new
// version. A catalog is created at format 1 by ddl and upgraded from
// there, so a new catalog and an upgraded one are the same.
var migrations = map[int]string{
	// 2: how each copy's last run ended (run.go).
	1: `ALTER TABLE syncd.copies
  ADD COLUMN IF NOT EXISTS run_at        timestamptz,
  ADD COLUMN IF NOT EXISTS run_bound     timestamptz,
  ADD COLUMN IF NOT EXISTS run_caught_up boolean,
  ADD COLUMN IF NOT EXISTS caught_up     timestamptz,
  ADD COLUMN IF NOT EXISTS run_every     interval;
UPDATE syncd.catalog_version SET version = 2`,
}

// Ensure creates the catalog in conn's database when it is missing, and
// upgrades an older one in place. It costs one query when the catalog is
// there. Creating it takes an advisory transaction lock, so that processes
// starting at once do not race; it needs CREATE on the database (or an
// existing schema syncd the role may create tables in).
func Ensure(ctx context.Context, conn *pgx.Conn) error {
	v, err := version(ctx, conn)
	switch {
	case err == nil && v == Version:
		return nil
	case err == nil && v > Version:
		return fmt.Errorf("%w (format %d; this build knows %d): upgrade syncd", ErrNewer, v, Version)
	case err != nil && !errors.Is(err, errNoCatalog):
		return createError(ctx, conn, err)
	}
	from := v // 0: no catalog yet
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('syncd catalog', 0))"); err != nil {
			return err
		}
		var schema bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'syncd')").Scan(&schema); err != nil {
			return err
		}
		if !schema {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA syncd; COMMENT ON SCHEMA syncd IS 'syncd''s catalog: which source writes each copy, and up to where (see docs/WATERMARK.md)'"); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, ddl); err != nil {
			return err
		}
		// Another process may have upgraded it while this one waited for
		// the lock: the version is read again under it.
		var at int
		if err := tx.QueryRow(ctx, "SELECT version FROM syncd.catalog_version").Scan(&at); err != nil {
			return err
		}
		for ; at < Version; at++ {
			if _, err := tx.Exec(ctx, migrations[at]); err != nil {
				return fmt.Errorf("upgrade it from format %d to %d: %w", at, at+1, err)
			}
		}
		return pgutil.Durable(ctx, tx)
	})
	if err != nil {
		if from > 0 {
			return upgradeError(from, err)
		}
		return createError(ctx, conn, err)
	}
	return nil
}

// upgradeError explains a catalog of format from that could not be
// upgraded: ALTER TABLE needs the owner of syncd.copies.
func upgradeError(from int, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return fmt.Errorf("upgrade syncd's catalog (schema syncd) in the sink database from format %d to %d: %w; only the owner of syncd.copies may: run this syncd once as that role, or have it run the upgrade by hand (docs/WATERMARK.md, \"The sink's record\")", from, Version, err)
	}
	return fmt.Errorf("upgrade syncd's catalog (schema syncd) in the sink database from format %d to %d: %w", from, Version, err)
}

// version reads the catalog's version, in one round trip; an error when
// there is none.
func version(ctx context.Context, conn *pgx.Conn) (int, error) {
	var v int
	err := conn.QueryRow(ctx, "SELECT version FROM syncd.catalog_version").Scan(&v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") {
		return 0, errNoCatalog
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// The format its columns say: run_at came with format 2.
		format := 1
		var two bool
		if conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('syncd.copies') AND attname = 'run_at' AND NOT attisdropped)").Scan(&two) == nil && two {
			format = 2
		}
		return 0, fmt.Errorf("syncd's catalog in the sink has no version (the row of syncd.catalog_version was deleted): restore it with INSERT INTO syncd.catalog_version (version) VALUES (%d)", format)
	}
	if err != nil {
		return 0, fmt.Errorf("read the syncd catalog's version: %w", err)
	}
	return v, nil
}

var errNoCatalog = errors.New("no syncd catalog")

// createError explains a catalog that could not be created, naming the
// privilege the sink role lacks.
func createError(ctx context.Context, conn *pgx.Conn, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		var role, db string
		_ = conn.QueryRow(ctx, "SELECT current_user, current_database()").Scan(&role, &db)
		return fmt.Errorf("use syncd's catalog (schema syncd) in the sink database %s: %w; syncd records there which source writes each copy: run GRANT CREATE ON DATABASE %s TO %s, or have an owner run CREATE SCHEMA syncd AUTHORIZATION %s (or grant it USAGE ON SCHEMA syncd and SELECT, INSERT, UPDATE, DELETE ON syncd.copies, SELECT ON syncd.catalog_version; docs/PRIVILEGES.md)",
			db, err, pgutil.Ident(db), pgutil.Ident(role), pgutil.Ident(role))
	}
	return fmt.Errorf("create syncd's catalog (schema syncd) in the sink database: %w", err)
}

const columns = `copy_table, source_name, source, cursor, pages, rows, writer, state_file, resynced_at, registered_at, updated_at, ` + runColumns + `, now()`

// columnsOf is the select list of a record in a catalog of format v: a
// catalog of format 1 (read by a process that does not upgrade it, such
// as status) has no run columns.
func columnsOf(v int) string {
	if v >= 2 {
		return columns
	}
	return strings.Replace(columns, runColumns, noRunColumns, 1)
}

func scan(row pgx.Row) (Record, error) {
	var r Record
	var src []byte
	var resynced, runAt, bound, caughtUp *time.Time
	var runCaught *bool
	var every *float64
	err := row.Scan(&r.Copy, &r.SourceName, &src, &r.Cursor, &r.Pages, &r.Rows, &r.Writer, &r.StateFile, &resynced, &r.RegisteredAt, &r.UpdatedAt,
		&runAt, &bound, &runCaught, &caughtUp, &every, &r.ReadAt)
	if err != nil {
		return r, err
	}
	if resynced != nil {
		r.ResyncedAt = *resynced
	}
	r.Run = runOf(runAt, bound, runCaught, caughtUp, every)
	if err := json.Unmarshal(src, &r.Source); err != nil {
		return r, fmt.Errorf("read the syncd catalog's record of %s: %w", r.Copy, err)
	}
	return r, nil
}

// Read returns the record of copy; found is false when there is none (or
// no catalog at all: Read never creates it).
func Read(ctx context.Context, conn *pgx.Conn, copy string) (rec Record, found bool, err error) {
	v, err := version(ctx, conn)
	if errors.Is(err, errNoCatalog) {
		return Record{}, false, nil
	} else if err != nil {
		return Record{}, false, err
	}
	rec, err = scan(conn.QueryRow(ctx, "SELECT "+columnsOf(v)+" FROM syncd.copies WHERE copy_table = $1", copy))
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("read the syncd catalog's record of %s: %w", copy, err)
	}
	return rec, true, nil
}

// Prefetch is the catalog's version and a copy's record, read in a batch
// the caller sends with other statements (Queue): EnsureFrom and
// ClaimFrom use what it read instead of reading it again, and read it
// themselves when it read nothing (the batch failed, or a statement
// before them in it did: no catalog yet, say).
type Prefetch struct {
	copy  string
	rec   Record
	found bool
	read  bool // the version is this build's, the record (or its absence) was read
}

// Queue queues in b the reads of the catalog's version and of copy's
// record that Ensure and Claim begin with.
func Queue(b *pgx.Batch, copy string) *Prefetch {
	pf := &Prefetch{copy: copy}
	var v int
	b.Queue("SELECT version FROM syncd.catalog_version").QueryRow(func(row pgx.Row) error {
		return row.Scan(&v)
	})
	b.Queue("SELECT "+columns+" FROM syncd.copies WHERE copy_table = $1", copy).QueryRow(func(row pgx.Row) error {
		rec, err := scan(row)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			pf.rec, pf.found = rec, true
		}
		// The record's columns are those of this build's format only
		// in a catalog of that format (else Ensure upgrades it first).
		pf.read = v == Version
		return nil
	})
	return pf
}

// EnsureFrom is Ensure, without a round trip when pf read the catalog's
// version and it is this build's.
func EnsureFrom(ctx context.Context, conn *pgx.Conn, pf *Prefetch) error {
	if pf != nil && pf.read {
		return nil
	}
	return Ensure(ctx, conn)
}

// ClaimFrom is Claim, without a round trip when pf read the copy's record
// and found it.
func ClaimFrom(ctx context.Context, conn *pgx.Conn, rec Record, pf *Prefetch) (Record, bool, error) {
	if pf != nil && pf.read && pf.found && pf.copy == rec.Copy {
		return pf.rec, false, nil
	}
	return Claim(ctx, conn, rec)
}

// Claim registers rec as the copy's record when the catalog has none, and
// returns the record the catalog holds, with created set when it was
// rec. An existing record is returned as it is; the caller decides.
func Claim(ctx context.Context, conn *pgx.Conn, rec Record) (Record, bool, error) {
	src, err := json.Marshal(rec.Source)
	if err != nil {
		return Record{}, false, err
	}
	var resynced *time.Time
	if !rec.ResyncedAt.IsZero() {
		resynced = &rec.ResyncedAt
	}
	out, err := scan(conn.QueryRow(ctx, "SELECT "+columns+" FROM syncd.copies WHERE copy_table = $1", rec.Copy))
	if err == nil {
		return out, false, nil // the common case: one round trip
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, fmt.Errorf("read the syncd catalog's record of %s: %w", rec.Copy, err)
	}
	var created bool
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO syncd.copies (copy_table, source_name, source, cursor, writer, state_file, resynced_at)
VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (copy_table) DO NOTHING`,
			rec.Copy, rec.SourceName, src, rec.Cursor, rec.Writer, rec.StateFile, resynced)
		if err != nil {
			return err
		}
		created = tag.RowsAffected() == 1
		if out, err = scan(tx.QueryRow(ctx, "SELECT "+columns+" FROM syncd.copies WHERE copy_table = $1", rec.Copy)); err != nil {
			return err
		}
		if created {
			return pgutil.Durable(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return Record{}, false, fmt.Errorf("register the copy %s in the syncd catalog: %w", rec.Copy, err)
	}
	return out, created, nil
}

// Update writes the record's source, writer and, with setCursor, its
// cursor and resync, durably. A new writer (a source that moved to
// another replica or state file) clears the last run's fields: they were
// the old writer's, and the fleet view must not show them as the new
// one's; the point the copy is caught up to (Run.Fresh) stays, it is the
// copy's.
func Update(ctx context.Context, conn *pgx.Conn, rec Record, setCursor bool) error {
	src, err := json.Marshal(rec.Source)
	if err != nil {
		return err
	}
	var resynced *time.Time
	if !rec.ResyncedAt.IsZero() {
		resynced = &rec.ResyncedAt
	}
	q := `UPDATE syncd.copies SET source = $2, writer = $3, state_file = $4, updated_at = now(), ` + handover
	args := []any{rec.Copy, src, rec.Writer, rec.StateFile}
	if setCursor {
		q += `, cursor = $5, resynced_at = $6`
		args = append(args, rec.Cursor, resynced)
	}
	if _, err := pgutil.ExecDurable(ctx, conn, q+" WHERE copy_table = $1", args...); err != nil {
		return fmt.Errorf("update the syncd catalog's record of %s: %w", rec.Copy, err)
	}
	return nil
}

// SetCursor records that the copy holds every row up to cursor (a first
// load that finished), durably.
func SetCursor(ctx context.Context, conn *pgx.Conn, copy string, cursor []string, rows int64) error {
	if _, err := pgutil.ExecDurable(ctx, conn, "UPDATE syncd.copies SET cursor = $2, rows = rows + $3, updated_at = now() WHERE copy_table = $1", copy, cursor, rows); err != nil {
		return fmt.Errorf("record the position of %s in the syncd catalog: %w", copy, err)
	}
	return nil
}

// MarkSQL is the statement a page's transaction runs to move the copy's
// record to mark, the page's last cursor, counting the page and its rows;
// with run (the last page of a run that caught up), it records the run's
// end too (run.go), at no cost but a few bytes of the row it writes
// anyway. It is plain SQL with literals, so that it can travel in a
// page's pipelined round trip (the simple query protocol).
func MarkSQL(copy string, mark []string, rows int, run *Run) string {
	vals := make([]string, len(mark))
	for i, v := range mark {
		vals[i] = literal(v)
	}
	q := "UPDATE syncd.copies SET cursor = ARRAY[" + strings.Join(vals, ", ") + "]::text[], pages = pages + 1, rows = rows + " +
		strconv.Itoa(rows) + ", updated_at = now()"
	if run != nil {
		q += ", " + run.set()
	}
	return q + " WHERE copy_table = " + literal(copy)
}

// literal quotes s as an escape string literal, which reads the same
// whatever standard_conforming_strings says.
func literal(s string) string {
	return "E'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
}

// Release removes the record of copy, so that another source may write
// it; it reports whether there was one.
func Release(ctx context.Context, conn *pgx.Conn, copy string) (bool, error) {
	if _, err := version(ctx, conn); errors.Is(err, errNoCatalog) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	tag, err := pgutil.ExecDurable(ctx, conn, "DELETE FROM syncd.copies WHERE copy_table = $1", copy)
	if err != nil {
		return false, fmt.Errorf("release the copy %s in the syncd catalog: %w", copy, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ReleaseSQL is the statement that releases copy by hand.
func ReleaseSQL(copy string) string {
	return "DELETE FROM syncd.copies WHERE copy_table = " + literal(copy)
}

// ErrSecondWriter is wrapped by the error that refuses a second writer of
// a copy.
var ErrSecondWriter = errors.New("the copy has another writer")

// SecondWriter is the refusal of a source that would write a copy another
// source writes (by the sink's catalog, or by two configs loaded together).
type SecondWriter struct {
	Copy string
	// Writer names the source that writes the copy, and where it is
	// recorded (a catalog record, or another config file).
	Writer, WriterFrom string
	// Source names the refused source and where its rows come from.
	Source, SourceFrom string
	// Release is how the copy is released ("" when both are configs).
	Release string
}

func (e *SecondWriter) Error() string {
	fix := fmt.Sprintf("give source %s its own sink.table", e.Source)
	if e.Release != "" {
		fix += fmt.Sprintf(", or, if source %s no longer writes it, release the copy on the sink with %s", e.Writer, e.Release)
	} else {
		fix += " (or remove one of the two)"
	}
	return fmt.Sprintf("the copy %s is written by source %s (%s), so source %s (%s) may not write it too: a copy has exactly one writer; %s",
		e.Copy, e.Writer, e.WriterFrom, e.Source, e.SourceFrom, fix)
}

// Unwrap makes a SecondWriter an ErrSecondWriter.
func (e *SecondWriter) Unwrap() error { return ErrSecondWriter }

// Refuse returns the SecondWriter error of source name (reading src) when
// rec says another source (by name) writes the copy, else nil. A source of
// the same name that now reads another table is the caller's to judge (a
// resync may have moved it there).
func Refuse(rec Record, name string, src Source) error {
	if rec.SourceName == name {
		return nil
	}
	return &SecondWriter{Copy: rec.Copy, Writer: rec.SourceName,
		WriterFrom: fmt.Sprintf("%s; last claimed by %s, state file %s", rec.Source, rec.Writer, rec.StateFile),
		Source:     name, SourceFrom: src.String(), Release: ReleaseSQL(rec.Copy)}
}

// Missing lists what the session's role lacks to use the catalog, each as
// what it lacks and the GRANT that gives it (empty: nothing).
func Missing(ctx context.Context, conn *pgx.Conn) (what, grant []string, err error) {
	var role, db string
	var schema, tables, usage, create, dbCreate bool
	err = conn.QueryRow(ctx, `
SELECT current_user::text, current_database()::text,
       EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'syncd'),
       to_regclass('syncd.copies') IS NOT NULL AND to_regclass('syncd.catalog_version') IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'syncd') AND has_schema_privilege('syncd', 'USAGE'),
       EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'syncd') AND has_schema_privilege('syncd', 'CREATE'),
       has_database_privilege(current_database(), 'CREATE')`).Scan(&role, &db, &schema, &tables, &usage, &create, &dbCreate)
	if err != nil {
		return nil, nil, fmt.Errorf("read the sink role's privileges on syncd's catalog: %w", err)
	}
	r := pgutil.Ident(role)
	switch {
	case !schema && !dbCreate:
		return []string{"CREATE on database " + db + " to create the schema syncd of syncd's catalog"}, []string{"GRANT CREATE ON DATABASE " + pgutil.Ident(db) + " TO " + r}, nil
	case schema && !usage:
		return []string{"USAGE on schema syncd (syncd's catalog)"}, []string{"GRANT USAGE ON SCHEMA syncd TO " + r}, nil
	case schema && !tables && !create:
		return []string{"CREATE on schema syncd to create syncd's catalog"}, []string{"GRANT CREATE ON SCHEMA syncd TO " + r}, nil
	case !tables:
		return nil, nil, nil
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT has_table_privilege('syncd.copies', 'SELECT, INSERT, UPDATE, DELETE') AND has_table_privilege('syncd.catalog_version', 'SELECT')`).Scan(&ok); err != nil {
		return nil, nil, fmt.Errorf("read the sink role's privileges on syncd's catalog: %w", err)
	}
	if !ok {
		return []string{"SELECT, INSERT, UPDATE, DELETE on syncd.copies and SELECT on syncd.catalog_version"},
			[]string{"GRANT SELECT, INSERT, UPDATE, DELETE ON syncd.copies TO " + r + "; GRANT SELECT ON syncd.catalog_version TO " + r}, nil
	}
	return nil, nil, nil
}
