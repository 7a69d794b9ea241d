package testutil

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Log collects output (a process's stdout or stderr, or an in-process
// slog handler's) while a test reads it. Writes and reads may run in
// different goroutines. Complete lines are parsed as slog records, JSON or
// text, once each, so a test can wait for a record and match it by its
// message and attributes whatever their order.
type Log struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	parsed  int // bytes of buf already split into lines
	lines   []string
	entries []Entry // the lines that parse as records
	closed  bool
	changed chan struct{} // closed and replaced at every write and at Close
}

// Write appends p. It never fails.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	l.notifyLocked()
	return len(p), nil
}

// Close says no more output will come: waiters stop waiting, and a last
// line without a newline counts as a line.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.notifyLocked()
}

func (l *Log) notifyLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// String returns everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Contains reports whether s occurs in the output so far.
func (l *Log) Contains(s string) bool { return strings.Contains(l.String(), s) }

// Lines returns the complete lines so far (the last, unfinished one only
// once the log is closed), without their newlines.
func (l *Log) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.parseLocked()
	return append([]string(nil), l.lines...)
}

// Entries returns the records of the complete lines so far, in order;
// lines that are not slog records (a panic, a CLI error line) are left out.
func (l *Log) Entries() []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.parseLocked()
	return append([]Entry(nil), l.entries...)
}

// parseLocked splits and parses the lines written since the last call.
func (l *Log) parseLocked() {
	b := l.buf.Bytes()
	for {
		rest := b[l.parsed:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			if l.closed && len(rest) > 0 {
				i = len(rest)
			} else {
				return
			}
		}
		line := string(rest[:i])
		l.parsed += min(i+1, len(rest))
		l.lines = append(l.lines, line)
		if e, err := ParseLine(line); err == nil {
			l.entries = append(l.entries, e)
		}
	}
}

// Nth waits up to timeout for record number i (from 0) and returns it,
// for a test that reacts to each record in turn as it is written; false
// when the log is closed with fewer records, or at the timeout.
func (l *Log) Nth(timeout time.Duration, i int) (Entry, bool) {
	var e Entry
	ok := l.Await(timeout, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.parseLocked()
		if i < len(l.entries) {
			e = l.entries[i]
			return true
		}
		return false
	})
	return e, ok
}

// Find returns the first record with message msg (any message when msg
// is "") and the given attributes, as key, value pairs: Find("run done",
// "source", "orders", "rows", 1000).
func (l *Log) Find(msg string, attrs ...any) (Entry, bool) {
	return l.FindFunc(func(e Entry) bool { return e.Match(msg, attrs...) })
}

// FindFunc returns the first record for which ok is true: for a test
// that matches a message by its start, say.
func (l *Log) FindFunc(ok func(Entry) bool) (Entry, bool) {
	for _, e := range l.Entries() {
		if ok(e) {
			return e, true
		}
	}
	return Entry{}, false
}

// Count returns how many records have message msg and the attributes.
func (l *Log) Count(msg string, attrs ...any) int {
	n := 0
	for _, e := range l.Entries() {
		if e.Match(msg, attrs...) {
			n++
		}
	}
	return n
}

// Await waits until cond holds, checking it at once and after every
// write, and reports whether it did; it gives up when timeout passes or
// when the log is closed and cond still does not hold.
func (l *Log) Await(timeout time.Duration, cond func() bool) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		l.mu.Lock()
		closed := l.closed
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		ch := l.changed
		l.mu.Unlock()
		if cond() {
			return true
		}
		if closed {
			return false
		}
		select {
		case <-ch:
		case <-timer.C:
			return cond()
		}
	}
}

// AwaitEntry waits up to timeout for a record with message msg and the
// attributes (see Find).
func (l *Log) AwaitEntry(timeout time.Duration, msg string, attrs ...any) (Entry, bool) {
	var e Entry
	ok := l.Await(timeout, func() bool {
		var found bool
		e, found = l.Find(msg, attrs...)
		return found
	})
	return e, ok
}

// AwaitCount waits up to timeout for at least n records with message msg
// and the attributes.
func (l *Log) AwaitCount(timeout time.Duration, n int, msg string, attrs ...any) bool {
	return l.Await(timeout, func() bool { return l.Count(msg, attrs...) >= n })
}

// Entry is one slog record: the fields of a JSON line (groups as nested
// objects), or the key=value pairs of a text line (values as strings).
type Entry struct {
	Line   string
	Fields map[string]any
	// Repeated lists the keys the line gives more than once (slog writes
	// a key as often as a logger adds it; a reader keeps one of them).
	Repeated []string
}

// ErrNotRecord is returned by ParseLine for a line that is not a slog
// record.
var ErrNotRecord = errors.New("not a slog record")

// ParseLine parses one line written by slog's JSON or text handler.
func ParseLine(line string) (Entry, error) {
	s := strings.TrimSpace(line)
	if strings.HasPrefix(s, "{") {
		var f map[string]any
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		if err := d.Decode(&f); err != nil {
			return Entry{}, fmt.Errorf("%w: %v", ErrNotRecord, err)
		}
		if d.More() {
			return Entry{}, fmt.Errorf("%w: text after the JSON object", ErrNotRecord)
		}
		if _, ok := f["msg"]; !ok {
			return Entry{}, fmt.Errorf("%w: no msg", ErrNotRecord)
		}
		return Entry{Line: line, Fields: f, Repeated: repeatedJSONKeys(s)}, nil
	}
	var repeated []string
	f, err := parseText(s, &repeated)
	if err != nil {
		return Entry{}, err
	}
	return Entry{Line: line, Fields: f, Repeated: repeated}, nil
}

