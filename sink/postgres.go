package sink

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgpool"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
)

// Postgres is a PostgreSQL table kept as a copy of the source table.
type Postgres struct {
	conn  *pgx.Conn
	sess  *pgpool.Session
	cfg   *config.Config
	table config.Table
	cols  []page.Column
	buf   bytes.Buffer

	stageReady bool
	copySQL    string
	upsertSQL  string
	deleteSQL  string     // soft deletes; "" when there is no deleted_column or they are kept
	fp         fastPath   // see fastpath.go
	dur        durability // see durable.go

	// copyTypes are the type OIDs of the copy's columns, by name (nil
	// until Prepare), see differs.
	copyTypes map[string]uint32

	srcTypes  []page.UserType // the source's user-defined types, see types_ddl.go
	srcChecks []string        // the source table's check constraints
	// unfinished is set when a page failed or was cancelled, or the run
	// said it did not catch up (Unfinished): Close skips the ANALYZE.
	unfinished bool
	// record is the copy's name in the syncd catalog once Record was
	// called: each page with a Mark moves it in its own transaction.
	record string
	// trusted is set by Trust: Prepare skips Check.
	trusted bool
	// known is what the last Prepare read from the catalog about the
	// copy (Known); given, set by UseKnown, is what the next Prepare
	// starts from instead of reading it.
	known, given *Known
	// durRead is what QueueDurability read for the next Prepare (nil:
	// Prepare reads it).
	durRead *durability
	// holdsRows is set by HoldsRows: prepareFast need not ask whether
	// the copy is empty.
	holdsRows bool
}

// Known is what Prepare read from the catalog about the copy: its
// columns' types as format_type prints them and as OIDs, and the array
// type of the key's type. It describes the copy only as long as none of
// the copy's catalog rows changed: a caller keeps it with the copy's
// catalog fingerprint (pgutil.Fingerprint) read before the Prepare that
// filled it, and hands it to a later Prepare (UseKnown) only when the
// fingerprint read by that later run, under its run lock, is the same
// (any ALTER, DROP or CREATE of the copy or of a type of its columns
// writes a catalog row the fingerprint covers).
type Known struct {
	columns  map[string]string // format_type of each column, by name
	types    map[string]uint32 // type OID of each column, by name
	keyElem  uint32            // the key's type, whose array type keyArray is (0: none read)
	keyArray uint32
}

// Known returns what Prepare read from the catalog about the copy (nil
// before Prepare).
func (s *Postgres) Known() *Known { return s.known }

// UseKnown gives Prepare what an earlier Prepare read about the copy (see
// Known for when that is allowed): Prepare reads none of it again. Called
// with Trust.
func (s *Postgres) UseKnown(k *Known) { s.given = k }

// HoldsRows tells Prepare that the copy held a row when the run looked,
// on this session under the run lock (the lost-copy check): the fast path
// starts by probing, as for any copy that holds rows, without asking the
// server again. The fast path never trusts that answer for correctness:
// a key already stored makes its COPY fail and the page go through the
// upsert.
func (s *Postgres) HoldsRows() { s.holdsRows = true }

// SchemaChanged drops the prepared statements of the sink's session when
// it came from a pool, and makes every other session of the pool drop its
// own before it is lent again: the copy changed since the last run (see
// pgpool.Session.SchemaChanged).
func (s *Postgres) SchemaChanged(ctx context.Context) error {
	if s.sess == nil {
		return nil
	}
	return s.sess.SchemaChanged(ctx)
}

// Trust tells Prepare that an earlier run's Prepare checked the copy
// against the same source columns and that no catalog row of the copy
// changed since (the run compared pgutil.Fingerprint): the copy exists
// and the checks of Check would find what they found then, so Prepare
// skips them.
func (s *Postgres) Trust() { s.trusted = true }

// Record makes every page with a Mark move the copy's record in the syncd
// catalog (package catalog) in the page's own transaction (Recorder).
func (s *Postgres) Record(copy string) { s.record = copy }

