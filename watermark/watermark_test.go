package watermark

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestPutGetRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := State{Cursor: []string{"2026-10-01 09:00:00.000097+00", "42"}, LastStatus: "ok", LastRows: 7, TotalRows: 9}
	if err := s.Put("orders", want); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, ok, err := s.Get("orders")
	if err != nil || !ok || strings.Join(got.Cursor, "|") != strings.Join(want.Cursor, "|") || got.TotalRows != 9 {
		t.Fatalf("got %+v ok=%v err=%v", got, ok, err)
	}
	if _, ok, _ := s.Get("other"); ok {
		t.Fatal("unknown source has a state")
	}
}

// A second process waiting for the file gives up with a clear error.
func TestLockedFileTimesOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	_, err = Open(path, 200*time.Millisecond)
	if !errors.Is(err, ErrLocked) || time.Since(start) > 5*time.Second {
		t.Fatalf("second open: %v after %s; want ErrLocked promptly", err, time.Since(start))
	}
}

// A file written by a newer syncd is refused and left untouched.
func TestNewerFormatRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, _ := tx.CreateBucketIfNotExists(bucketMeta)
		return b.Put(keyVersion, []byte("99"))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before, _ := os.ReadFile(path)
	_, err = Open(path, time.Second)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "format version 99") || !strings.Contains(err.Error(), "resync") {
		t.Fatalf("open newer file: %v", err)
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Fatal("the newer file was changed")
	}
	if _, err := Decode([]byte(`{"v":2,"cursor":["x"]}`)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decode newer record: %v", err)
	}
}

// A damaged file is refused with a recovery hint and left untouched.
func TestCorruptFileRefused(t *testing.T) {
	for name, content := range map[string][]byte{
		"garbage":   []byte(strings.Repeat("not a bolt file ", 1000)),
		"truncated": nil,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.db")
			if content == nil {
				s, err := Open(path, time.Second)
				if err != nil {
					t.Fatal(err)
				}
				_ = s.Put("a", State{Cursor: []string{"1"}})
				s.Close()
				full, _ := os.ReadFile(path)
				content = full[:100]
			}
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Open(path, time.Second)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "resync --from-start") {
				t.Fatalf("open damaged file: %v", err)
			}
			after, _ := os.ReadFile(path)
			if string(after) != string(content) {
				t.Fatal("the damaged file was changed")
			}
		})
	}
}
