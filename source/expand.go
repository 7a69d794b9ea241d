package source

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgpool"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/internal/sourceerr"
)

// Skipped is a table a pattern source matched but cannot sync, and why.
type Skipped struct {
	Name   string // the source name it would have (NAME.TABLE)
	Table  config.Table
	Reason string
	// Code is the reason as one of the Skip* values (the label "reason"
	// of syncd_pattern_table_skipped).
	Code string
}

// Why a pattern source skips a table: a small fixed set, for the metric
// syncd_pattern_table_skipped and status.
const (
	SkipNoCursorColumn  = "no_cursor_column"  // a source.cursor column is not in the table
	SkipCursorNotUsable = "cursor_not_usable" // a cursor column of a type syncd cannot page by, or no unique last column
	SkipNoPrimaryKey    = "no_primary_key"    // no primary key and no sink.key
	SkipCopyName        = "copy_name"         // it has the name of another matched table's copy
	SkipNameTaken       = "name_taken"        // its source name is another source's (daemon)
	SkipOther           = "other"             // any other config problem of the table (the message says)
)

// SkipCode classifies a config problem (a config.FieldError's key and
// message) that makes a pattern skip a table.
func SkipCode(key, msg string) string {
	switch {
	case key == "source.cursor" && strings.Contains(msg, "does not exist"):
		return SkipNoCursorColumn
	case key == "source.cursor":
		return SkipCursorNotUsable
	}
	return SkipOther
}

func (s Skipped) String() string {
	return fmt.Sprintf("source %s (table %s) skipped: %s", s.Name, s.Table, s.Reason)
}

// Expansion is what matching a pattern source against its catalog found.
type Expansion struct {
	// Members are the sources of the tables that can be synced, by name.
	Members []*config.Config
	// Skipped are the matched tables that cannot, with the reason.
	Skipped []Skipped
	// Warnings name the tables entries that match no table of the
	// catalog, each at its file and line.
	Warnings []string
	// Described counts the tables this match described: with a
	// MatchCache, only those whose catalog changed since the last match.
	Described int
	// Tables are the members' tables as the match described them, by
	// member name: validate checks them without describing them again.
	// Shared with the cache: clone one before changing it.
	Tables map[string]*Table
}

// Expand matches the pattern source c against the source catalog (ordinary
// and partitioned tables of the pattern's schema, not partitions) and
// returns one source per matched table that can be synced, sorted by name,
// and the matched tables that cannot (a cursor column missing, no key, ...)
// with the reason. An error means the catalog could not be read.
//
// With a cache (the daemon keeps one per pattern source), the match reads
// the catalog fingerprint of every table of the schema in one round trip
// and describes only the tables that are new or whose fingerprint changed
// since the last match; the others keep what that match found (the same
// *config.Config). A match of an unchanged catalog describes no table.
// The session comes from the context's pool when it carries one.
func Expand(ctx context.Context, c *config.Config, cache *MatchCache) (Expansion, error) {
	return expand(ctx, c, "", cache)
}

// ExpandAll is Expand with no cache, for a command that matches once.
//
// Each table's source takes the pattern's settings and its tables entry's.
// A cursor from source.cursor whose last column is not unique in a table
// gets the table's primary key appended as the tie-breaker (CursorNote
// says so): [last_update] becomes [last_update, film_id] in film and
// [last_update, actor_id, film_id] in film_actor.
func ExpandAll(ctx context.Context, c *config.Config) (Expansion, error) {
	return expand(ctx, c, "", nil)
}

// ExpandTable is ExpandAll for the pattern's table named table only (the
// member NAME.TABLE of `run --once --source`): the other tables are
// listed, not described, so one table of a pattern of hundreds costs a few
// catalog queries, not a few per table of the schema. A table it does not
// match gives no member and no skipped entry.
func ExpandTable(ctx context.Context, c *config.Config, table string) (Expansion, error) {
	return expand(ctx, c, table, nil)
}

func expand(ctx context.Context, c *config.Config, only string, cache *MatchCache) (Expansion, error) {
	sess, err := OpenSession(ctx, c)
	if err != nil {
		return Expansion{}, err
	}
	e, err := expandOn(ctx, sess.Conn, c, only, cache)
	if err != nil {
		pgpool.Broken(ctx, sess.Conn)
	}
	// A session that cannot be given back is closed: nothing to report.
	_ = sess.Release(ctx, "")
	return e, err
}