// markSQL is the statement that moves the copy's record to p's mark, ""
// when p has none or the copy is not recorded.
func (s *Postgres) markSQL(p page.Page) string {
	if s.record == "" || p.Mark == nil {
		return ""
	}
	var run *catalog.Run
	if e := p.End; e != nil {
		run = &catalog.Run{Bound: e.Bound, CaughtUp: true, Fresh: e.Fresh, Every: e.Every}
	}
	return catalog.MarkSQL(s.record, p.Mark, len(p.Rows), run)
}

// SourceSchemaUser is a sink that creates the source's types and compares
// the copy's constraints with the source's; the run calls UseSourceSchema
// before Prepare.
type SourceSchemaUser interface {
	UseSourceSchema(types []page.UserType, checks []string)
}

var _ SourceSchemaUser = (*Postgres)(nil)

// UseSourceSchema gives the sink the source's user-defined types (created
// with the copy, enum labels kept up to date) and check constraints (any
// other check of the copy is reported).
func (s *Postgres) UseSourceSchema(types []page.UserType, checks []string) {
	s.srcTypes, s.srcChecks = types, checks
}

var _ Sink = (*Postgres)(nil)

// OpenPostgres connects to the sink database of c.
// It takes a session of the context's pool when it carries one (see
// OpenSession).
func OpenPostgres(ctx context.Context, c *config.Config) (*Postgres, error) {
	sess, err := OpenSession(ctx, c)
	if err != nil {
		return nil, err
	}
	return &Postgres{conn: sess.Conn, sess: sess, cfg: c, table: c.Sink.Ident}, nil
}

// OnConn is OpenPostgres on a session the caller opened to c's sink
// database (Connect) and keeps (for checks: `syncd validate` checks the
// copies of a pattern on a few sessions instead of one each).
func OnConn(conn *pgx.Conn, c *config.Config) *Postgres {
	return &Postgres{conn: conn, cfg: c, table: c.Sink.Ident}
}

// Conn is the sink's connection.
func (s *Postgres) Conn() *pgx.Conn { return s.conn }

// ReleasesLocks reports whether Close releases the advisory locks taken on
// the sink's session (the run lock), in the round trip that resets a
// pooled session (pgpool.Session.ReleasesLocks); false for a session
// without a pool, which Close closes.
func (s *Postgres) ReleasesLocks() bool { return s.sess != nil && s.sess.ReleasesLocks() }

// Unfinished says that the run did not catch up (see Unfinisher).
func (s *Postgres) Unfinished() { s.unfinished = true }

// Close gives the session back to its pool (unless the run marked it
// broken, see pgpool.Broken), or closes it. A run that was stopped (ctx is
// done, or it called Unfinished) or whose last page failed skips the
// ANALYZE of a freshly filled copy.
func (s *Postgres) Close(ctx context.Context) error {
	s.analyzeFresh(ctx)
	return s.sess.Release(ctx, "")
}

// explain names the copy in a lock timeout or a page deadline (limits.go).
func (s *Postgres) explain(ctx context.Context, err error) error {
	return Explain(ctx, s.conn, s.cfg, []string{s.table.String()}, err)
}

func (s *Postgres) qualified() string { return pgutil.Qualified(s.table.Schema, s.table.Name) }

// Prepare creates the copy from the source's column types when it does not
// exist, and otherwise checks that it has every column and a unique index on
// the key.
func (s *Postgres) Prepare(ctx context.Context, cols []page.Column) error {
	return s.explain(ctx, s.prepare(ctx, cols))
}