// repeatedJSONKeys returns the top-level keys of the JSON object s that
// occur more than once (json.Decode into a map keeps the last silently).
func repeatedJSONKeys(s string) []string {
	d := json.NewDecoder(strings.NewReader(s))
	if _, err := d.Token(); err != nil {
		return nil
	}
	seen := map[string]bool{}
	var repeated []string
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return repeated
		}
		key, _ := tok.(string)
		if seen[key] && !slices.Contains(repeated, key) {
			repeated = append(repeated, key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return repeated
		}
	}
	return repeated
}

// parseText parses key=value pairs as slog's TextHandler writes them:
// values with spaces, quotes or = are Go-quoted.
func parseText(s string, repeated *[]string) (map[string]any, error) {
	f := map[string]any{}
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || strings.ContainsAny(s[:eq], " \"") {
			return nil, fmt.Errorf("%w: %q is not key=value", ErrNotRecord, s)
		}
		key := s[:eq]
		s = s[eq+1:]
		var val string
		if strings.HasPrefix(s, `"`) {
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return nil, fmt.Errorf("%w: value of %s: %v", ErrNotRecord, key, err)
			}
			val, _ = strconv.Unquote(q)
			s = s[len(q):]
		} else {
			end := strings.IndexByte(s, ' ')
			if end < 0 {
				end = len(s)
			}
			val, s = s[:end], s[end:]
		}
		if s != "" && s[0] != ' ' {
			return nil, fmt.Errorf("%w: no space after %s", ErrNotRecord, key)
		}
		s = strings.TrimLeft(s, " ")
		if _, ok := f[key]; ok && !slices.Contains(*repeated, key) {
			*repeated = append(*repeated, key)
		}
		f[key] = val
	}
	if _, ok := f["msg"]; !ok {
		return nil, fmt.Errorf("%w: no msg", ErrNotRecord)
	}
	return f, nil
}

// ParseLines returns the records among the lines of s (a Result's Stderr,
// say), in order.
func ParseLines(s string) []Entry {
	var out []Entry
	for _, l := range strings.Split(s, "\n") {
		if e, err := ParseLine(l); err == nil {
			out = append(out, e)
		}
	}
	return out
}

// Get returns the value of key; a dotted key ("a.b") reaches into a
// group, whichever handler wrote the line.
func (e Entry) Get(key string) (any, bool) {
	if v, ok := e.Fields[key]; ok {
		return v, true
	}
	var cur any = e.Fields
	for _, part := range strings.Split(key, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// Msg returns the record's message.
func (e Entry) Msg() string { return e.Text("msg") }

// Level returns the record's level (INFO, WARN...).
func (e Entry) Level() string { return e.Text("level") }

// Time returns the record's time, or the zero time.
func (e Entry) Time() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, e.Text("time"))
	return t
}

// Text returns the value of key as text: a string as it is, anything
// else as JSON ("" when absent).
func (e Entry) Text(key string) string {
	v, ok := e.Get(key)
	if !ok {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Int returns the value of key as an integer (0 when absent or not one).
func (e Entry) Int(key string) int64 {
	n, _ := strconv.ParseInt(e.Text(key), 10, 64)
	return n
}

// Decode fills v (a pointer to a struct with json tags) from the record.
func (e Entry) Decode(v any) error {
	b, err := json.Marshal(e.Fields)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Match reports whether the record has message msg (any when "") and each
// attribute of attrs, given as key, value pairs. A value matches when it
// equals the record's after both go through JSON (so 3 matches 3, "x"
// matches "x", []string{"a"} matches ["a"]), or, for a text record, when
// it prints as the record's text.
func (e Entry) Match(msg string, attrs ...any) bool {
	if len(attrs)%2 != 0 {
		panic("testutil: attrs must be key, value pairs")
	}
	if msg != "" && e.Msg() != msg {
		return false
	}
	for i := 0; i < len(attrs); i += 2 {
		key, ok := attrs[i].(string)
		if !ok {
			panic(fmt.Sprintf("testutil: attribute key %v is not a string", attrs[i]))
		}
		got, ok := e.Get(key)
		if !ok || !sameValue(got, attrs[i+1]) {
			return false
		}
	}
	return true
}

// sameValue compares a parsed value with a wanted one through JSON.
func sameValue(got, want any) bool {
	if s, ok := got.(string); ok {
		if w, ok := want.(string); ok {
			return s == w
		}
		if _, isText := want.(fmt.Stringer); isText {
			return s == fmt.Sprint(want)
		}
	}
	b, err := json.Marshal(want)
	if err != nil {
		return false
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var w any
	if err := d.Decode(&w); err != nil {
		return false
	}
	if reflect.DeepEqual(got, w) {
		return true
	}
	// A text record holds every value as text.
	if s, ok := got.(string); ok {
		switch w := w.(type) {
		case json.Number:
			return s == w.String()
		case bool:
			return s == strconv.FormatBool(w)
		}
	}
	return false
}
