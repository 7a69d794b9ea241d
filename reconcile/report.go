package reconcile

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// MaxKeys bounds how many keys of each kind a report lists.
const MaxKeys = 100

// Report is the outcome of one reconcile, printed by `syncd reconcile --json`.
// Keys are rendered as text; a composite key joins its parts with ",".
type Report struct {
	Source       string   `json:"source"`
	Missing      int64    `json:"missing"` // rows in the source, not in the copy
	Extra        int64    `json:"extra"`   // rows in the copy, not in the source
	Changed      int64    `json:"changed"` // rows in both with different values
	Keys         KeyLists `json:"keys"`
	RowsCompared int64    `json:"rows_compared"` // synced source rows covered by the checksums
	RowsFetched  int64    `json:"rows_fetched"`  // rows read one by one, both sides, re-checks included
	Repaired     bool     `json:"repaired"`
	DurationMS   int64    `json:"duration_ms"`

	// CopyRows is the number of rows in the copy covered by the checksums.
	CopyRows int64 `json:"copy_rows"`
	// ChecksumQueries counts the checksum queries, both sides.
	ChecksumQueries int64 `json:"checksum_queries"`
	// SkippedUnsynced counts rows that differ only because the source row
	// changed after the watermark: the next sync copies them.
	SkippedUnsynced int64 `json:"skipped_unsynced"`
	// Boundary says which source rows counted as synced.
	Boundary string `json:"boundary,omitempty"`
	// NoWatermark is true when the source has no watermark yet: no row is
	// synced, nothing was compared.
	NoWatermark bool `json:"no_watermark,omitempty"`
	// Repair counts the rows a --repair changed in the copy.
	Repair *RepairCounts `json:"repair,omitempty"`
	// After is the comparison run after a repair.
	After *Report `json:"after_repair,omitempty"`
}

// KeyLists holds the (bounded) keys of each kind of difference.
type KeyLists struct {
	Missing []string `json:"missing"`
	Extra   []string `json:"extra"`
	Changed []string `json:"changed"`
}

// RepairCounts counts what a repair wrote.
type RepairCounts struct {
	Inserted int64 `json:"inserted"`
	Updated  int64 `json:"updated"`
	Deleted  int64 `json:"deleted"`
}

// Equal reports whether no difference was found.
func (r *Report) Equal() bool { return r.Missing == 0 && r.Extra == 0 && r.Changed == 0 }

// Clean reports whether the copy equals the source in the end: no
// difference, or none left after the repair.
func (r *Report) Clean() bool {
	if r.After != nil {
		return r.After.Equal()
	}
	return r.Equal()
}

// sortKeys orders each key list: integers by value, other keys as text.
func (r *Report) sortKeys() {
	for _, l := range [][]string{r.Keys.Missing, r.Keys.Extra, r.Keys.Changed} {
		slices.SortFunc(l, func(a, b string) int {
			x, errx := strconv.ParseInt(a, 10, 64)
			y, erry := strconv.ParseInt(b, 10, 64)
			if errx == nil && erry == nil {
				return cmp.Compare(x, y)
			}
			return strings.Compare(a, b)
		})
	}
}