func (s *Postgres) prepare(ctx context.Context, cols []page.Column) error {
	exists := true
	var err error
	if !s.trusted {
		if exists, err = s.Check(ctx, cols); err != nil {
			return err
		}
	}
	if !exists {
		if err := s.create(ctx, cols); err != nil {
			return err
		}
	} else if _, err := SyncEnumLabels(ctx, s.conn, s.srcTypes); err != nil {
		return fmt.Errorf("sink table %s: %w", s.table, err)
	}
	s.cols = cols
	// What an earlier run read under the same fingerprint, once; else
	// read now, after any DDL above.
	s.known = &Known{}
	if s.given != nil {
		*s.known = *s.given // its maps are never written to
	}
	s.given = nil
	if s.known.types == nil {
		if s.known.types, err = s.columnTypes(ctx); err != nil {
			return err
		}
	}
	s.copyTypes = s.known.types
	s.build()
	s.prepareDurability(ctx)
	return s.prepareFast(ctx, cols)
}

// Check verifies an existing copy against the source columns without
// changing anything; exists is false when the table is still to be created.
// Every column the copy lacks or cannot hold exactly is reported at once, in
// one config error; then the key needs a unique index and NOT NULL columns.
func (s *Postgres) Check(ctx context.Context, cols []page.Column) (exists bool, err error) {
	exists, problems, err := s.problems(ctx, cols)
	if err != nil || !exists {
		return exists, err
	}
	if len(problems) > 0 {
		return true, s.problemsError(problems)
	}
	if err := s.checkKey(ctx); err != nil {
		return true, err
	}
	return true, s.checkKeyNotNull(ctx)
}

// problemsError is every problem of the copy in one config error.
func (s *Postgres) problemsError(problems []string) error {
	return s.cfg.Errorf("sink.table", "%s cannot hold the source's rows exactly: %s; fix the copy, or drop it so syncd creates it with the source's types",
		s.table, strings.Join(problems, "; "))
}

// problems lists what keeps an existing copy from holding the source's rows
// exactly: missing columns, types that cannot hold the source's values, and
// the copy's own objects that reject or rewrite rows (copycheck.go).
func (s *Postgres) problems(ctx context.Context, cols []page.Column) (exists bool, problems []string, err error) {
	existing, err := s.columns(ctx)
	if err != nil {
		return false, nil, err
	}
	if len(existing) == 0 {
		return false, nil, nil
	}
	for _, col := range cols {
		have, ok := existing[col.Name]
		if !ok {
			problems = append(problems, fmt.Sprintf("column %q of the source is missing (add it as %s)", col.Name, col.Type))
			continue
		}
		if ok, why := holds(col.Type, have); !ok {
			problems = append(problems, fmt.Sprintf("column %q is %s but %s in the source: %s (ALTER it to %s)", col.Name, have, col.Type, why, col.Type))
		}
	}
	more, err := s.copyProblems(ctx, cols)
	if err != nil {
		return true, nil, err
	}
	return true, append(problems, more...), nil
}

// checkKeyNotNull refuses a copy whose key columns allow NULL: a unique
// index allows many NULLs, so ON CONFLICT would never match such a row.
func (s *Postgres) checkKeyNotNull(ctx context.Context) error {
	rows, err := s.conn.Query(ctx, `
SELECT a.attname
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND a.attname = ANY($3::text[])
  AND a.attnum > 0 AND NOT a.attisdropped AND NOT a.attnotnull
ORDER BY a.attnum`, s.table.Schema, s.table.Name, s.cfg.Sink.Key)
	if err != nil {
		return fmt.Errorf("read key columns of sink table %s: %w", s.table, err)
	}
	nullable, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read key columns of sink table %s: %w", s.table, err)
	}
	if len(nullable) == 0 {
		return nil
	}
	names, fixes := make([]string, len(nullable)), make([]string, len(nullable))
	for i, k := range nullable {
		names[i] = fmt.Sprintf("%q", k)
		fixes[i] = "ALTER TABLE " + s.qualified() + " ALTER COLUMN " + pgutil.Ident(k) + " SET NOT NULL"
	}
	return s.cfg.KeyErrorf("key column %s of the copy %s (source %s) allows NULL, and a unique index lets any number of NULL keys in, so such rows would be added again on every run; run %s on the sink, or choose NOT NULL key columns",
		strings.Join(names, ", "), s.table, s.cfg.Name, strings.Join(fixes, "; "))
}

