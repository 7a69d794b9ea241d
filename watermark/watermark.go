// Package watermark owns syncd's state file: a bbolt database that holds, per
// source name, the cursor of the last row whose page has committed in the
// sink, plus what the last run did. A Put returns only after bbolt has
// fsynced the file, and callers write only after the sink has committed, so
// a crash between the two re-applies a page and never skips one.
//
// The one exception is opt-in (DeferRecords, the daemon's): a change of
// nothing but the last run's record (when it ran, its bound, how far it
// caught up, its row counts; see recordOnly) may wait in memory until the
// next Flush or the next durable write, so that an idle run of each of a
// thousand sources does not fsync the file. Losing such a change in a crash
// leaves the older record, which is never less safe to resume from.
package watermark

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/internal/sourceerr"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ReconcileResult is what one reconcile found: the differences by kind
// (missing, extra, changed, duplicate, null_key; after the repair when it
// repaired) and the source rows it could not compare, by reason.
type ReconcileResult struct {
	At          time.Time        `json:"at"`
	Differences map[string]int64 `json:"differences,omitempty"`
	NotCovered  map[string]int64 `json:"not_covered,omitempty"`
	Repaired    bool             `json:"repaired,omitempty"`
	// Deleted is how many copy rows a key check's repair deleted.
	Deleted int64 `json:"deleted,omitempty"`
}

// FormatVersion is the version of the state written by this build. A file
// written by a newer syncd is refused, never rewritten.
const FormatVersion = 1

var (
	bucketSources = []byte("sources")
	bucketMeta    = []byte("meta")
	keyVersion    = []byte("format_version")
)

// ErrLocked is returned when another process holds the state file.
var ErrLocked = errors.New("state file is locked by another syncd process")

// ErrCorrupt is returned for a state file that cannot be read.
var ErrCorrupt = errors.New("state file is unreadable")

