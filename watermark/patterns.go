package watermark

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bucketPatterns holds, per pattern source, what its last match against
// the source catalog left out. An older syncd does not read the bucket.
var bucketPatterns = []byte("patterns")

// SkippedTable is a table a pattern source matched but cannot sync.
type SkippedTable struct {
	Source  string `json:"source"` // the source name it would have (NAME.TABLE)
	Table   string `json:"table"`  // schema.table
	Reason  string `json:"reason"` // a short stable code (source.Skip*)
	Message string `json:"message"`
}

// Pattern is what the last match of a pattern source recorded: when it
// ran and the tables it skipped.
type Pattern struct {
	At      time.Time      `json:"at"`
	Skipped []SkippedTable `json:"skipped,omitempty"`
}

// PutPattern records the last match of pattern source name.
func (s *Store) PutPattern(name string, p Pattern) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode the match of %s: %w", name, err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		if _, err := sources(tx); err != nil { // stamps the format version
			return err
		}
		b, err := tx.CreateBucketIfNotExists(bucketPatterns)
		if err != nil {
			return err
		}
		return b.Put([]byte(name), raw)
	})
	if err != nil {
		return fmt.Errorf("record the match of pattern source %s in %s: %w", name, s.path, err)
	}
	return nil
}

// Pattern returns the last recorded match of pattern source name; ok is
// false when none is recorded.
func (s *Store) Pattern(name string) (p Pattern, ok bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPatterns)
		if b == nil {
			return nil
		}
		raw := b.Get([]byte(name))
		if raw == nil {
			return nil
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("decode the match of %s: %v: %w", name, err, ErrCorrupt)
		}
		ok = true
		return nil
	})
	if err != nil {
		return Pattern{}, false, fmt.Errorf("read the match of pattern source %s from %s: %w", name, s.path, err)
	}
	return p, ok, nil
}