func (s *Postgres) columns(ctx context.Context) (map[string]string, error) {
	rows, err := s.conn.Query(ctx, `
SELECT a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r','p')
  AND a.attnum > 0 AND NOT a.attisdropped`, s.table.Schema, s.table.Name)
	if err != nil {
		return nil, fmt.Errorf("describe sink table %s: %w", s.table, err)
	}
	out := map[string]string{}
	var name, typ string
	_, err = pgx.ForEachRow(rows, []any{&name, &typ}, func() error {
		out[name] = typ
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("describe sink table %s: %w", s.table, err)
	}
	return out, nil
}

// columnTypes reads the type OID of each column of the copy.
func (s *Postgres) columnTypes(ctx context.Context) (map[string]uint32, error) {
	rows, err := s.conn.Query(ctx, `
SELECT a.attname, a.atttypid::int8
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped`, s.table.Schema, s.table.Name)
	if err != nil {
		return nil, fmt.Errorf("read the column types of sink table %s: %w", s.table, err)
	}
	out := map[string]uint32{}
	var name string
	var oid int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &oid}, func() error {
		out[name] = uint32(oid)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the column types of sink table %s: %w", s.table, err)
	}
	return out, nil
}

// createSQL is the CREATE TABLE of the copy: the source's columns and
// types (generated columns become plain ones), NOT NULL where the source has
// it, and a primary key on sink.key.
func (s *Postgres) createSQL(cols []page.Column) string {
	var defs []string
	for _, col := range cols {
		d := pgutil.Ident(col.Name) + " " + col.Type
		if col.NotNull || slices.Contains(s.cfg.Sink.Key, col.Name) {
			d += " NOT NULL"
		}
		defs = append(defs, d)
	}
	defs = append(defs, "PRIMARY KEY ("+pgutil.IdentList("", s.cfg.Sink.Key)+")")
	return "CREATE TABLE IF NOT EXISTS " + s.qualified() + " (\n  " + strings.Join(defs, ",\n  ") + "\n)"
}

// create makes the copy in one transaction: the schemas and types it needs
// that the sink lacks, then the table. Enum labels the sink's existing enums
// lack are added first, each on its own.
func (s *Postgres) create(ctx context.Context, cols []page.Column) error {
	if err := s.createSchema(ctx); err != nil {
		return err
	}
	plan, err := planTypes(ctx, s.conn, s.srcTypes, false, s.cfg.Sink.CreateExtensions)
	if err != nil {
		return err
	}
	if len(plan.problems) > 0 {
		return s.cfg.Errorf("sink.table", "cannot create the copy %s (source %s): %s", s.table, s.cfg.Name, strings.Join(plan.problems, "; "))
	}
	for _, q := range plan.labels {
		if _, err := s.conn.Exec(ctx, q); err != nil {
			return s.createError(ctx, q, err)
		}
	}
	stmts := append(plan.creates, s.createSQL(cols))
	err = pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error {
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", statement(q), err)
			}
		}
		// CREATE TABLE IF NOT EXISTS skips any relation of the name: a
		// view or a sequence there would take the pages (Check found no
		// table's columns under the name). Refused inside the
		// transaction, so that the types it created are rolled back too.
		var kind string
		if err := tx.QueryRow(ctx, "SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)", s.qualified()).Scan(&kind); err != nil {
			return fmt.Errorf("read what holds %s: %w", s.table, err)
		}
		if kind != "r" && kind != "p" {
			return heldName("rel " + kind)
		}
		return nil
	})
	var held heldName
	if errors.As(err, &held) {
		return s.cfg.Errorf("sink.table", "%s", s.holderProblem(string(held)))
	}
	if err != nil {
		return s.createError(ctx, "", err)
	}
	return nil
}

// heldName is what holds the copy's name instead of a table (see
// holderProblem), ending the transaction that would have created it.
type heldName string

func (h heldName) Error() string { return "the name is held: " + string(h) }

