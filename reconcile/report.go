package reconcile

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxKeys bounds how many keys of each kind a report lists.
const MaxKeys = 100

// Report is the outcome of one reconcile, printed by `syncd reconcile --json`.
// Keys are rendered as text; a composite key joins its parts with ",".
type Report struct {
	Source string `json:"source"`
	// Check is CheckKeys for a key check (Keys), empty for a reconcile.
	Check   string `json:"check,omitempty"`
	Missing int64  `json:"missing"` // rows in the source, not in the copy
	Extra   int64  `json:"extra"`   // rows in the copy, not in the source
	Changed int64  `json:"changed"` // rows in both with different values
	// Duplicate counts the keys the copy holds more than once.
	Duplicate int64 `json:"duplicate"`
	// NullKey counts the rows, on either side, whose key has a NULL part:
	// the key cannot identify them.
	NullKey      int64    `json:"null_key"`
	Keys         KeyLists `json:"keys"`
	RowsCompared int64    `json:"rows_compared"` // source rows covered by the checksums or the stream of the whole line
	RowsFetched  int64    `json:"rows_fetched"`  // whole rows read, both sides: the re-checks of differing keys and the NULL-key scans
	// HashesRead counts the (key, row hash) pairs read from both sides: the
	// streams of the key ranges whose checksums differed (or of the whole
	// line, PlanStream) and the pairs of a density sample by keys.
	HashesRead int64 `json:"hashes_read"`
	Repaired   bool  `json:"repaired"`
	DurationMS int64 `json:"duration_ms"`
	// Plan says how the line was compared: PlanChecksums or PlanStream
	// (empty when both tables were empty).
	Plan string `json:"plan,omitempty"`
	// Sample is the density sample that chose the plan; nil when none was
	// taken (a small table, a key without a unique index on a side).
	Sample *Sample `json:"sample,omitempty"`

	// CopyRows is the number of rows in the copy covered by the checksums
	// or the stream of the whole line.
	CopyRows int64 `json:"copy_rows"`
	// ChecksumQueries counts the checksum queries, both sides.
	ChecksumQueries int64 `json:"checksum_queries"`
	// KeyScans counts the scans for duplicate and NULL keys: 0 when both
	// tables' catalogs rule them out (a primary key, or a unique index over
	// NOT NULL key columns).
	KeyScans int64 `json:"key_scans"`
	// SkippedUnsynced counts rows that differ only because the source row
	// changed after the watermark: the next sync copies them.
	SkippedUnsynced int64 `json:"skipped_unsynced"`
	// NullCursor and AheadOfClock count the compared source rows with a
	// NULL cursor and stamped past the source's clock plus
	// source.ClockAllowance (a run copies both whatever the watermark).
	NullCursor   int64 `json:"null_cursor_compared"`
	AheadOfClock int64 `json:"ahead_of_clock_compared"`
	// NotCovered counts, by reason (ReasonPending, ReasonNoWatermark), the
	// source rows reconcile could not judge: the copy is not proven equal
	// while any is left.
	NotCovered map[string]int64 `json:"not_covered"`
	// Boundary says which source rows were compared.
	Boundary string `json:"boundary,omitempty"`
	// NoWatermark is true when the source has no watermark yet: no row is
	// synced, nothing was compared.
	NoWatermark bool `json:"no_watermark,omitempty"`
	// Repair counts the rows a --repair changed in the copy.
	Repair *RepairCounts `json:"repair,omitempty"`
	// CleanAt is when this reconcile began, when it proved the copy equal
	// (Clean); zero otherwise.
	CleanAt time.Time `json:"clean_at,omitzero"`
	// After is the comparison run after a repair.
	After *Report `json:"after_repair,omitempty"`
}

// KeyLists holds the (bounded) keys of each kind of difference.
type KeyLists struct {
	Missing []string `json:"missing"`
	Extra   []string `json:"extra"`
	Changed []string `json:"changed"`
	// Duplicate lists keys the copy holds more than once; NullKey the keys
	// with a NULL part, followed by the side: "NULL (copy)".
	Duplicate []string `json:"duplicate"`
	NullKey   []string `json:"null_key"`
}

// Sample is the density sample taken before the first checksum level.
type Sample struct {
	// By is "key_ranges" (an integer key: ranges of the first checksum
	// level, checksummed through the key's index on both sides) or "keys"
	// (any other key: rows drawn from each side, read by key on the other).
	By string `json:"by"`
	// Taken is the number of ranges or keys sampled, Differing those that
	// differ.
	Taken     int64 `json:"taken"`
	Differing int64 `json:"differing"`
	// Rows counts the rows the sample read, both sides.
	Rows int64 `json:"rows"`
	// Share is the estimated share of the rows that lie in differing ranges
	// of 128 rows (LeafRows): above 1/2 the line is streamed at once.
	Share float64 `json:"share"`
}

// RepairCounts counts what a repair wrote.
type RepairCounts struct {
	Inserted int64 `json:"inserted"`
	Updated  int64 `json:"updated"`
	Deleted  int64 `json:"deleted"`
}

// Equal reports whether no difference was found over what was compared.
func (r *Report) Equal() bool {
	return r.Missing == 0 && r.Extra == 0 && r.Changed == 0 && r.Duplicate == 0 && r.NullKey == 0
}

// Differences counts the differences by kind: missing, extra, changed,
// duplicate and null_key (the label "kind" of syncd_reconcile_differences).
func (r *Report) Differences() map[string]int64 {
	return map[string]int64{"missing": r.Missing, "extra": r.Extra, "changed": r.Changed, "duplicate": r.Duplicate, "null_key": r.NullKey}
}

// NotCoveredRows is the number of source rows that were not compared.
func (r *Report) NotCoveredRows() int64 {
	var n int64
	for _, v := range r.NotCovered {
		n += v
	}
	return n
}

// Final is the report the outcome rests on: the one after the repair, if
// any.
func (r *Report) Final() *Report {
	if r.After != nil {
		return r.After
	}
	return r
}

// Clean reports whether the copy provably equals the source in the end: no
// difference (or none left after the repair) and no row left uncompared.
func (r *Report) Clean() bool {
	f := r.Final()
	return f.Equal() && f.NotCoveredRows() == 0
}

// sortKeys orders each key list: integers by value, other keys as text.
func (r *Report) sortKeys() {
	for _, l := range [][]string{r.Keys.Missing, r.Keys.Extra, r.Keys.Changed, r.Keys.Duplicate, r.Keys.NullKey} {
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
