package sink

import (
	"github.com/syncd/syncd/internal/pgutil"
)

// DeletedPredicate is the SQL condition, over column name (already
// qualified and quoted), that a row is soft-deleted: a boolean flag is
// deleted when true, any other type (a timestamp, typically) when not NULL.
func DeletedPredicate(name string, typ string) string {
	if typ == "boolean" {
		return name + " IS TRUE"
	}
	return name + " IS NOT NULL"
}

// deletedPredicate is the soft-delete condition over alias prefix ("s."),
// or "" when the copy keeps deleted rows (or there is no deleted column).
func (s *Postgres) deletedPredicate(prefix string) string {
	d := s.cfg.Source.DeletedColumn
	if d == "" || s.cfg.Sink.KeepDeleted {
		return ""
	}
	typ := ""
	for _, c := range s.cols {
		if c.Name == d {
			typ = c.Type
		}
	}
	return DeletedPredicate(prefix+pgutil.Ident(d), typ)
}
