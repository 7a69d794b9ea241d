package source

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
)

// KeyError is an error from PostgreSQL that a config key caused: it names
// the file, the line and the key, and wraps the database's error (so that
// its class, and the retry decision, stay as they were).
type KeyError struct {
	File string
	Line int
	Key  string
	Err  error
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("%s:%d: %s: %v; fix %s", e.File, e.Line, e.Key, e.Err, e.Key)
}

func (e *KeyError) Unwrap() error { return e.Err }

var undefinedColumn = regexp.MustCompile(`column "?([^" ]+)"? does not exist`)

// Explain returns err with the config key of c that caused it, when err is
// an error from PostgreSQL that one did: an unknown column named in
// source.cursor, source.columns, source.deleted_column or sink.key, or an
// error in the SQL that source.where adds to the source's queries (a
// syntax error, an unknown column or function, a type mismatch). A
// connection that could not be made comes back as the *pgutil.ConnectError
// alone, at the line of its DSN key. Any other error comes back as it was.
func Explain(c *config.Config, err error) error {
	var ce *pgutil.ConnectError
	if errors.As(err, &ce) {
		// A connection that could not be made: the DSN's key says it all.
		return pgutil.Locate(c, err)
	}
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) {
		return err
	}
	var ke *KeyError
	if errors.As(err, &ke) {
		return err
	}
	key := ""
	where := strings.TrimSpace(c.Source.Where)
	switch {
	case pe.Code == "42703":
		col := ""
		if m := undefinedColumn.FindStringSubmatch(pe.Message); m != nil {
			col = m[1]
			if i := strings.LastIndexByte(col, '.'); i >= 0 {
				col = col[i+1:]
			}
		}
		for _, k := range []struct {
			key  string
			cols []string
		}{{"source.cursor", c.Source.Cursor}, {"source.columns", c.Source.Columns}, {"source.deleted_column", []string{c.Source.DeletedColumn}}, {"sink.key", c.Sink.Key}} {
			if col != "" && slices.Contains(k.cols, col) {
				key = k.key
				break
			}
		}
		if key == "" && where != "" {
			key = "source.where"
		}
	case where != "" && (strings.HasPrefix(pe.Code, "42") || strings.HasPrefix(pe.Code, "22")) && pe.Code != "42501" && pe.Code != "42P01":
		// Class 42 (syntax, undefined object, type mismatch) and 22 (data
		// exception, such as a bad literal) from a source with a where
		// clause; permissions (42501) and a missing table (42P01) are not
		// the filter's doing.
		key = "source.where"
	}
	if key == "" || c.Lines[key] == 0 {
		return err
	}
	return &KeyError{File: c.File, Line: c.Lines[key], Key: key, Err: err}
}