// State is what syncd remembers about one source.
type State struct {
	// Cursor holds the text of each cursor column of the last applied row,
	// exact as PostgreSQL printed it (full precision). Nil: nothing applied yet.
	Cursor []string `json:"cursor,omitempty"`
	// From, when set, is an inclusive lower bound on the first cursor column
	// left by a resync; the next run reads rows at or after it.
	From string `json:"from,omitempty"`

	LastRunAt    time.Time `json:"last_run_at,omitzero"`
	LastStatus   string    `json:"last_status,omitempty"` // "ok" or "failed"
	LastError    string    `json:"last_error,omitempty"`
	LastRows     int64     `json:"last_rows"`  // rows applied by the last run
	LastPages    int64     `json:"last_pages"` // pages applied by the last run
	TotalRows    int64     `json:"total_rows"` // rows applied since the state began
	LastSuccess  time.Time `json:"last_success_at,omitzero"`
	Campaign     string    `json:"campaign,omitempty"`
	ResyncedAt   time.Time `json:"resynced_at,omitzero"`
	ResyncedFrom string    `json:"resynced_from,omitempty"`

	// Bound is the commit-safe read limit of the last run (zero: none) and
	// BoundAt the source's clock when it was taken; the holder fields name
	// the open transaction that held it back, if one did.
	Bound            time.Time `json:"bound,omitzero"`
	BoundAt          time.Time `json:"bound_at,omitzero"`
	BoundHolderPID   int32     `json:"bound_holder_pid,omitempty"`
	BoundHolderApp   string    `json:"bound_holder_application,omitempty"`
	BoundHolderSince time.Time `json:"bound_holder_since,omitzero"`
	// LookbackBound is the read bound, as text of the first cursor
	// column's type, of the last run that read everything from its start
	// to its end below a bound that sees every writer; "" when unknown (a
	// state written before syncd recorded it, bound: off, a role that
	// cannot see other roles, a standby, a run held at the watermark). Any
	// row that run could not see is stamped at or after it minus lookback,
	// so the next run re-reads from the earlier of the watermark and that
	// point instead of the watermark minus lookback (docs/WATERMARK.md).
	LookbackBound string `json:"lookback_bound,omitempty"`
	// LookbackXmin and LookbackServer, kept with LookbackBound (0 and zero
	// when unknown), are the oldest transaction id still running on the
	// source when that run read its bound, and when the source server
	// started: rows up to the watermark that a transaction below it wrote
	// were read by that run, and the next run leaves them out of the
	// lookback window, as long as the server has not restarted
	// (syncer/idle.go).
	LookbackXmin   uint64    `json:"lookback_xmin,omitempty"`
	LookbackServer time.Time `json:"lookback_server,omitzero"`

	// CaughtUp is the point up to which the copy was last known to hold
	// every committed source row: the read bound of the last run that
	// caught up, or, for a run without a bound, the source's clock when it
	// began reading. Zero: no run has caught up yet.
	CaughtUp time.Time `json:"caught_up,omitzero"`
	// Row counters since the state began, written with the watermark:
	// rows read in committed pages (re-reads included), rows the sink
	// inserted or changed, and rows it removed (soft deletes).
	TotalRead    int64 `json:"total_read,omitempty"`
	TotalWritten int64 `json:"total_written,omitempty"`
	TotalDeleted int64 `json:"total_deleted,omitempty"`

	// LastCleanReconcile is when the last reconcile that proved the copy
	// equal to the source (no difference left, no row left uncompared)
	// began. Zero: none yet, or none recorded (the daemon's scheduled
	// reconcile records it, and a one-off `syncd reconcile` when the state
	// file is free).
	LastCleanReconcile time.Time `json:"last_clean_reconcile_at,omitzero"`
	// LastReconcile is what the last recorded reconcile found, clean or
	// not (nil: none recorded).
	LastReconcile *ReconcileResult `json:"last_reconcile,omitempty"`
	// LastKeyCheck is what the last recorded key check (`reconcile
	// --keys`, reconcile.keys_schedule) found (nil: none recorded).
	LastKeyCheck *ReconcileResult `json:"last_key_check,omitempty"`

	// NullCursorRows and AheadOfClockRows are the rows the last run that
	// caught up found outside the cursor's reach (a NULL cursor column; a
	// first cursor column past the source's clock plus its allowance) and
	// copied in its extra pass.
	NullCursorRows   int64 `json:"rows_null_cursor,omitempty"`
	AheadOfClockRows int64 `json:"rows_ahead_of_clock,omitempty"`

	// Identity names the settings this watermark was computed for (nil in
	// a state written before syncd recorded it). A run whose config gives
	// another identity must not resume from this watermark.
	Identity *Identity `json:"identity,omitempty"`
	// Schema is the source's column list as the last run saw it (nil: not
	// recorded yet); a run compares the catalog with it to tell a renamed
	// column (same attnum) from an added one, and to say a drop once.
	Schema *Schema `json:"schema,omitempty"`
	// Backfill, while set, is a column-added backfill that has not finished:
	// the next run resumes it before it reads new rows.
	Backfill *Backfill `json:"backfill,omitempty"`
	// LastBackfill is the last backfill that finished.
	LastBackfill *Backfill `json:"last_backfill,omitempty"`
	// Dropped lists the copy's columns that the source no longer has: the
	// copy keeps them, and rows written since get NULL there.
	Dropped []string `json:"dropped,omitempty"`
	// Mode is ModeCompare when the last run compared the whole table
	// (mode: compare) instead of reading by a cursor; "" for a cursor run.
	Mode string `json:"mode,omitempty"`
	// LastCompare is what the last run in compare mode found and wrote.
	LastCompare *CompareResult `json:"last_compare,omitempty"`
	// FirstLoad, while set, is a parallel first load of an empty copy that
	// has not finished: the next run resumes it (see syncer/firstload.go).
	FirstLoad *FirstLoad `json:"first_load,omitempty"`
}

// ModeCompare is State.Mode of a source whose runs compare the whole table.
const ModeCompare = "compare"

// CompareResult is what one run in compare mode did: the source rows it
// compared and the rows it inserted into, updated in and deleted from the
// copy to make it equal.
type CompareResult struct {
	Compared int64 `json:"compared"`
	Inserted int64 `json:"inserted"`
	Updated  int64 `json:"updated"`
	Deleted  int64 `json:"deleted"`
	// Remaining counts the differences the check after the repair still
	// found (rows the source changed meanwhile): the next run repairs them.
	Remaining int64 `json:"remaining,omitempty"`
}

// CompareRead is what a run in compare mode counts as rows read (0 for
// nil): the source rows it compared and the copy's rows it deleted, so
// that read minus written minus deleted is the rows already equal.
func (r *CompareResult) CompareRead() int64 {
	if r == nil {
		return 0
	}
	return r.Compared + r.Deleted
}