// expandOn is expand on conn.
func expandOn(ctx context.Context, conn *pgx.Conn, c *config.Config, only string, cache *MatchCache) (Expansion, error) {
	pattern := c.Source.Ident
	var (
		names []string
		fps   map[string]string
		err   error
	)
	if cache != nil {
		names, fps, err = pgutil.TableFingerprints(ctx, conn, pattern.Schema)
	} else {
		names, err = listTables(ctx, conn, pattern.Schema)
	}
	if err != nil {
		return Expansion{}, fmt.Errorf("list the tables of schema %s for source %s (%s): %w", pattern.Schema, c.Name, c.Source.Table, err)
	}
	e := Expansion{Warnings: c.Unmatched(names)}
	// A matched table that is the copy of another matched table (public.*
	// to public.*_copy, source and sink in one database) is not copied
	// again: it is skipped, and says so, until it is excluded.
	copyOf := map[string]string{}
	for _, name := range names {
		t := config.Table{Schema: pattern.Schema, Name: name}
		if c.Match(t) {
			if sink := c.SinkFor(t); sink != t.String() {
				copyOf[sink] = t.String()
			}
		}
	}
	last := cache.last(c)
	found := map[string]matched{}
	// The unique keys of every table of the schema in one read, not one
	// per table, and only when a table is described: a schema of hundreds
	// of tables is matched in one round trip, and an unchanged one in none.
	var keys map[string]tableKeys
	for _, name := range names {
		t := config.Table{Schema: pattern.Schema, Name: name}
		if !c.Match(t) || only != "" && name != only {
			continue
		}
		if orig, ok := copyOf[t.String()]; ok {
			e.Skipped = append(e.Skipped, Skipped{Name: config.MemberName(c.Name, name), Table: t, Code: SkipCopyName,
				Reason: fmt.Sprintf("it has the name of the copy of %s (sink.table %s); if it is that copy, add it to source.exclude", orig, c.Sink.Table)})
			continue
		}
		m, ok := last[name]
		if !ok || m.fp != fps[name] {
			if keys == nil {
				if keys, err = schemaKeys(ctx, conn, pattern.Schema); err != nil {
					return Expansion{}, err
				}
			}
			if m, err = matchTable(ctx, conn, c, t, keys[name]); err != nil {
				return Expansion{}, err
			}
			m.fp = fps[name]
			e.Described++
		}
		found[name] = m
		if m.member != nil {
			e.Members = append(e.Members, m.member)
			if m.table != nil {
				if e.Tables == nil {
					e.Tables = map[string]*Table{}
				}
				e.Tables[m.member.Name] = m.table
			}
		} else {
			e.Skipped = append(e.Skipped, m.skipped)
		}
	}
	cache.store(c, found)
	return e, nil
}