// schemaSQL is the CREATE SCHEMA of the copy's schema when the sink lacks
// it, else "": a copy is created in its schema (copy.orders, or every copy
// of a pattern source such as pagila_copy.*) whether or not it exists.
func (s *Postgres) schemaSQL(ctx context.Context) (string, error) {
	var found bool
	if err := s.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, s.table.Schema).Scan(&found); err != nil {
		return "", fmt.Errorf("read schema %s in the sink: %w", s.table.Schema, err)
	}
	if found {
		return "", nil
	}
	return "CREATE SCHEMA IF NOT EXISTS " + pgutil.Ident(s.table.Schema), nil
}

// createSchema creates the copy's schema when the sink lacks it, in a
// statement of its own: the copies of a pattern source share the schema,
// and one created by another session meanwhile is not an error (two
// concurrent CREATE SCHEMA IF NOT EXISTS can still collide on the catalog's
// unique index, which is ignored here).
func (s *Postgres) createSchema(ctx context.Context) error {
	q, err := s.schemaSQL(ctx)
	if err != nil || q == "" {
		return err
	}
	_, err = s.conn.Exec(ctx, q)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P06") {
		return nil
	}
	if err != nil {
		return s.createError(ctx, q, err)
	}
	return nil
}

// statement is a DDL statement for an error message: whole, on one line
// (each line break and the indent around it becomes one space, none after
// an opening or before a closing parenthesis), so that the message names
// exactly what failed and the reader can run it by hand.
func statement(q string) string {
	lines := strings.Split(q, "\n")
	var b strings.Builder
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if i > 0 && l != "" && b.Len() > 0 && !strings.HasSuffix(b.String(), "(") && !strings.HasPrefix(l, ")") {
			b.WriteByte(' ')
		}
		b.WriteString(l)
	}
	return b.String()
}