// FirstLoad is the progress of a first load: the copy was empty and had no
// watermark, so the source is copied in chunks of its heap, several at once,
// from one snapshot. Each chunk is marked Done only after its sink
// transaction has committed; the watermark (Cursor) is written only when
// every chunk is done.
type FirstLoad struct {
	// Cursor is the watermark the load ends with: the greatest cursor below
	// Before in the first snapshot (nil: that snapshot had no such row).
	Cursor []string `json:"cursor,omitempty"`
	// Before is the first snapshot's read bound (exclusive, on the first
	// cursor column; "" when none applied). A resumed load keeps it.
	Before  string      `json:"before,omitempty"`
	Started time.Time   `json:"started"`
	Chunks  []LoadChunk `json:"chunks"`
	// Runs counts the processes that started on this load (1: never resumed).
	Runs int `json:"runs"`
	// Heaps identifies the heaps the load's chunks are block ranges of: the
	// source table and every inheritance child its reads scan, each with
	// the file its rows were in when the load began (nil: a load begun by
	// a syncd that did not record them). A run that finds another table
	// under the name, or another file (CLUSTER, VACUUM FULL, pg_repack, a
	// rewriting ALTER TABLE, TRUNCATE), starts the load again: the blocks
	// of the chunks done no longer hold what was copied from them.
	Heaps []LoadHeap `json:"heaps,omitempty"`
	// Xmin is the xmin of the load's first snapshot, a 64-bit transaction
	// id (0: not recorded). Every row version the chunks done did not see
	// was created by a transaction at or past it, so a resumed load
	// re-reads those in the chunks done: an update that leaves the cursor
	// alone may have put a row of a chunk not done there.
	Xmin uint64 `json:"xmin,omitempty"`
}

// LoadHeap is one heap a first load reads: the relation's OID and its
// relfilenode (pg_relation_filenode; 0 for a relation without storage).
type LoadHeap struct {
	OID      uint32 `json:"oid"`
	Filenode uint32 `json:"filenode"`
}

// LoadChunk is a range of heap blocks [From, To) of the source table (To 0:
// to the end of the table).
type LoadChunk struct {
	From uint32 `json:"from"`
	To   uint32 `json:"to,omitempty"`
	Done bool   `json:"done,omitempty"`
	Rows int64  `json:"rows,omitempty"` // rows the committed chunk wrote
}

// Schema is a source table's selected columns and primary key.
type Schema struct {
	Columns    []SchemaColumn `json:"columns"`
	PrimaryKey []string       `json:"primary_key,omitempty"`
}

// SchemaColumn is one source column: its name, its format_type and its
// attnum, which a rename keeps; CopyNum is the attnum of the copy's column
// that holds it (0: not recorded yet), so that a column is known by
// identity on both sides, not by name.
type SchemaColumn struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Num     int16  `json:"num"`
	CopyNum int16  `json:"copy_num,omitempty"`
}

// Backfill is the progress of copying added columns' values into the rows
// the copy already holds, page by page in key order.
type Backfill struct {
	Columns []string `json:"columns"`
	// After is the text of the key of the last row backfilled (nil: none yet).
	After []string `json:"after,omitempty"`
	Rows  int64    `json:"rows"` // rows read so far
}

// Identity is what a watermark belongs to: the normalised settings that
// give it its meaning (the tables, cursor, filter, key...), readable, and a
// fingerprint of them.
type Identity struct {
	Fingerprint string            `json:"fingerprint"`
	Settings    map[string]string `json:"settings"`
}

type record struct {
	Version int `json:"v"`
	State
}

// Store is an open state file.
type Store struct {
	db   *bolt.DB
	path string

	// mu is held by each write of source states (Update, Flush), so that
	// the pending states and the file change in one order.
	mu sync.Mutex
	// deferring is set by DeferRecords; pending holds, by source name, the
	// encoded states whose change was only the run record and that are not
	// written yet (read by Get and Update before the file). pmu guards
	// pending; a write changes it holding mu as well, so a writer reads
	// it without pmu.
	deferring bool
	pmu       sync.Mutex
	pending   map[string][]byte
}

// Open opens (or creates) the state file at path, waiting at most timeout
// for another process's lock.
func Open(path string, timeout time.Duration) (*Store, error) {
	if timeout <= 0 {
		timeout = time.Second
	}
	// The path is kept absolute: status reports it, and a CLI talking to a
	// daemon checks that the daemon holds the same file.
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return open(path, &bolt.Options{Timeout: timeout})
}

