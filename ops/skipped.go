package ops

import (
	"slices"
	"strings"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// SkippedTable is a table a pattern source matched but does not sync, as
// the last match recorded in the state file (run --once and the daemon
// record each match of a whole pattern).
type SkippedTable struct {
	Pattern string `json:"pattern"` // the pattern source
	Source  string `json:"source"`  // the name it would run under (NAME.TABLE)
	Table   string `json:"table"`
	// Reason is a short stable code (the label "reason" of
	// syncd_pattern_table_skipped): no_cursor_column, cursor_not_usable,
	// no_primary_key, copy_name, name_taken or other; Message says it in
	// words.
	Reason     string `json:"reason"`
	Message    string `json:"message"`
	RecordedAt string `json:"recorded_at"` // when a match recorded this list of skipped tables
}

// Skipped converts a match's skipped tables to what the state file keeps,
// sorted by source name.
func Skipped(skipped []source.Skipped) []watermark.SkippedTable {
	out := make([]watermark.SkippedTable, 0, len(skipped))
	for _, s := range skipped {
		out = append(out, watermark.SkippedTable{Source: s.Name, Table: s.Table.String(), Reason: s.Code, Message: s.Reason})
	}
	slices.SortFunc(out, func(a, b watermark.SkippedTable) int { return strings.Compare(a.Source, b.Source) })
	return out
}

// RecordMatch records in the state file the tables a whole match of
// pattern source name skipped (none: an empty record, which clears the
// last one).
func RecordMatch(store *watermark.Store, name string, at time.Time, skipped []watermark.SkippedTable) error {
	return store.PutPattern(name, watermark.Pattern{At: at.UTC(), Skipped: skipped})
}

// PatternsOf names the pattern sources cfgs come from: the pattern
// sources themselves and the pattern of each of their tables.
func PatternsOf(cfgs []*config.Config) []string {
	var out []string
	for _, c := range cfgs {
		switch {
		case c.IsPattern():
			out = append(out, c.Name)
		case c.Pattern != "":
			out = append(out, c.Pattern)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// SkippedTables lists the tables the last recorded match of each pattern
// source skipped.
func SkippedTables(store *watermark.Store, patterns []string) ([]SkippedTable, error) {
	var out []SkippedTable
	for _, name := range patterns {
		p, ok, err := store.Pattern(name)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		for _, s := range p.Skipped {
			out = append(out, SkippedTable{Pattern: name, Source: s.Source, Table: s.Table, Reason: s.Reason, Message: s.Message, RecordedAt: TimeText(p.At)})
		}
	}
	return out, nil
}