// createError explains a failed creation: with the grants the sink role
// lacks when PostgreSQL refused a privilege, and otherwise with the
// server's error and how to create the copy by hand.
func (s *Postgres) createError(ctx context.Context, stmt string, err error) error {
	if stmt != "" {
		err = fmt.Errorf("%s: %w", statement(stmt), err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		if missing, perr := s.privilegeProblems(ctx, false); perr == nil && len(missing) > 0 {
			return fmt.Errorf("create sink table %s: %w; %s", s.table, err, strings.Join(missing, "; "))
		}
	}
	return fmt.Errorf("create sink table %s: %w; fix that, or create the copy by hand (same columns and types as the source, primary key on %s)", s.table, err, strings.Join(s.cfg.Sink.Key, ", "))
}

// checkKey requires a unique index on exactly the key columns, which
// INSERT ... ON CONFLICT needs.
func (s *Postgres) checkKey(ctx context.Context) error {
	var ok bool
	err := s.conn.QueryRow(ctx, `
SELECT EXISTS (
  SELECT 1 FROM pg_index i
  JOIN pg_class c ON c.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = $1 AND c.relname = $2 AND i.indisunique AND i.indisvalid
    AND i.indpred IS NULL AND i.indexprs IS NULL
    AND (SELECT array_agg(a.attname::text ORDER BY a.attname)
         FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum = ANY(i.indkey)) = (SELECT array_agg(k ORDER BY k) FROM unnest($3::text[]) k))`,
		s.table.Schema, s.table.Name, s.cfg.Sink.Key).Scan(&ok)
	if err != nil {
		return fmt.Errorf("read indexes of sink table %s: %w", s.table, err)
	}
	if !ok {
		return s.cfg.Errorf("sink.key", "%s has no primary key or unique index on (%s), which the upsert needs; add one", s.table, strings.Join(s.cfg.Sink.Key, ", "))
	}
	return nil
}

// build prepares the statements of a page: COPY into a session-local staging
// table, then one upsert that only overwrites a stored row with one whose
// cursor is not older, and only when a value differs.
func (s *Postgres) build() {
	names := make([]string, len(s.cols))
	for i, c := range s.cols {
		names[i] = c.Name
	}
	list := pgutil.IdentList("", names)
	s.copySQL = "COPY pg_temp.syncd_stage (" + list + ") FROM STDIN"
	// Key columns are set too: ON CONFLICT matches keys that are equal but
	// spelled differently (numeric 1.0 and 1.00), and the copy must hold
	// the source's spelling. Without other columns there is nothing to
	// update.
	var sets []string
	hasValues := false
	for _, n := range names {
		hasValues = hasValues || !slices.Contains(s.cfg.Sink.Key, n)
		sets = append(sets, pgutil.Ident(n)+" = EXCLUDED."+pgutil.Ident(n))
	}
	if !hasValues {
		sets = nil
	}
	target := s.qualified()
	sel := "SELECT " + list + " FROM pg_temp.syncd_stage"
	if cur := s.cfg.Source.Cursor; len(cur) > 0 && !slices.Contains(s.cfg.Sink.Key, cur[len(cur)-1]) {
		// The key is not the unique tie-breaker: keep the newest row per key so
		// ON CONFLICT never meets the same key twice in one statement.
		sel = "SELECT DISTINCT ON (" + pgutil.IdentList("", s.cfg.Sink.Key) + ") " + list +
			" FROM pg_temp.syncd_stage ORDER BY " + pgutil.IdentList("", s.cfg.Sink.Key) + ", " +
			descList(s.cfg.Source.Cursor)
	}
	s.deleteSQL = ""
	if deleted := s.deletedPredicate("s."); deleted != "" {
		// Soft deletes: a row flagged deleted is removed from the copy
		// (unless the copy holds a newer version) and never upserted.
		s.deleteSQL = "DELETE FROM " + target + " AS t USING (" + sel + ") AS s WHERE (" + pgutil.IdentList("t.", s.cfg.Sink.Key) + ") = (" +
			pgutil.IdentList("s.", s.cfg.Sink.Key) + ") AND " + deleted + " AND " + s.notNewer("t.", "s.")
		sel = "SELECT " + list + " FROM (" + sel + ") AS s WHERE NOT " + deleted
	}
	if len(sets) > 0 {
		// Rows the copy already holds as they are (the lookback's re-reads,
		// a page applied again after a crash) are left out before the
		// upsert: ON CONFLICT DO UPDATE locks every conflicting row before
		// it evaluates its WHERE, and each lock is a WAL record and a
		// dirtied page, for a row it then leaves alone. A scalar subquery
		// is one probe of the key's index per staged row whatever the
		// page's size, where NOT EXISTS may be planned as a hash join over
		// the whole copy. A row the check cannot judge (NULL) goes on to
		// the upsert, whose WHERE still decides.
		sel = "SELECT " + pgutil.IdentList("s.", names) + " FROM (" + sel + ") AS s WHERE (SELECT " +
			s.notNewer("x.", "s.") + " AND (" + s.differs("x.", "s.") + ") FROM " + target + " AS x WHERE (" +
			pgutil.IdentList("x.", s.cfg.Sink.Key) + ") = (" + pgutil.IdentList("s.", s.cfg.Sink.Key) + ")) IS NOT FALSE"
	}
	q := "INSERT INTO " + target + " AS t (" + list + ") " + sel + " ON CONFLICT (" + pgutil.IdentList("", s.cfg.Sink.Key) + ") "
	if len(sets) == 0 {
		q += "DO NOTHING"
	} else {
		q += "DO UPDATE SET " + strings.Join(sets, ", ") +
			" WHERE " + s.notNewer("t.", "EXCLUDED.") +
			" AND (" + s.differs("t.", "EXCLUDED.") + ")"
	}
	s.upsertSQL = q
	s.stageReady = false
}

// Apply upserts one page in one transaction, within sink.page_timeout.
// When ctx ends or the deadline passes, the statement in flight is
// cancelled on the server and the page rolls back.
func (s *Postgres) Apply(ctx context.Context, p page.Page) (Result, error) {
	if len(p.Rows) == 0 {
		return Result{}, nil
	}
	if ctx.Err() != nil {
		return Result{}, fmt.Errorf("apply page to %s: not started: %w", s.table, context.Cause(ctx))
	}
	pctx, cancel := PageContext(ctx, s.cfg)
	defer cancel()
	res, err := s.apply(pctx, p)
	if err != nil {
		s.unfinished = true
		return res, s.explain(pctx, err)
	}
	return res, nil
}

func (s *Postgres) apply(ctx context.Context, p page.Page) (Result, error) {
	if res, ok, err := s.applyFast(ctx, p); ok || err != nil {
		return res, err
	}
	var res Result
	err := pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error {
		if err := s.pageSettings(ctx, tx); err != nil {
			return err
		}
		if !s.stageReady {
			if err := s.createStage(ctx, tx); err != nil {
				return err
			}
		}
		encode(&s.buf, p)
		if _, err := tx.Conn().PgConn().CopyFrom(ctx, &s.buf, s.stageCopySQL(p)); err != nil {
			return fmt.Errorf("copy page into staging: %w", err)
		}
		if s.deleteSQL != "" {
			tag, err := tx.Exec(ctx, s.deleteSQL)
			if err != nil {
				return fmt.Errorf("delete soft-deleted rows: %w", err)
			}
			res.Deleted = tag.RowsAffected()
		}
		tag, err := tx.Exec(ctx, s.upsertSQL)
		if err != nil {
			return fmt.Errorf("upsert page: %w", err)
		}
		res.Written = tag.RowsAffected()
		if q := s.markSQL(p); q != "" {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("record the page in the syncd catalog: %w", err)
			}
		}
		return s.durableCommit(ctx, tx)
	})
	if err != nil {
		s.stageReady = false
		return Result{}, fmt.Errorf("apply page to %s: %w", s.table, err)
	}
	s.stageReady = true
	return res, s.afterCommit(ctx)
}