// open opens the bolt file with opts and checks its format version.
func open(path string, opts *bolt.Options) (store *Store, err error) {
	// bbolt maps the file into memory: in a truncated file a page past its
	// end (the freelist, read by bolt.Open) raises SIGBUS when read, which
	// kills the process unless this goroutine asks for a panic instead.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var db *bolt.DB
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				db.Close()
			}
			store, err = nil, fmt.Errorf("open state file %s: %v: %w; it was left untouched: move it aside and %s", path, r, ErrCorrupt, sourceerr.ResyncAllAdvice)
		}
	}()
	var size int64
	if st, err := os.Stat(path); err == nil {
		size = st.Size()
	}
	db, err = openBolt(path, opts)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, path: path}
	if err := s.checkVersion(); err != nil {
		db.Close()
		return nil, err
	}
	if size > 0 {
		if err := s.checkPages(size); err != nil {
			db.Close()
			return nil, err
		}
	}
	return s, nil
}

// checkPages refuses a file shorter than its own meta page says (truncated:
// bbolt would read zeros past the end and forget every watermark) or whose
// pages do not form a consistent tree (overwritten bytes). The file is small,
// so walking it on every open is cheap.
func (s *Store) checkPages(size int64) error {
	advice := "; it was left untouched: move it aside and " + sourceerr.ResyncAllAdvice
	return s.db.View(func(tx *bolt.Tx) error {
		if tx.Size() > size {
			return fmt.Errorf("state file %s is %d bytes but its pages need %d (truncated): %w%s", s.path, size, tx.Size(), ErrCorrupt, advice)
		}
		var first error
		for err := range tx.Check() {
			if first == nil {
				first = err
			}
		}
		if first != nil {
			return fmt.Errorf("state file %s is damaged (%v): %w%s", s.path, first, ErrCorrupt, advice)
		}
		return nil
	})
}

func openBolt(path string, opts *bolt.Options) (db *bolt.DB, err error) {
	// bbolt can panic on some damaged files; turn that into an error.
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("open state file %s: %v: %w; move it aside and %s", path, r, ErrCorrupt, sourceerr.ResyncAllAdvice)
		}
	}()
	db, err = bolt.Open(path, 0o600, opts)
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("open state file %s: %w (waited %s); use the daemon's admin API (--listen) or stop it first", path, ErrLocked, opts.Timeout)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		return nil, fmt.Errorf("open state file %s: %w: %w; it was left untouched: move it aside and %s", path, err, ErrCorrupt, sourceerr.ResyncAllAdvice)
	case err != nil && isIOError(err):
		return nil, fmt.Errorf("open state file %s: %w; syncd must write its state file: make it and its folder writable with free space, or point --state elsewhere", path, err)
	case err != nil:
		if st, serr := os.Stat(path); serr == nil && st.Mode().IsRegular() && !os.IsPermission(err) {
			return nil, fmt.Errorf("open state file %s: %w: %w; it was left untouched: move it aside and %s", path, err, ErrCorrupt, sourceerr.ResyncAllAdvice)
		}
		return nil, fmt.Errorf("open state file %s: %w", path, err)
	}
	return db, nil
}

// isIOError reports whether err comes from the operating system (read-only
// file system, no space, no permission) rather than from the file's content.
func isIOError(err error) bool {
	var errno syscall.Errno
	return errors.As(err, &errno)
}

func (s *Store) checkVersion() error {
	var v int
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMeta)
		if b == nil {
			return nil
		}
		raw := b.Get(keyVersion)
		if raw == nil {
			return nil
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("format version %q: %w", raw, ErrCorrupt)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read state file %s: %w", s.path, err)
	}
	if v > FormatVersion {
		return fmt.Errorf("state file %s has format version %d, newer than this syncd's %d: %w; run the newer syncd, or move the file aside and run `syncd resync --from-start`", s.path, v, FormatVersion, ErrCorrupt)
	}
	return nil
}

// Path is the state file's path.
func (s *Store) Path() string { return s.path }

// Close writes the pending run records (DeferRecords) and closes the
// state file.
func (s *Store) Close() error {
	ferr := s.Flush()
	if err := s.db.Close(); err != nil {
		return err
	}
	return ferr
}

// DeferRecords lets an Update whose only change is the source's run record
// (recordOnly) return before it is written: the state waits in memory, read
// by Get and Update, until Flush, Close or the next durable write of any
// source, which writes every pending state in its own transaction. The
// caller flushes often (the daemon: every FlushEvery). Everything a run
// resumes from (the watermark, a resync, a first load, the schema, the
// identity, a lowered lookback bound) is still written at once.
func (s *Store) DeferRecords() {
	s.mu.Lock()
	s.deferring = true
	s.mu.Unlock()
}

