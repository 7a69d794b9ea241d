package watermark

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// Under DeferRecords a run's record that changes nothing a run resumes
// from is read back at once in the process but reaches the file only at
// the next Flush, Close or durable write; everything else is written at
// once, with the pending records. ReadState, which reads a copy of a file
// another holder locked (the daemon's), shows what is in the file.
func TestDeferredRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.DeferRecords()
	ran := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	base := State{Cursor: []string{"2026-12-02 09:00:00+00", "7"}, LastStatus: "ok", LookbackBound: "2026-12-02 09:59:00+00", CaughtUp: ran.Add(-time.Minute)}
	for _, name := range []string{"a", "b"} {
		if err := s.Put(name, base); err != nil { // a new source: at once
			t.Fatal(err)
		}
	}
	inFile := func(name string) State {
		t.Helper()
		st, ok, err := ReadState(path, name, 20*time.Millisecond)
		if err != nil || !ok {
			t.Fatalf("read %s from the file: ok=%v err=%v", name, ok, err)
		}
		return st
	}
	idle := func(name string, at time.Time, bound string) {
		t.Helper()
		err := s.Update(name, func(st *State) error {
			st.LastRunAt, st.LastSuccess, st.Bound, st.BoundAt, st.CaughtUp = at, at, at, at, at
			st.LookbackBound, st.TotalRead = bound, st.TotalRead+3
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// An idle run: read back in the process, not in the file yet.
	idle("a", ran, "2026-12-02 10:00:00+00")
	if got, _, _ := s.Get("a"); !got.LastRunAt.Equal(ran) || got.TotalRead != 3 || got.LookbackBound != "2026-12-02 10:00:00+00" {
		t.Fatalf("Get after an idle run: %+v", got)
	}
	if got := inFile("a"); !got.LastRunAt.IsZero() || got.LookbackBound != base.LookbackBound {
		t.Fatalf("the file has the deferred record already: %+v", got)
	}
	// A second update reads the pending state, not the file's.
	idle("a", ran.Add(time.Minute), "2026-12-02 10:01:00+00")
	if got, _, _ := s.Get("a"); got.TotalRead != 6 {
		t.Fatalf("TotalRead after two idle runs = %d, want 6", got.TotalRead)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := inFile("a"); !got.LastRunAt.Equal(ran.Add(time.Minute)) || got.TotalRead != 6 || got.LookbackBound != "2026-12-02 10:01:00+00" {
		t.Fatalf("the file after Flush: %+v", got)
	}

	// A watermark that moves is written at once, and with it the record
	// of the other source that was pending.
	idle("a", ran.Add(2*time.Minute), "2026-12-02 10:02:00+00")
	if err := s.Update("b", func(st *State) error { st.Cursor = []string{"2026-12-02 10:00:00+00", "9"}; return nil }); err != nil {
		t.Fatal(err)
	}
	if got := inFile("b"); !slices.Equal(got.Cursor, []string{"2026-12-02 10:00:00+00", "9"}) {
		t.Fatalf("the moved watermark is not in the file: %+v", got)
	}
	if got := inFile("a"); !got.LastRunAt.Equal(ran.Add(2 * time.Minute)) {
		t.Fatalf("the pending record of a did not go with b's watermark: %+v", got)
	}

	// Written at once: a lowered or cleared lookback bound (a crash must
	// not leave the higher one), a failure, an older caught-up point.
	for _, c := range []struct {
		what string
		fn   func(st *State)
	}{
		{"a lowered lookback bound", func(st *State) { st.LookbackBound = "2026-12-02 09:30:00+00" }},
		{"a cleared lookback bound", func(st *State) { st.LookbackBound = "" }},
		{"a failed run", func(st *State) { st.LastRunAt, st.LastStatus, st.LastError = ran.Add(3*time.Minute), "failed", "boom" }},
		{"a caught-up point moved back", func(st *State) { st.CaughtUp = ran.Add(-time.Hour) }},
		{"a resync", func(st *State) { st.Cursor, st.From, st.ResyncedAt = nil, "2026-12-01", ran }},
	} {
		if err := s.Update("a", func(st *State) error { c.fn(st); return nil }); err != nil {
			t.Fatal(err)
		}
		want, _, _ := s.Get("a")
		if got := inFile("a"); encoded(t, got) != encoded(t, want) {
			t.Errorf("%s: the file has %+v, want %+v", c.what, got, want)
		}
	}

	// Close writes what is pending.
	idle("b", ran.Add(5*time.Minute), "2026-12-02 10:05:00+00")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := inFile("b"); !got.LastRunAt.Equal(ran.Add(5 * time.Minute)) {
		t.Fatalf("Close did not write the pending record: %+v", got)
	}
}

// encoded is st as the file holds it.
func encoded(t *testing.T, st State) string {
	t.Helper()
	b, err := Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Without DeferRecords (run --once, the other commands) every update is in
// the file when it returns.
func TestRecordsWrittenAtOnceByDefault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put("a", State{Cursor: []string{"1"}}); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	if err := s.Update("a", func(st *State) error { st.LastRunAt = at; return nil }); err != nil {
		t.Fatal(err)
	}
	if st, _, err := ReadState(path, "a", time.Second); err != nil || !st.LastRunAt.Equal(at) {
		t.Fatalf("the file has %+v (err %v), want the run's record", st, err)
	}
}

// Sources updated at once from several goroutines, with flushes between,
// end with every update in the file: none lost to a pending state written
// over by another source's durable write or a flush.
func TestDeferredRecordsConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.DeferRecords()
	const sources, updates = 8, 60
	done := make(chan struct{})
	flushed := make(chan error, 1)
	go func() {
		for {
			select {
			case <-done:
				flushed <- nil
				return
			default:
				if err := s.Flush(); err != nil {
					flushed <- err
					return
				}
			}
		}
	}()
	errs := make(chan error, sources)
	for i := range sources {
		go func() {
			name := fmt.Sprintf("s%d", i)
			if err := s.Put(name, State{Cursor: []string{"0"}}); err != nil {
				errs <- err
				return
			}
			for u := 1; u <= updates; u++ {
				err := s.Update(name, func(st *State) error {
					st.LastRows, st.TotalRead = int64(u), st.TotalRead+1
					if u%10 == 0 { // every tenth moves the watermark: written at once
						st.Cursor = []string{fmt.Sprint(u)}
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range sources {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range sources {
		st, ok, err := s.Get(fmt.Sprintf("s%d", i))
		if err != nil || !ok || st.LastRows != updates || st.TotalRead != updates || !slices.Equal(st.Cursor, []string{fmt.Sprint(updates)}) {
			t.Errorf("s%d in the file: last_rows %d, total_read %d, cursor %v (ok %v, err %v); want %d, %d, [%d]", i, st.LastRows, st.TotalRead, st.Cursor, ok, err, updates, updates, updates)
		}
	}
}
