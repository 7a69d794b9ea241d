package watermark

import (
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// OpenReadOnly opens an existing state file for reading only (a shared
// lock, which a running daemon's exclusive lock refuses), waiting at most
// timeout. A missing file is an error wrapping os.ErrNotExist.
func OpenReadOnly(path string, timeout time.Duration) (*Store, error) {
	if timeout <= 0 {
		timeout = time.Second
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open state file %s: %w", path, err)
	}
	return open(path, &bolt.Options{ReadOnly: true, Timeout: timeout})
}
