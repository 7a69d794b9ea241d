// Package reconcile proves that a copy equals its source value by value, and
// repairs it. It compares checksums computed inside each database over
// ranges of the key, splits only the ranges that differ, and fetches rows
// only for small mismatching ranges.
package reconcile

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
	RowsCompared int64    `json:"rows_compared"`
	RowsFetched  int64    `json:"rows_fetched"`
	Repaired     bool     `json:"repaired"`
	DurationMS   int64    `json:"duration_ms"`
}

// KeyLists holds the (bounded) keys of each kind of difference.
type KeyLists struct {
	Missing []string `json:"missing"`
	Extra   []string `json:"extra"`
	Changed []string `json:"changed"`
}

// Equal reports whether no difference was found.
func (r *Report) Equal() bool { return r.Missing == 0 && r.Extra == 0 && r.Changed == 0 }