// createStage creates the session's staging table, shaped like the copy.
func (s *Postgres) createStage(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, s.stageSQL()); err != nil {
		return fmt.Errorf("create staging table: %w", err)
	}
	return nil
}

func descList(names []string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = pgutil.Ident(n) + " DESC"
	}
	return strings.Join(parts, ", ")
}

// exactEquality lists the built-in types (and arrays of them) whose =
// holds exactly when their text output is the same: the upsert compares
// them as they are, which is cheap. Every other type is compared through
// its text output, because its = also calls other values equal: numeric
// 1.0 and 1.00, float8 0 and -0, interval '1 day' and '24 hours', jsonb
// {"a": 1.0} and {"a": 1.00}, citext 'Abc' and 'abc', and arrays,
// composites, ranges and domains built on them (json, xml and the
// geometric types have no = at all). A type whose equality is not known
// is compared by text too: a needless cast costs a little on changed rows
// only, a missing one leaves the copy wrong.
var exactEquality = map[uint32]bool{
	pgtype.BoolOID: true, pgtype.ByteaOID: true, pgtype.QCharOID: true, pgtype.NameOID: true,
	pgtype.Int2OID: true, pgtype.Int4OID: true, pgtype.Int8OID: true, pgtype.OIDOID: true,
	pgtype.TextOID: true, pgtype.VarcharOID: true, pgtype.BPCharOID: true, pgtype.UUIDOID: true,
	pgtype.DateOID: true, pgtype.TimeOID: true, pgtype.TimetzOID: true, pgtype.TimestampOID: true, pgtype.TimestamptzOID: true,
	moneyOID: true, pgtype.InetOID: true, pgtype.CIDROID: true, pgtype.MacaddrOID: true, pgtype.Macaddr8OID: true,
	pgtype.BitOID: true, pgtype.VarbitOID: true,
	pgtype.Int4rangeOID: true, pgtype.Int8rangeOID: true, pgtype.DaterangeOID: true, pgtype.TsrangeOID: true, pgtype.TstzrangeOID: true,

	pgtype.BoolArrayOID: true, pgtype.ByteaArrayOID: true, pgtype.QCharArrayOID: true, pgtype.NameArrayOID: true,
	pgtype.Int2ArrayOID: true, pgtype.Int4ArrayOID: true, pgtype.Int8ArrayOID: true, pgtype.OIDArrayOID: true,
	pgtype.TextArrayOID: true, pgtype.VarcharArrayOID: true, pgtype.BPCharArrayOID: true, pgtype.UUIDArrayOID: true,
	pgtype.DateArrayOID: true, pgtype.TimeArrayOID: true, pgtype.TimetzArrayOID: true, pgtype.TimestampArrayOID: true, pgtype.TimestamptzArrayOID: true,
	moneyOID + 1: true, pgtype.InetArrayOID: true, pgtype.CIDRArrayOID: true, pgtype.MacaddrArrayOID: true, pgtype.Macaddr8OID + 1: true,
	pgtype.BitArrayOID: true, pgtype.VarbitArrayOID: true,
	pgtype.Int4rangeArrayOID: true, pgtype.Int8rangeArrayOID: true, pgtype.DaterangeArrayOID: true, pgtype.TsrangeArrayOID: true, pgtype.TstzrangeArrayOID: true,
}

