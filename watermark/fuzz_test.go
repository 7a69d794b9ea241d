package watermark

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"unicode/utf8"
)

// FuzzDecode: no stored bytes make Decode panic; what it rejects is
// ErrCorrupt; what it accepts encodes and decodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"cursor":["2026-10-01 09:00:00.000097+00","42"],"total_rows":3}`))
	f.Add([]byte(`{"v":2}`))
	f.Add([]byte(`{"v":1,"last_run_at":"2026-01-01T00:00:00Z","from":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"cursor":[]}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		st, err := Decode(raw)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode error is not ErrCorrupt: %v", err)
			}
			return
		}
		once, err := Encode(st)
		if err != nil {
			t.Fatalf("Encode of a decoded state: %v", err)
		}
		st2, err := Decode(once)
		if err != nil {
			t.Fatalf("Decode of an encoded state: %v", err)
		}
		twice, err := Encode(st2)
		if err != nil || !bytes.Equal(once, twice) {
			t.Fatalf("encoding is not stable:\n%s\n%s", once, twice)
		}
	})
}

// FuzzCursorRoundTrip: a cursor, exact as PostgreSQL printed it, comes back
// from the state encoding byte for byte.
func FuzzCursorRoundTrip(f *testing.F) {
	f.Add("2026-10-01 09:00:00.000097+00", "42")
	f.Add("a\"b\\c\x00", "é\u2028")
	f.Add("", "-1")
	f.Fuzz(func(t *testing.T, a, b string) {
		if !utf8.ValidString(a) || !utf8.ValidString(b) {
			t.Skip("PostgreSQL's text output in a UTF8 database is valid UTF-8")
		}
		raw, err := Encode(State{Cursor: []string{a, b}, LastRows: 1})
		if err != nil {
			t.Fatal(err)
		}
		st, err := Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(st.Cursor, []string{a, b}) {
			t.Fatalf("cursor %q came back as %q", []string{a, b}, st.Cursor)
		}
	})
}
