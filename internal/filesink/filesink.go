// Package filesink is a test-only kind of sink (sink.type: files): a table
// copy written as JSON lines to a file in a directory, one object per row
// keyed by column name, values in PostgreSQL's text format (null for
// NULL). It appends rather than upserts: a page is appended whole, in one
// write that is made durable before Apply returns or cut off again when it
// fails, and a reader keeps the newest line of a key by its cursor. It
// exists to prove that a kind is one package plus its registration line
// (docs/SINKS.md): its config key (sink.directory), its checks, its
// identity (the directory), its run lock (a file lock beside the copy) and
// its capabilities (no reconcile, no schema following) all live here.
package filesink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/runlock"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/source"
)

// Type is the sink.type of the kind.
const Type = "files"

// Settings are the kind's own keys under sink:.
type Settings struct {
	// Directory is where the copy's file is written (relative: to the
	// config file's folder). It must exist.
	Directory string `yaml:"directory"`
}

// Kind is the files kind, to be registered beside the default ones
// (cli.DefaultKinds().With(filesink.Kind())).
func Kind() kind.Kind {
	return kind.Kind{
		Type: Type,
		Config: &config.SinkKind{New: func() any { return &Settings{} }, NoDSN: true, Check: checkConfig,
			Docs: map[string]string{"directory": "The directory the copy is written to, as `SCHEMA.TABLE.jsonl` of `sink.table` (relative: to the config file's folder). It must exist; `validate` checks that it can be written."}},
		OpenSink:    Open,
		Check:       check,
		Identity:    func(c *config.Config) map[string]string { return map[string]string{"sink.directory": dir(c)} },
		Lock:        lock,
		Appends:     true,
		RunsAtStart: true,
	}
}

// dir is the copy's directory, made absolute by checkConfig.
func dir(c *config.Config) string {
	if s, ok := c.Sink.Settings.(*Settings); ok {
		return s.Directory
	}
	return ""
}

// Path is the file that holds the copy of c: SCHEMA.TABLE.jsonl of
// sink.table in sink.directory.
func Path(c *config.Config) string {
	return filepath.Join(dir(c), c.Sink.Ident.Schema+"."+c.Sink.Ident.Name+".jsonl")
}

// checkConfig checks sink.directory without touching the disk.
func checkConfig(c *config.Config) error {
	s, _ := c.Sink.Settings.(*Settings)
	if s == nil || s.Directory == "" {
		return c.Errorf("sink.directory", "missing; name the directory the copy is written to")
	}
	d := s.Directory
	if !filepath.IsAbs(d) {
		d = filepath.Join(filepath.Dir(c.File), d)
	}
	abs, err := filepath.Abs(d)
	if err != nil {
		return c.Errorf("sink.directory", "%q: %v", s.Directory, err)
	}
	s.Directory = abs
	return nil
}

// check is what validate checks: the directory exists and can be written.
func check(_ context.Context, c *config.Config, _ source.Source) ([]string, error) {
	d := dir(c)
	st, err := os.Stat(d)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, c.Errorf("sink.directory", "%s does not exist; create it (syncd does not create a files sink's directory)", d)
	case err != nil:
		return nil, c.Errorf("sink.directory", "%v", err)
	case !st.IsDir():
		return nil, c.Errorf("sink.directory", "%s is not a directory", d)
	}
	if err := syscall.Access(d, 2 /* W_OK */); err != nil {
		return nil, c.Errorf("sink.directory", "%s cannot be written by this user: %v", d, err)
	}
	return nil, nil
}

// Files is the sink of one copy.
type Files struct {
	path string
	f    *os.File
	cols []string
}

var _ sink.Sink = (*Files)(nil)

// Open returns the sink of c's copy; the file is opened by Prepare.
func Open(_ context.Context, c *config.Config) (sink.Sink, error) {
	if dir(c) == "" {
		return nil, fmt.Errorf("open the files sink of %s: sink.directory is not set", c.Name)
	}
	return &Files{path: Path(c)}, nil
}

// Prepare implements sink.Sink: it opens (or creates) the copy's file.
func (s *Files) Prepare(_ context.Context, cols []page.Column) error {
	s.cols = s.cols[:0]
	for _, c := range cols {
		s.cols = append(s.cols, c.Name)
	}
	if s.f != nil {
		return nil
	}
	f, err := os.OpenFile(s.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open the copy %s: %w", s.path, err)
	}
	s.f = f
	return nil
}

// Apply implements sink.Sink: the page's rows are appended in one write
// and made durable; a write that fails is cut off again, so a page is
// in the file whole or not at all.
func (s *Files) Apply(ctx context.Context, p page.Page) (sink.Result, error) {
	if err := ctx.Err(); err != nil {
		return sink.Result{}, fmt.Errorf("append a page to %s: %w", s.path, err)
	}
	if len(p.Rows) == 0 {
		return sink.Result{}, nil
	}
	if p.Binary || p.Span != nil {
		return sink.Result{}, fmt.Errorf("append a page to %s: a files sink takes pages of text values", s.path)
	}
	var buf bytes.Buffer
	for _, row := range p.Rows {
		buf.WriteByte('{')
		for i, v := range row {
			if i > 0 {
				buf.WriteByte(',')
			}
			name, _ := json.Marshal(s.cols[i])
			buf.Write(name)
			buf.WriteByte(':')
			if v == nil {
				buf.WriteString("null")
				continue
			}
			val, _ := json.Marshal(string(v))
			buf.Write(val)
		}
		buf.WriteString("}\n")
	}
	st, err := s.f.Stat()
	if err != nil {
		return sink.Result{}, fmt.Errorf("append a page to %s: %w", s.path, err)
	}
	if _, err := s.f.Write(buf.Bytes()); err != nil {
		return sink.Result{}, s.undo(st.Size(), err)
	}
	if err := s.f.Sync(); err != nil {
		return sink.Result{}, s.undo(st.Size(), err)
	}
	return sink.Result{Written: int64(len(p.Rows))}, nil
}

// undo cuts the file back to size after a failed append.
func (s *Files) undo(size int64, err error) error {
	if terr := s.f.Truncate(size); terr != nil {
		return fmt.Errorf("append a page to %s: %w; cutting off the partial page failed too: %w", s.path, err, terr)
	}
	return fmt.Errorf("append a page to %s: %w", s.path, err)
}

// Close implements sink.Sink.
func (s *Files) Close(context.Context) error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// fileLock is the run lock of a copy: an exclusive flock on a file beside
// it, held until Release (or the process ends).
type fileLock struct{ f *os.File }

// lock takes the run lock of c's copy without waiting.
func lock(_ context.Context, c *config.Config, _ sink.Sink, t runlock.Target) (kind.RunLock, error) {
	path := Path(c) + ".lock"
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("take the run lock of source %s: %w", t.Source, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("source %s: another process holds the run lock %s: %w", t.Source, path, runlock.ErrHeld)
		}
		return nil, fmt.Errorf("take the run lock %s of source %s: %w", path, t.Source, err)
	}
	return &fileLock{f: f}, nil
}

// Check implements kind.RunLock: a flock is held as long as its file is open.
func (l *fileLock) Check(context.Context) error { return nil }

// Release implements kind.RunLock.
func (l *fileLock) Release(context.Context) error {
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	return l.f.Close()
}