// FlushEvery is how often the daemon writes the pending run records: at
// most this much of them is lost in a crash, and a process reading the
// state file beside the daemon (status, reconcile) sees a run's record at
// most this late.
const FlushEvery = time.Second

// Flush writes the pending run records in one transaction.
func (s *Store) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return nil
	}
	if err := s.db.Update(s.putPending); err != nil {
		return fmt.Errorf("write the run records of %d sources to %s: %w", len(s.pending), s.path, err)
	}
	s.clearPending()
	return nil
}

// clearPending forgets the pending states once written; s.mu is held.
func (s *Store) clearPending() {
	s.pmu.Lock()
	clear(s.pending)
	s.pmu.Unlock()
}

// putPending writes the pending states in tx; s.mu is held.
func (s *Store) putPending(tx *bolt.Tx) error {
	if len(s.pending) == 0 {
		return nil
	}
	b, err := sources(tx)
	if err != nil {
		return err
	}
	for name, raw := range s.pending {
		if err := b.Put([]byte(name), raw); err != nil {
			return err
		}
	}
	return nil
}

// Get returns the state of source name; ok is false when none is stored.
func (s *Store) Get(name string) (st State, ok bool, err error) {
	s.pmu.Lock()
	raw := s.pending[name]
	s.pmu.Unlock()
	if raw != nil {
		st, err = Decode(raw)
		if err != nil {
			return State{}, false, &sourceerr.ResyncNeeded{Source: name, Reason: fmt.Sprintf("read watermark of %s from %s: %v; ", name, s.path, err), Alt: "(or --from) to replace it", Err: err}
		}
		return st, true, nil
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSources)
		if b == nil {
			return nil
		}
		raw := b.Get([]byte(name))
		if raw == nil {
			return nil
		}
		rec, err := Decode(raw)
		if err != nil {
			return err
		}
		st, ok = rec, true
		return nil
	})
	if err != nil {
		return State{}, false, &sourceerr.ResyncNeeded{Source: name, Reason: fmt.Sprintf("read watermark of %s from %s: %v; ", name, s.path, err), Alt: "(or --from) to replace it", Err: err}
	}
	return st, ok, nil
}

// Put stores the state of source name; it returns after the file is fsynced.
func (s *Store) Put(name string, st State) error {
	return s.Update(name, func(cur *State) error {
		*cur = st
		return nil
	})
}

// Replace stores the state of source name without reading the stored one,
// so that a record which no longer decodes can be overwritten by a resync.
func (s *Store) Replace(name string, st State) error {
	return s.update(name, false, func(cur *State) error {
		*cur = st
		return nil
	})
}

// Update reads, changes and writes the state of source name in one bbolt
// transaction.
func (s *Store) Update(name string, fn func(st *State) error) error {
	return s.update(name, true, fn)
}

// update runs fn on the stored state (decoded only when read is set) and
// writes the result in one bbolt transaction, with the pending run records
// of every source; under DeferRecords a change of only the run record
// joins them instead.
func (s *Store) update(name string, read bool, fn func(st *State) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deferring && read {
		done, err := s.deferUpdate(name, fn)
		if err != nil {
			return fmt.Errorf("update watermark of %s in %s: %w", name, s.path, err)
		}
		if done {
			return nil
		}
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := s.putPending(tx); err != nil {
			return err
		}
		b, err := sources(tx)
		if err != nil {
			return err
		}
		var st State
		if raw := b.Get([]byte(name)); raw != nil && read {
			if st, err = Decode(raw); err != nil {
				return err
			}
		}
		if err := fn(&st); err != nil {
			return err
		}
		raw, err := Encode(st)
		if err != nil {
			return err
		}
		return b.Put([]byte(name), raw)
	})
	if err != nil {
		return fmt.Errorf("update watermark of %s in %s: %w", name, s.path, err)
	}
	s.clearPending()
	return nil
}

