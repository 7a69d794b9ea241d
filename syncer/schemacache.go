package syncer

import (
	"encoding/json"
	"sync"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// SchemaCache is what the runs of one source learned from the catalogs,
// kept between runs (the daemon keeps one per source, in memory): the
// source table as described, its cursor index, and that the copy passed
// its checks and followed the source's schema, each with the catalog
// fingerprints (pgutil.Fingerprint) of the source table and of the copy
// it was read under. A run reads both fingerprints (on the source, in the
// run's first round trip, with the read bound's statements and the table's
// identity: source.Opening.Start) and re-does that work only when one of
// them changed, when the state file's record of the schema is not the one
// the last run left, or when the last run failed: any DDL on the table or
// the copy (a column added, dropped, renamed or retyped, a type, domain or
// enum changed, the table renamed, re-created, truncated or rewritten)
// invalidates it.
//
// The copy's column types and key array type that the sink's Prepare read
// (sink.Known) are kept too, under the copy's fingerprint read before that
// Prepare: they are valid only while that fingerprint is unchanged, and a
// run is given them only when it is trusted, which requires the same
// fingerprint read by the run itself under its run lock. A run that
// changed the copy (created it, added a column) stored the fingerprint it
// read before the change, so the next run reads another one and reads the
// copy again.
//
// What a run must know at its own moment is never cached: the read bound,
// the source table's identity, the run lock, the sink catalog's claim and
// the lost-copy check read the databases every run (a bound read with the
// fingerprint is used only when that fingerprint is the cached one), and so
// do the enum labels of a table that uses an enum (a label added commits
// without touching the table's rows; the run reads them after its bound,
// see source.Reader.RefreshTypes).
type SchemaCache struct {
	mu sync.Mutex
	// cfg is the config the cache was filled for: a reload gives a new
	// one, and a new config starts from nothing.
	cfg          *config.Config
	srcFP, dstFP string
	table        *source.Table
	index        *source.CursorIndex
	copy         *sink.Known // what the sink's Prepare read, under dstFP
	state        string      // the state's schema record after the last run
	ok           bool        // filled by a run that succeeded
}

// cached is what a run starts from: the source table's last description
// and its fingerprint (nil, "": none for this config).
func (sc *SchemaCache) cached(c *config.Config) (*source.Table, string) {
	if sc == nil {
		return nil, ""
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if !sc.ok || sc.cfg != c {
		return nil, ""
	}
	return sc.table, sc.srcFP
}

// trusted reports whether the copy's checks and the schema following can
// be skipped: the source was not described again (its fingerprint is the
// cached one), the copy's fingerprint and the state's schema record are
// the last successful run's.
func (sc *SchemaCache) trusted(c *config.Config, src *source.Reader, dstFP string, st watermark.State) bool {
	if sc == nil || src.Described || dstFP == "" {
		return false
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.ok && sc.cfg == c && sc.dstFP == dstFP && sc.state == schemaRecord(st)
}

// changed reports whether an earlier run of this config read other
// fingerprints: the source table (when the run described it again) or the
// copy changed since.
func (sc *SchemaCache) changed(c *config.Config, srcChanged bool, dstFP string) bool {
	if sc == nil {
		return false
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.cfg == c && sc.srcFP != "" && (srcChanged || dstFP != "" && dstFP != sc.dstFP)
}

// copyKnown returns what the sink's Prepare read of the copy under the
// fingerprint dstFP, nil when the cache holds nothing under it. Only for a
// trusted run (see trusted), whose own fingerprint dstFP is.
func (sc *SchemaCache) copyKnown(c *config.Config, dstFP string) *sink.Known {
	if sc == nil || dstFP == "" {
		return nil
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if !sc.ok || sc.cfg != c || sc.dstFP != dstFP {
		return nil
	}
	return sc.copy
}

// index returns the cursor index read under the source's fingerprint.
func (sc *SchemaCache) cursorIndex(c *config.Config, src *source.Reader) *source.CursorIndex {
	if sc == nil || src.Described {
		return nil
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if !sc.ok || sc.cfg != c || sc.index == nil {
		return nil
	}
	ci := *sc.index
	return &ci
}

// store records what a run that succeeded read; forget what one that
// failed did.
func (sc *SchemaCache) store(c *config.Config, srcFP, dstFP string, t *source.Table, ci *source.CursorIndex, known *sink.Known, st watermark.State) {
	if sc == nil {
		return
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.cfg, sc.srcFP, sc.dstFP, sc.table, sc.index, sc.copy = c, srcFP, dstFP, t.Clone(), ci, known
	sc.state, sc.ok = schemaRecord(st), srcFP != "" && dstFP != ""
	if srcFP == "" || dstFP == "" {
		sc.srcFP, sc.dstFP = "", "" // a first run: nothing to compare with yet
	}
}

// forget makes the next run read everything again (it keeps the
// fingerprints, so that the next run still tells a change).
func (sc *SchemaCache) forget() {
	if sc == nil {
		return
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.ok = false
}

// schemaRecord is the state's record of the source's schema, as text.
func schemaRecord(st watermark.State) string {
	b, err := json.Marshal(struct {
		Schema   *watermark.Schema
		Backfill *watermark.Backfill
		Dropped  []string
	}{st.Schema, st.Backfill, st.Dropped})
	if err != nil || st.Schema == nil {
		return "" // never equal to a stored record: nothing is skipped
	}
	return string(b)
}
