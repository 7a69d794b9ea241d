package filesink_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/filesink"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/sink/sinktest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// filesKind is the kind under test, as a build registers it.
var filesKind = filesink.Kind()

// loadConfig parses a source file of the files kind (the source is not
// connected to).
func loadConfig(t *testing.T, sourceDSN, dir, table, extra string) *config.Config {
	t.Helper()
	file := filepath.Join(t.TempDir(), "files.yaml")
	yaml := fmt.Sprintf("name: orders\nsource:\n  dsn: %s\n  table: public.orders\n  cursor: [updated_at, id]\nsink:\n  type: files\n  directory: %s\n  table: %s\n%s", sourceDSN, dir, table, extra)
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cs, err := config.LoadWith(file, config.Options{Sinks: kind.NewRegistry(filesKind).Sinks()})
	if err != nil {
		t.Fatal(err)
	}
	return cs[0]
}

// readCopy reads the copy's lines as a reader does: the newest line of
// each key by its cursor (updated_at, then the line's position). It also
// returns how many lines the file holds.
func readCopy(t *testing.T, path string) (map[string]map[string]*string, int) {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return map[string]map[string]*string{}, 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string]*string{}
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		n++
		var row map[string]*string
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("line %d of %s: %v", n, path, err)
		}
		id := *row["id"]
		if old, ok := out[id]; !ok || *old["updated_at"] <= *row["updated_at"] {
			out[id] = row
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out, n
}

func TestConformance(t *testing.T) {
	sinktest.Exercise(t, func(t *testing.T) sinktest.Harness {
		dir := t.TempDir()
		cfg := loadConfig(t, "postgres://localhost/none", dir, "public.copy", "")
		return sinktest.Harness{
			Columns: []page.Column{
				{Name: "id", Type: "bigint", TypeOID: 20, NotNull: true},
				{Name: "updated_at", Type: "timestamp with time zone", TypeOID: 1184, NotNull: true},
				{Name: "val", Type: "text", TypeOID: 25},
			},
			Has:    sinktest.Capabilities{Appends: true},
			Kind:   &filesKind,
			Config: func(*testing.T) *config.Config { return cfg },
			Moved: func(t *testing.T) *config.Config {
				return loadConfig(t, "postgres://localhost/none", t.TempDir(), "public.copy", "")
			},
			Open: func(t *testing.T) sink.Sink {
				s, err := filesink.Open(t.Context(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			Page: func(keys []int64, version int) page.Page {
				var p page.Page
				ts := fmt.Sprintf("2026-01-01 00:00:%02d.000001+00", version)
				for _, k := range keys {
					p.Rows = append(p.Rows, [][]byte{[]byte(fmt.Sprint(k)), []byte(ts), []byte(fmt.Sprintf("k%d\tv%d", k, version))})
				}
				if len(keys) > 0 {
					p.Last = []string{ts, fmt.Sprint(keys[len(keys)-1])}
				}
				return p
			},
			Contents: func(t *testing.T) []string {
				rows, _ := readCopy(t, filesink.Path(cfg))
				var out []string
				for _, r := range rows {
					out = append(out, *r["id"]+"|"+*r["updated_at"]+"|"+*r["val"])
				}
				slices.SortFunc(out, byKey)
				return out
			},
			Stored: func(t *testing.T) int {
				_, n := readCopy(t, filesink.Path(cfg))
				return n
			},
			Expect: func(state map[int64]int) []string {
				var out []string
				for k, v := range state {
					out = append(out, fmt.Sprintf("%d|2026-01-01 00:00:%02d.000001+00|k%d\tv%d", k, v, k, v))
				}
				slices.SortFunc(out, byKey)
				return out
			},
		}
	})
}

// byKey orders canonical lines by their numeric key.
func byKey(a, b string) int {
	ka, _ := strconv.ParseInt(strings.SplitN(a, "|", 2)[0], 10, 64)
	kb, _ := strconv.ParseInt(strings.SplitN(b, "|", 2)[0], 10, 64)
	return int(ka - kb)
}
