package source

import (
	"strings"
	"testing"

	"github.com/syncd/syncd/config"
)

// A pattern's cursor gets the table's primary key appended only where its
// last column is not unique, and only when that makes it unique.
func TestTieBreak(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cursor  []string
		columns []string
		note    string
		keys    tableKeys
		want    string
	}{
		{"one column key", []string{"last_update"}, nil, "", tableKeys{[]string{"film_id"}, [][]string{{"film_id"}}}, "last_update,film_id"},
		{"composite key", []string{"last_update"}, nil, "", tableKeys{[]string{"actor_id", "film_id"}, [][]string{{"actor_id", "film_id"}}}, "last_update,actor_id,film_id"},
		{"key partly in the cursor", []string{"payment_date"}, nil, "", tableKeys{[]string{"payment_date", "payment_id"}, [][]string{{"payment_date", "payment_id"}}}, "payment_date,payment_id"},
		{"already unique", []string{"updated_at", "id"}, nil, "", tableKeys{[]string{"id"}, [][]string{{"id"}}}, "updated_at,id"},
		{"unique by another index", []string{"updated_at", "code"}, nil, "", tableKeys{[]string{"id"}, [][]string{{"id"}, {"code"}}}, "updated_at,code"},
		{"no primary key", []string{"last_update"}, nil, "", tableKeys{nil, [][]string{{"code"}}}, "last_update"},
		{"key in the cursor but not last", []string{"id", "last_update"}, nil, "", tableKeys{[]string{"id"}, [][]string{{"id"}}}, "id,last_update"},
		{"key not selected", []string{"last_update"}, []string{"last_update", "name"}, "", tableKeys{[]string{"id"}, [][]string{{"id"}}}, "last_update"},
		{"a tables entry's cursor", []string{"last_update"}, nil, "set by tables.film.cursor", tableKeys{[]string{"film_id"}, [][]string{{"film_id"}}}, "last_update"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &config.Config{CursorNote: tc.note}
			m.Source.Cursor, m.Source.Columns = tc.cursor, tc.columns
			before := strings.Join(tc.cursor, ",")
			tieBreak(m, tc.keys)
			if got := strings.Join(m.Source.Cursor, ","); got != tc.want {
				t.Fatalf("cursor %s, want %s", got, tc.want)
			}
			if appended := m.CursorNote == "primary key appended as the tie-breaker"; appended != (tc.want != before) {
				t.Fatalf("note %q after %s -> %s", m.CursorNote, before, tc.want)
			}
			if strings.Join(tc.cursor, ",") != before {
				t.Fatal("the pattern's cursor was changed in place")
			}
		})
	}
}
