package watermark

import (
	"path/filepath"
	"testing"
	"time"
)

// A state written before the bound fields existed still loads, and the
// fields round-trip through the file.
func TestBoundFieldsCompatible(t *testing.T) {
	old := []byte(`{"v":1,"cursor":["2026-01-02 03:04:05.123456+00","7"],"last_rows":3,"last_pages":1,"total_rows":9}`)
	st, err := Decode(old)
	if err != nil {
		t.Fatalf("decode a state without bound fields: %v", err)
	}
	if st.Cursor[1] != "7" || st.TotalRows != 9 || !st.Bound.IsZero() || st.BoundHolderPID != 0 {
		t.Fatalf("decoded %+v", st)
	}

	s, err := Open(filepath.Join(t.TempDir(), "state.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	since := time.Date(2026, 1, 2, 3, 0, 0, 123456000, time.UTC)
	st.Bound, st.BoundAt = since, since.Add(time.Minute)
	st.BoundHolderPID, st.BoundHolderApp, st.BoundHolderSince = 4242, "report", since
	if err := s.Put("orders", st); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Get("orders")
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if !got.Bound.Equal(since) || !got.BoundAt.Equal(since.Add(time.Minute)) || got.BoundHolderPID != 4242 || got.BoundHolderApp != "report" || !got.BoundHolderSince.Equal(since) {
		t.Fatalf("round trip: %+v", got)
	}
}
