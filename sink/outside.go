package sink

import (
	"fmt"
	"strings"

	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/source"
)

// notNewer is the condition under which a stored copy row (prefix stored)
// may be replaced by an incoming row (prefix incoming): its cursor is not
// newer. Two rows whose cursors cannot be ordered, because one of them has
// a NULL cursor column, count as not newer: a NULL cursor row is read by
// the run's extra pass as the source holds it now, and a row that gets a
// cursor value after being copied with NULL must replace the copy. A stored
// row whose first cursor column lies past the sink's clock plus
// source.ClockAllowance ('infinity', a typo'd year) is not newer either:
// once the source corrects the stamp, the corrected row replaces it.
func (s *Postgres) notNewer(stored, incoming string) string {
	cur := s.cfg.Source.Cursor
	if len(cur) == 0 {
		return "true" // mode: compare: the source's row is always the one to keep
	}
	cond := "(" + pgutil.IdentList(stored, cur) + ") <= (" + pgutil.IdentList(incoming, cur) + ") IS NOT FALSE"
	if s.temporalCursor() {
		cond += fmt.Sprintf(" OR %s%s > now() + interval '%d microseconds'", stored, pgutil.Ident(cur[0]), source.ClockAllowance.Microseconds())
	}
	return "(" + cond + ")"
}

// temporalCursor is true when the first cursor column is a date or a
// timestamp.
func (s *Postgres) temporalCursor() bool {
	for _, c := range s.cols {
		if c.Name == s.cfg.Source.Cursor[0] {
			return c.Type == "date" || strings.HasPrefix(c.Type, "timestamp")
		}
	}
	return false
}