// moneyOID is the built-in money type (money[] is moneyOID + 1, as
// macaddr8[] is pgtype.Macaddr8OID + 1).
const moneyOID = 790

// differs is the condition, on the stored row (alias stored) and the
// incoming one (incoming), that some value differs: IS DISTINCT FROM,
// column by column, tells two values apart exactly when their text output
// differs, so that a row is rewritten whenever the copy does not hold the
// source's values as the source prints them (exactEquality). The key
// columns count too: ON CONFLICT matches keys by =.
//
// Both the source's type and the copy's must have an exact =: a copy
// column of another type (holds: an integer into numeric, varchar into
// text) is compared by its own type's rule. An unbounded bpchar is
// compared by its text output with its trailing blanks, which = and a
// cast to text ignore (a bpchar(n) stores every value padded to n); an
// array of them by the array's text, which keeps them.
//
// The comparisons are ORed, the cursor's columns first and those through
// text last: a row whose cursor moved (an exact timestamp or integer,
// usually) is found to differ before any value is printed as text.
func (s *Postgres) differs(stored, incoming string) string {
	var cheap, costly []string
	cols := slices.Clone(s.cols)
	slices.SortStableFunc(cols, func(a, b page.Column) int {
		return cmp.Compare(s.cursorRank(a.Name), s.cursorRank(b.Name))
	})
	for _, c := range cols {
		col := pgutil.Ident(c.Name)
		a, b := stored+col, incoming+col
		copyType, ok := s.copyTypes[c.Name]
		switch {
		case c.Type == "bpchar" && (!ok || copyType == pgtype.BPCharOID):
			costly = append(costly, "textin(bpcharout("+a+")) IS DISTINCT FROM textin(bpcharout("+b+"))")
		case !exactEquality[c.TypeOID] || ok && !exactEquality[copyType] || c.Type == "bpchar[]":
			costly = append(costly, a+"::text IS DISTINCT FROM "+b+"::text")
		default:
			cheap = append(cheap, a+" IS DISTINCT FROM "+b)
		}
	}
	return strings.Join(append(cheap, costly...), " OR ")
}

// Differs is differs for a caller that writes the copy itself (a resumed
// first load's upsert of a chunk): the condition, on the stored row (alias
// stored, such as "t.") and the incoming one, that some value differs. It
// needs the columns Prepare read.
func (s *Postgres) Differs(stored, incoming string) string { return s.differs(stored, incoming) }

// cursorRank orders the cursor columns first, in cursor order.
func (s *Postgres) cursorRank(name string) int {
	if i := slices.Index(s.cfg.Source.Cursor, name); i >= 0 {
		return i
	}
	return len(s.cfg.Source.Cursor)
}
