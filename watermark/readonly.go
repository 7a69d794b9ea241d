package watermark

import (
	"errors"
	"fmt"
	"io"
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

// ReadState reads the state of source name and lets the file go at once.
// When another syncd (a daemon) holds the file, it reads a private copy of
// it instead: bbolt writes copy-on-write and a state file is a few pages,
// so a copy shows the state of a recent commit; a copy taken in the middle
// of a write fails its checks and is taken again. A missing file is an
// error wrapping os.ErrNotExist.
func ReadState(path, name string, timeout time.Duration) (State, bool, error) {
	s, err := OpenReadOnly(path, timeout)
	if err == nil {
		defer s.Close()
		return s.Get(name)
	}
	if !errors.Is(err, ErrLocked) {
		return State{}, false, err
	}
	locked := err
	for range 5 {
		st, ok, err := readCopy(path, name)
		if err == nil {
			return st, ok, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return State{}, false, locked
}

// readCopy copies the file aside and reads name from the copy.
func readCopy(path, name string) (st State, ok bool, err error) {
	defer func() {
		// bbolt can panic on a torn copy; that copy is simply taken again.
		if r := recover(); r != nil {
			err = fmt.Errorf("read a copy of state file %s: %v: %w", path, r, ErrCorrupt)
		}
	}()
	src, err := os.Open(path)
	if err != nil {
		return State{}, false, err
	}
	defer src.Close()
	tmp, err := os.CreateTemp("", "syncd-state-*.db")
	if err != nil {
		return State{}, false, err
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, src)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return State{}, false, err
	}
	s, err := open(tmp.Name(), &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return State{}, false, err
	}
	defer s.Close()
	return s.Get(name)
}
