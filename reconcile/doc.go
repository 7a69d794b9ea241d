// Package reconcile proves that a copy equals its source value by value, and
// repairs it, without streaming both tables.
//
// # Canonical rows
//
// Each database hashes a canonical text of every selected row. Two values
// get the same canonical text exactly when their text output is the same
// (numeric 1.0 and 1.00, json key order, float8 0 and -0, interval '1 day'
// and '24 hours' all differ, although = calls them equal), and the text
// does not depend on either side's version or settings: timestamptz is
// printed in UTC at microsecond precision (to_char), float4/float8 are
// their IEEE-754 bits with every NaN alike, interval its months, days and
// microseconds, bytea is hex, bpchar keeps its trailing blanks, arrays of
// such types are rebuilt element by element, and every value is quoted
// with quote_nullable so that NULL differs from the empty string. A column
// whose copy type spells the source's values its own way (numeric(12,2)
// for numeric(10,1), jsonb for json, double precision for real: see
// column.Loose) is compared through a form both spellings share instead.
// The row hash is 64 bits of hashtextextended of the row text when both
// servers agree on a probe (pickHash), else the first 64 bits of md5(row
// text); both sides sum them in numeric (no overflow).
//
// # A sample, checksums, then (key, hash) streams, then rows
//
// Rows are placed on an integer line: the key itself for a single integer
// key, otherwise the 64-bit hash of the canonical key text (which works for
// text, uuid and composite keys, needs no sampled boundaries and does not
// depend on collations, which may differ between the databases). A density
// sample (comparer.sample: random ranges of the first level checksummed
// through an integer key's index, or rows drawn from each side and read by
// key on the other) first estimates whether more than half of the rows lie
// in differing ranges of LeafRows rows; then the whole line is streamed at
// once (Report.Plan "stream"), since a checksum level would differ nearly
// everywhere. Otherwise, starting from one segment covering the line, each
// side returns (count, sum of row
// hashes) for the children of the segments in question, in one grouped
// query per side and level; the first level reads every row once by a scan
// and finds a row's child by arithmetic. Equal children are done. Differing
// children of at most LeafRows rows, or all of them when the differences
// are too dense for another level to narrow them (comparer.dense), are
// streamed: both sides send (key, row hash) in line order and the streams
// are merged. Only the differing keys are then read in full, on both sides,
// to be classified and repaired. With d scattered differences in n rows,
// the work is about one scan of each table, d*LeafRows streamed pairs and
// about d whole rows per side; docs/RECONCILE.md gives the cost model.
//
// # Coverage
//
// The source's watermark (from the state file) says which rows a sync has
// passed: a source row whose cursor is at or before the watermark is synced.
// Reconcile compares the synced rows, the rows with a NULL cursor and the
// rows stamped past the source's clock plus source.ClockAllowance (a run
// copies those two classes whatever the watermark), and counts every other
// source row, past the watermark, as not covered (Report.NotCovered, by
// reason): the copy is then not proven equal. Copy rows are judged by their
// source row: a difference whose source row is past the watermark is counted
// as unsynced and not reported. Every difference is re-read on both sides by
// key (the copy first, then the source) before it is reported, so rows that
// a sync or a writer changed while reconcile ran are not reported. With no
// watermark yet nothing is compared and every source row is not covered.
//
// # Keys
//
// When a table's catalog lets its key be NULL or held twice (no primary key
// or unique index over NOT NULL key columns), reconcile scans it for those
// rows, reports them (Report.NullKey, Report.Duplicate) and leaves them out
// of the checksums; otherwise it needs no scan.
//
// # Repair
//
// Repair writes through the sink (sink.Postgres.Repair): missing rows are
// inserted and changed rows overwritten with the source's values, extra rows
// deleted, in one transaction per batch, each guarded by the copy row seen by
// the re-check so that a row a concurrent sync has just written is left to
// it. A copy whose key does not identify every row is repaired by key
// instead (sink.Postgres.ReplaceKeys: delete the rows seen, insert the
// source's row). A second reconcile then verifies the result.
//
// # Key check
//
// Keys runs the same levels, streams and re-reads over the key columns
// alone (comparer.keyView: sides whose compared columns are the key and
// whose sums take every source row in scope, whatever the watermark), so
// each side can answer from its key index by an index-only scan
// (preferIndex); for an integer key each range is summed by its own range
// scan of that index (side.ranged, rangedSQL), not placed in a hash table
// of ranges; any other key stays on a hash line but is hashed from its
// values (keyHash: uuid and text bytes, integers by value, column hashes
// chained), not from its canonical text. It finds the copy's extra keys (rows deleted at the
// source) and the keys it lacks, re-reads each on both sides as above
// (recheckKeys, by presence only), and with repair deletes the extra rows
// through the sink, guarded by the copy row it re-read. Missing keys are
// reported and left to the sync or to Run.
package reconcile
