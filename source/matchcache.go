package source

import (
	"sync"

	"github.com/syncd/syncd/config"
)

// MatchCache is what the last match of a pattern source found, kept
// between matches (the daemon keeps one per pattern source, in memory):
// for each matched table, its catalog fingerprint
// (pgutil.TableFingerprints) and what the match made of it, its source or
// why it is skipped. Expand describes again only a table that is new or
// whose fingerprint changed; a table dropped, renamed or moved out of the
// schema is no longer listed and is forgotten. A match that failed leaves
// the cache as it was, and a new config (a reload) starts from nothing.
type MatchCache struct {
	mu     sync.Mutex
	cfg    *config.Config
	tables map[string]matched
}

// matched is what a match made of one table: member, or skipped when
// member is nil; fp is the table's catalog fingerprint it was made under.
type matched struct {
	fp      string
	member  *config.Config
	table   *Table // the member's table as the match described it
	skipped Skipped
}

// last returns what the last match of c found, by table name (nil: none,
// or it was of another config).
func (mc *MatchCache) last(c *config.Config) map[string]matched {
	if mc == nil {
		return nil
	}
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.cfg != c {
		return nil
	}
	return mc.tables
}

// store records what a match of c found.
func (mc *MatchCache) store(c *config.Config, tables map[string]matched) {
	if mc == nil {
		return
	}
	mc.mu.Lock()
	defer mc.mu.Unlock()
	mc.cfg, mc.tables = c, tables
}
