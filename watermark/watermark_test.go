package watermark

import (
	"errors"
	"fmt"
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

// A truncated file is refused as damaged and left as it was, instead of
// being read as empty (which would forget every watermark).
func TestTruncatedFileIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := s.Put(strings.Repeat("source", 20)+string(rune('a'+i%26))+string(rune('a'+i/26)), State{Cursor: []string{strings.Repeat("x", 500), "1"}}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, time.Second); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "resync") {
		t.Fatalf("open of a truncated file: %v; want ErrCorrupt naming resync", err)
	}
	after, _ := os.ReadFile(path)
	if len(after) != len(b)/2 || string(after) != string(b[:len(b)/2]) {
		t.Fatal("the truncated file was changed")
	}
}

// Replace overwrites a record that no longer decodes, which Update refuses.
func TestReplaceOverwritesUndecodableRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := sources(tx)
		if err != nil {
			return err
		}
		return b.Put([]byte("orders"), []byte(`{"v":1,"cursor":[`))
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Update("orders", func(*State) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("update of a garbled record: %v; want ErrCorrupt", err)
	}
	if err := s.Replace("orders", State{From: "2026-01-01T00:00:00Z"}); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Get("orders")
	if err != nil || !ok || got.From != "2026-01-01T00:00:00Z" {
		t.Fatalf("after Replace: %+v ok=%v err=%v", got, ok, err)
	}
}

// A file cut at any page boundary is refused with ErrCorrupt, or (cut in
// its unused tail) still reads every record whole; never a crash: where the freelist page lies past the cut, bolt.Open itself reads
// past the end of the mapping (SIGBUS), which Open turns into an error.
func TestTruncatedAtEveryPageIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.db")
	s, err := Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Many rewrites of the same records leave the freelist and the live
	// pages high in the file, as a long-running daemon's file does.
	for round := range 40 {
		for i := range 10 {
			if err := s.Put(fmt.Sprintf("source%d", i), State{Cursor: []string{strings.Repeat("x", 300*(round%3+1)), fmt.Sprint(round)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	for cut := 2 * page; cut < len(b); cut += page {
		p := filepath.Join(dir, fmt.Sprintf("cut%d.db", cut))
		if err := os.WriteFile(p, b[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := Open(p, time.Second)
		if err == nil {
			// Cut in the file's unused tail: every record must still be
			// whole.
			for i := range 10 {
				got, ok, err := st.Get(fmt.Sprintf("source%d", i))
				if err != nil || !ok || len(got.Cursor) != 2 || got.Cursor[1] != "39" {
					t.Fatalf("state file cut to %d of %d bytes opened, but source%d reads %+v, %v, %v", cut, len(b), i, got.Cursor, ok, err)
				}
			}
			st.Close()
			continue
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "resync") {
			t.Fatalf("cut to %d of %d bytes: %v; want ErrCorrupt naming resync", cut, len(b), err)
		}
	}
}