// listTables lists the ordinary and partitioned tables of schema (not the
// partitions), sorted.
func listTables(ctx context.Context, conn *pgx.Conn, schema string) ([]string, error) {
	rows, err := conn.Query(ctx, `
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r','p') AND NOT c.relispartition
ORDER BY c.relname`, schema)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// matchTable describes table t of the pattern source c, whose keys are k:
// its source, or why it is skipped. An error means the catalog could not
// be read.
func matchTable(ctx context.Context, conn *pgx.Conn, c *config.Config, t config.Table, k tableKeys) (matched, error) {
	skip := func(code, reason string) (matched, error) {
		return matched{skipped: Skipped{Name: config.MemberName(c.Name, t.Name), Table: t, Reason: reason, Code: code}}, nil
	}
	m, err := c.ForTable(t, k.primary)
	if err != nil {
		code := SkipOther
		if len(k.primary) == 0 && len(c.Sink.Key) == 0 && len(c.Tables[t.Name].Key) == 0 {
			code = SkipNoPrimaryKey
		}
		return skip(code, err.Error())
	}
	tieBreak(m, k)
	described, err := Describe(ctx, conn, m)
	if err != nil {
		var fe *config.FieldError
		if !errors.As(err, &fe) {
			return matched{}, &sourceerr.SourceError{Source: m.Name, Err: err}
		}
		code := SkipCode(fe.Key, fe.Msg)
		if c.Mode == config.ModeAuto && (code == SkipNoCursorColumn || code == SkipCursorNotUsable) {
			// mode: auto syncs a table without a usable cursor by
			// comparing it whole, when a key identifies its rows.
			cm := m.AsCompare(fe.Msg)
			if ct, err := Describe(ctx, conn, cm); err == nil {
				return matched{member: cm, table: ct}, nil
			}
		}
		reason := fe.Key + ": " + fe.Msg
		if code == SkipNoCursorColumn || code == SkipCursorNotUsable {
			reason += fmt.Sprintf(" (exclude it with source.exclude, or give it a cursor under tables:, such as tables: {%s: {cursor: [...]}})", t.Name)
		}
		return skip(code, reason)
	}
	return matched{member: m, table: described}, nil
}

// tableKeys are a table's primary key and unique keys (each valid,
// non-partial, on columns only), column names in index order.
type tableKeys struct {
	primary []string
	unique  [][]string
}

// schemaKeys reads the unique keys of every table of schema, by table name.
func schemaKeys(ctx context.Context, conn *pgx.Conn, schema string) (map[string]tableKeys, error) {
	rows, err := conn.Query(ctx, `
SELECT c.relname::text, i.indisprimary,
       array_agg(a.attname::text ORDER BY k.ord)
FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, ord) ON true
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
WHERE n.nspname = $1 AND c.relkind IN ('r','p') AND NOT c.relispartition
  AND i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL
GROUP BY c.relname, i.indexrelid, i.indisprimary`, schema)
	if err != nil {
		return nil, fmt.Errorf("read the keys of the tables of schema %s: %w", schema, err)
	}
	out := map[string]tableKeys{}
	var (
		table   string
		primary bool
		cols    []string
	)
	_, err = pgx.ForEachRow(rows, []any{&table, &primary, &cols}, func() error {
		k := out[table]
		if primary {
			k.primary = slices.Clone(cols)
		}
		k.unique = append(k.unique, slices.Clone(cols))
		out[table] = k
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the keys of the tables of schema %s: %w", schema, err)
	}
	return out, nil
}

// tieBroken reports whether cursor ends in a unique column: a unique key
// made of cursor columns only includes its last one (as checkTieBreaker
// requires).
func tieBroken(cursor []string, unique [][]string) bool {
	last := cursor[len(cursor)-1]
	for _, key := range unique {
		if slices.Contains(key, last) && !slices.ContainsFunc(key, func(col string) bool { return !slices.Contains(cursor, col) }) {
			return true
		}
	}
	return false
}

// tieBreak appends the table's primary key columns the cursor lacks to
// m's cursor when its last column is not unique, so that one pattern
// cursor such as [last_update] fits every table with a primary key. A
// cursor the tables entry gives is taken as written.
func tieBreak(m *config.Config, k tableKeys) {
	cursor := m.Source.Cursor
	if m.CursorNote != "" || len(k.primary) == 0 || tieBroken(cursor, k.unique) {
		return
	}
	cursor = slices.Clone(cursor)
	for _, col := range k.primary {
		if !slices.Contains(cursor, col) {
			if len(m.Source.Columns) > 0 && !slices.Contains(m.Source.Columns, col) {
				return
			}
			cursor = append(cursor, col)
		}
	}
	if !tieBroken(cursor, k.unique) {
		return
	}
	m.Source.Cursor = cursor
	m.CursorNote = "primary key appended as the tie-breaker"
}

// PrimaryKey returns the primary key columns of t in key order, or nil.
func PrimaryKey(ctx context.Context, conn *pgx.Conn, t config.Table) ([]string, error) {
	rows, err := conn.Query(ctx, `
SELECT a.attname
FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, ord) ON true
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
WHERE n.nspname = $1 AND c.relname = $2 AND i.indisprimary
ORDER BY k.ord`, t.Schema, t.Name)
	if err != nil {
		return nil, fmt.Errorf("read the primary key of %s: %w", t, err)
	}
	key, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read the primary key of %s: %w", t, err)
	}
	return key, nil
}
