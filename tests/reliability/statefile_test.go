package reliability

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/watermark"
	bolt "go.etcd.io/bbolt"
)

// smallSource makes public.src with n rows and returns a config syncing it
// to public.copy, with its state file at state.
type smallSync struct {
	db     *pgtest.DB
	cfg    string
	state  string
	nextID int
}

func newSmallSync(t *testing.T, stateDir string, n int) *smallSync {
	t.Helper()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT now(), val text)`)
	db.Exec(t, `CREATE UNIQUE INDEX ON src (updated_at, id)`)
	s := &smallSync{db: db, state: filepath.Join(stateDir, "state.db"), nextID: 1}
	s.insert(t, n)
	s.cfg = writeFile(t, t.TempDir(), "small.yaml", tableConfig{
		Name: "small", SourceDSN: db.URL, Table: "public.src", Cursor: "[updated_at, id]",
		SinkDSN: db.URL, SinkTable: "public.copy", PageSize: 50,
	}.YAML())
	return s
}

func (s *smallSync) insert(t *testing.T, n int) {
	t.Helper()
	s.db.Exec(t, `INSERT INTO src (id, val) SELECT g, 'v' || g FROM generate_series($1::int, $2::int) g`, s.nextID, s.nextID+n-1)
	s.nextID += n
}

func (s *smallSync) run(t *testing.T) result {
	t.Helper()
	return bin.Run(t, nil, "run", "--once", "--config", s.cfg, "--state", s.state)
}

func (s *smallSync) mustRun(t *testing.T) {
	t.Helper()
	if r := s.run(t); r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
}

// equal fails unless the copy equals the source value by value.
func (s *smallSync) equal(t *testing.T) {
	t.Helper()
	missing, extra := diff(t, s.db, "src", "copy")
	if missing != 0 || extra != 0 {
		t.Fatalf("copy differs from source: %d rows missing or different, %d extra", missing, extra)
	}
}

// oneLine fails unless r failed with code and exactly one stderr line
// holding every want.
func oneLine(t *testing.T, r result, code int, want ...string) string {
	t.Helper()
	if r.Code != code {
		t.Fatalf("want exit %d: %s", code, r)
	}
	ls := lines(r.Stderr)
	if len(ls) != 1 {
		t.Fatalf("want one line on stderr, got %d:\n%s", len(ls), r.Stderr)
	}
	for _, w := range want {
		if !strings.Contains(ls[0], w) {
			t.Errorf("stderr %q does not say %q", ls[0], w)
		}
	}
	return ls[0]
}

// TestDamagedStateFile: a truncated, overwritten, bit-flipped or newer
// state file stops every command with one line naming the file and the
// resync that recovers it; the file is left byte for byte as it was and
// the sink gets nothing. Following the advice then recovers fully.
func TestDamagedStateFile(t *testing.T) {
	damages := []struct {
		name   string
		damage func(t *testing.T, path string)
		want   []string
		// inPlace: recover with resync on the file itself (one bad record);
		// otherwise move the whole file aside first.
		inPlace bool
	}{
		{"truncated to half", func(t *testing.T, p string) {
			b := readBytes(t, p)
			if err := os.WriteFile(p, b[:len(b)/2], 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"resync"}, false},
		{"truncated to 100 bytes", func(t *testing.T, p string) {
			if err := os.Truncate(p, 100); err != nil {
				t.Fatal(err)
			}
		}, []string{"resync"}, false},
		{"random bytes", func(t *testing.T, p string) {
			b := make([]byte, len(readBytes(t, p)))
			_, _ = rand.Read(b)
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"resync"}, false},
		{"random bytes over the meta pages", func(t *testing.T, p string) {
			b := readBytes(t, p)
			_, _ = rand.Read(b[:8192])
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"resync"}, false},
		{"watermark record garbled", func(t *testing.T, p string) {
			// Through bbolt, not by patching the first copy of the record
			// in the file: a copy-on-write file keeps stale copies of a
			// record in freed pages, and garbling one of those changes
			// nothing.
			boltPut(t, p, "sources", "small", []byte(`{"v":1,"cursor":[`+"\x00\xff"))
		}, []string{"resync", "--source small"}, true},
		{"newer format version", func(t *testing.T, p string) {
			boltPut(t, p, "meta", "format_version", []byte(fmt.Sprint(watermark.FormatVersion+1)))
		}, []string{"newer", "resync"}, false},
		{"record of a newer version", func(t *testing.T, p string) {
			rec, _ := json.Marshal(map[string]any{"v": watermark.FormatVersion + 1, "cursor": []string{"x"}})
			boltPut(t, p, "sources", "small", rec)
		}, []string{"newer", "resync", "--source small"}, true},
	}
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			s := newSmallSync(t, t.TempDir(), 120)
			s.mustRun(t)
			s.insert(t, 30)
			d.damage(t, s.state)
			before := readBytes(t, s.state)
			copyRows := count(t, s.db, "copy")
			for _, args := range [][]string{
				{"run", "--once", "--config", s.cfg, "--state", s.state},
				{"status", "--config", s.cfg, "--state", s.state},
				{"status", "--json", "--config", s.cfg, "--state", s.state},
				{"reconcile", "--config", s.cfg, "--state", s.state, "--source", "small"},
			} {
				r := bin.Run(t, nil, args...)
				line := oneLine(t, r, 1, append([]string{s.state}, d.want...)...)
				t.Logf("%s: %s", args[0], line)
				if !bytes.Equal(readBytes(t, s.state), before) {
					t.Fatalf("%s changed the damaged state file", args[0])
				}
			}
			if n := count(t, s.db, "copy"); n != copyRows {
				t.Fatalf("the copy went from %d to %d rows with a damaged state file", copyRows, n)
			}
			// Recover as told: resync (after moving a damaged file aside), run.
			if !d.inPlace {
				if err := os.Rename(s.state, s.state+".damaged"); err != nil {
					t.Fatal(err)
				}
			}
			if r := bin.Run(t, nil, "resync", "--config", s.cfg, "--state", s.state, "--source", "small", "--from-start"); r.Code != 0 {
				t.Fatalf("resync: %s", r)
			}
			s.mustRun(t)
			s.equal(t)
		})
	}
}

// boltPut writes one key of one bucket of a bbolt file, as another
// program (a newer syncd) would.
func boltPut(t *testing.T, path, bucket, key string, value []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(bucket)).Put([]byte(key), value)
	}); err != nil {
		t.Fatal(err)
	}
}

// mountTmpfs mounts a tmpfs of size at a new folder and unmounts it at
// cleanup. It skips the test when this process cannot mount.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if r := runCmd(t, "mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir); r.Code != 0 {
		t.Skipf("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): %s", strings.TrimSpace(r.Stderr))
	}
	t.Cleanup(func() {
		if r := runCmd(t, "umount", dir); r.Code != 0 {
			t.Errorf("umount %s: %s", dir, r.Stderr)
		}
	})
	return dir
}

// TestStateFileReadOnly: the file system under the state file turns
// read-only; the run stops with one clear line, the file is unchanged and
// nothing is skipped once it is writable again.
func TestStateFileReadOnly(t *testing.T) {
	dir := mountTmpfs(t, "4m")
	s := newSmallSync(t, dir, 200)
	s.mustRun(t)
	s.insert(t, 300)
	before := readBytes(t, s.state)
	if r := runCmd(t, "mount", "-o", "remount,ro", dir); r.Code != 0 {
		t.Fatalf("remount read-only: %s", r.Stderr)
	}
	line := oneLine(t, s.run(t), 1, s.state, "read-only", "writable")
	if strings.Contains(line, "resync") {
		t.Errorf("a read-only state file is not damaged; the message must not advise a resync: %s", line)
	}
	t.Logf("read-only: %s", line)
	if !bytes.Equal(readBytes(t, s.state), before) {
		t.Fatal("the state file changed on a read-only file system")
	}
	if r := runCmd(t, "mount", "-o", "remount,rw", dir); r.Code != 0 {
		t.Fatalf("remount read-write: %s", r.Stderr)
	}
	s.mustRun(t)
	s.equal(t)
}

// fillDisk writes a file into dir until the file system has no space left
// and returns its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()
	return filler
}

// TestStateFileDiskFull: no space under the state file. A first run cannot
// create the file: it stops with one clear line before writing to the sink.
// An existing file is rewritten in its own pages (bbolt reuses them), so a
// run either completes or stops clearly; either way the file still opens,
// its watermark did not move back, and the next run with space completes.
func TestStateFileDiskFull(t *testing.T) {
	dir := mountTmpfs(t, "1m")
	s := newSmallSync(t, dir, 100)
	filler := fillDisk(t, dir)
	line := oneLine(t, s.run(t), 1, s.state, "no space left", "writable")
	t.Logf("disk full, new state file: %s", line)
	if n := count(t, s.db, "copy"); n > 0 {
		t.Fatalf("the sink got %d rows though the state file could not be created", n)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s.mustRun(t)
	s.equal(t)

	prev := cursorOf(t, s.cfg, s.state, "small")
	filler = fillDisk(t, dir)
	s.insert(t, 3000)
	r := s.run(t)
	if r.Code != 0 {
		line := oneLine(t, r, 1, s.state, "no space left")
		t.Logf("disk full, existing state file: %s", line)
	} else {
		t.Logf("disk full, existing state file: the run completed within the file's own pages")
	}
	st, err := watermark.Open(s.state, 0)
	if err != nil {
		t.Fatalf("the state file no longer opens after a full disk: %v", err)
	}
	got, _, err := st.Get("small")
	st.Close()
	if err != nil {
		t.Fatalf("the watermark no longer decodes after a full disk: %v", err)
	}
	if compareCursor(t, prev, got.Cursor) > 0 {
		t.Fatalf("watermark moved back from %v to %v", prev, got.Cursor)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s.mustRun(t)
	s.equal(t)
}

func runCmd(t *testing.T, name string, args ...string) result {
	t.Helper()
	cmd := execCommand(context.Background(), name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{Stdout: out.String(), Stderr: errb.String()}
	if err != nil {
		r.Code = 1
		if r.Stderr == "" {
			r.Stderr = err.Error()
		}
	}
	return r
}
