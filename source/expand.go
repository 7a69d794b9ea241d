package source

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/syncd/syncd/internal/sourceerr"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
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

// Expand matches the pattern source c against the source catalog (ordinary
// and partitioned tables of the pattern's schema, not partitions) and
// returns one source per matched table that can be synced, sorted by name,
// and the matched tables that cannot (a cursor column missing, no key, ...)
// with the reason. An error means the catalog could not be read.
func Expand(ctx context.Context, c *config.Config) ([]*config.Config, []Skipped, error) {
	conn, err := pgutil.Connect(ctx, c.Source.DSN, "source")
	if err != nil {
		return nil, nil, pgutil.Locate(c, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	pattern := c.Source.Ident
	rows, err := conn.Query(ctx, `
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r','p') AND NOT c.relispartition
ORDER BY c.relname`, pattern.Schema)
	if err != nil {
		return nil, nil, fmt.Errorf("list the tables of schema %s for source %s (%s): %w", pattern.Schema, c.Name, c.Source.Table, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, fmt.Errorf("list the tables of schema %s for source %s (%s): %w", pattern.Schema, c.Name, c.Source.Table, err)
	}
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
	var out []*config.Config
	var skipped []Skipped
	for _, name := range names {
		t := config.Table{Schema: pattern.Schema, Name: name}
		if !c.Match(t) {
			continue
		}
		skip := func(code, reason string) {
			skipped = append(skipped, Skipped{Name: config.MemberName(c.Name, name), Table: t, Reason: reason, Code: code})
		}
		if orig, ok := copyOf[t.String()]; ok {
			skip(SkipCopyName, fmt.Sprintf("it has the name of the copy of %s (sink.table %s); if it is that copy, add it to source.exclude", orig, c.Sink.Table))
			continue
		}
		key, err := PrimaryKey(ctx, conn, t)
		if err != nil {
			return nil, nil, err
		}
		m, err := c.ForTable(t, key)
		if err != nil {
			code := SkipOther
			if len(key) == 0 && len(c.Sink.Key) == 0 {
				code = SkipNoPrimaryKey
			}
			skip(code, err.Error())
			continue
		}
		if _, err := Describe(ctx, conn, m); err != nil {
			var fe *config.FieldError
			if !errors.As(err, &fe) {
				return nil, nil, &sourceerr.SourceError{Source: m.Name, Err: err}
			}
			code := SkipCode(fe.Key, fe.Msg)
			if c.Mode == config.ModeAuto && (code == SkipNoCursorColumn || code == SkipCursorNotUsable) {
				// mode: auto syncs a table without a usable cursor by
				// comparing it whole, when a key identifies its rows.
				cm := m.AsCompare(fe.Msg)
				if _, err := Describe(ctx, conn, cm); err == nil {
					out = append(out, cm)
					continue
				}
			}
			skip(code, fe.Key+": "+fe.Msg)
			continue
		}
		out = append(out, m)
	}
	return out, skipped, nil
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