// deferUpdate applies fn to the state of name as it stands (pending, else
// in the file); when that changes only the run record, the new state
// becomes pending and done is true. Otherwise nothing is kept and the
// caller writes at once (fn runs again there, on the same state: s.mu is
// held, so nothing changed it meanwhile). s.mu is held.
func (s *Store) deferUpdate(name string, fn func(st *State) error) (done bool, err error) {
	raw := s.pending[name]
	if raw == nil {
		err := s.db.View(func(tx *bolt.Tx) error {
			if b := tx.Bucket(bucketSources); b != nil {
				raw = bytes.Clone(b.Get([]byte(name)))
			}
			return nil
		})
		if err != nil || raw == nil {
			return false, err // a new source's first state is written at once
		}
	}
	// Decoded twice: fn may change what the pointers of its state hold.
	prev, err := Decode(raw)
	if err != nil {
		return false, err
	}
	next, err := Decode(raw)
	if err != nil {
		return false, err
	}
	if err := fn(&next); err != nil {
		return false, err
	}
	if !recordOnly(prev, next) {
		return false, nil
	}
	enc, err := Encode(next)
	if err != nil {
		return false, err
	}
	if bytes.Equal(enc, raw) {
		return true, nil // nothing changed: nothing to write
	}
	s.pmu.Lock()
	if s.pending == nil {
		s.pending = map[string][]byte{}
	}
	s.pending[name] = enc
	s.pmu.Unlock()
	return true, nil
}

// recordOnly reports whether next differs from prev only in what the last
// run did, in a way whose loss in a crash is harmless: the stored state
// would stay prev, which a run resumes from as safely as from next. Those
// fields are when the last run ran and ended well and what it read and
// wrote (LastRunAt, LastSuccess, LastRows, LastPages, the Total counters,
// the rows outside the cursor), its read bound and the transaction that
// held it (Bound...), CaughtUp moving forward (an older one only says the
// copy may be further behind), and LookbackBound set or moved forward (an
// older or no stored bound makes the next run start earlier, re-reading
// more: see syncer/idle.go). A change of LastStatus or LastError (a run
// that failed, or recovered) is written at once, and so is everything
// else: the cursor, a resync, a first load, the schema, the identity.
func recordOnly(prev, next State) bool {
	if next.LastStatus != prev.LastStatus || next.LastError != prev.LastError || next.CaughtUp.Before(prev.CaughtUp) {
		return false
	}
	if next.LookbackBound != prev.LookbackBound && !later(prev.LookbackBound, next.LookbackBound) {
		return false
	}
	for _, st := range []*State{&prev, &next} {
		st.LastRunAt, st.LastSuccess, st.LastRows, st.LastPages = time.Time{}, time.Time{}, 0, 0
		st.TotalRows, st.TotalRead, st.TotalWritten, st.TotalDeleted = 0, 0, 0, 0
		st.NullCursorRows, st.AheadOfClockRows = 0, 0
		st.Bound, st.BoundAt, st.BoundHolderPID, st.BoundHolderApp, st.BoundHolderSince = time.Time{}, time.Time{}, 0, "", time.Time{}
		st.CaughtUp, st.LookbackBound, st.LookbackXmin, st.LookbackServer = time.Time{}, "", 0, time.Time{}
	}
	return reflect.DeepEqual(prev, next)
}

// later reports whether the lookback bound next is at or after prev, or
// prev is none: both are timestamps as PostgreSQL prints them (ISO, the
// session's time zone, which may differ between them).
func later(prev, next string) bool {
	if prev == "" {
		return true
	}
	if next == "" {
		return false
	}
	// The parser the next run's start reads them with (syncer/idle.go).
	p, pok := pgutil.ParseTime(prev)
	n, nok := pgutil.ParseTime(next)
	return pok && nok && !n.Before(p)
}

// sources stamps the format version and returns the sources bucket of a
// write transaction.
func sources(tx *bolt.Tx) (*bolt.Bucket, error) {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return nil, err
	}
	if err := meta.Put(keyVersion, []byte(fmt.Sprint(FormatVersion))); err != nil {
		return nil, err
	}
	return tx.CreateBucketIfNotExists(bucketSources)
}

// Names lists the sources that have a stored state.
func (s *Store) Names() ([]string, error) {
	var out []string
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSources)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}

// Encode serialises a state with the current format version.
func Encode(st State) ([]byte, error) {
	b, err := json.Marshal(record{Version: FormatVersion, State: st})
	if err != nil {
		return nil, fmt.Errorf("encode watermark: %w", err)
	}
	return b, nil
}

// Decode parses a stored state, refusing newer format versions.
func Decode(raw []byte) (State, error) {
	var rec record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return State{}, fmt.Errorf("decode watermark: %v: %w", err, ErrCorrupt)
	}
	if rec.Version < 1 {
		return State{}, fmt.Errorf("decode watermark: no format version: %w", ErrCorrupt)
	}
	if rec.Version > FormatVersion {
		return State{}, fmt.Errorf("decode watermark: format version %d is newer than this syncd's %d: %w", rec.Version, FormatVersion, ErrCorrupt)
	}
	return rec.State, nil
}
