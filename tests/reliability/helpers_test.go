package reliability

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/cli"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/ops"
)

// result is what one syncd process did.
type result = testutil.Result

// baseEnv is the environment every syncd process gets: PATH and HOME only,
// so nothing from the developer's shell (SYNCD_STATE, PG*) leaks in.
func baseEnv() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
}

// writeFile writes content to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	return testutil.WriteFile(t, dir, name, content)
}

// tableConfig is a postgres-sink source file for the common tests.
type tableConfig struct {
	Name      string
	SourceDSN string
	Table     string
	Cursor    string // YAML list, e.g. "[updated_at, id]"
	SinkDSN   string
	SinkTable string
	PageSize  int
	Extra     string // more lines under source:
}

func (c tableConfig) YAML() string {
	var b strings.Builder
	b.WriteString("name: " + c.Name + "\nsource:\n  dsn: " + c.SourceDSN + "\n  table: " + yamlQuote(c.Table) + "\n  cursor: " + c.Cursor + "\n")
	if c.PageSize > 0 {
		b.WriteString("  page_size: " + strconv.Itoa(c.PageSize) + "\n")
	}
	b.WriteString(c.Extra)
	b.WriteString("sink:\n  dsn: " + c.SinkDSN + "\n  table: " + yamlQuote(c.SinkTable) + "\n")
	return b.String()
}

// yamlQuote writes s as a double-quoted YAML scalar.
func yamlQuote(s string) string {
	b, _ := json.Marshal(s) // JSON strings are valid YAML double-quoted scalars
	return string(b)
}

// status reads `syncd status --json`.
func status(t *testing.T, config, state string) ops.Status {
	t.Helper()
	r := bin.Run(t, nil, "status", "--json", "--config", config, "--state", state)
	if r.Code != 0 {
		t.Fatalf("status: %s", r)
	}
	var st ops.Status
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		t.Fatalf("status --json is not JSON: %v\n%s", err, r.Stdout)
	}
	return st
}

// cursorOf returns the stored cursor of source name (nil before the first page).
func cursorOf(t *testing.T, config, state, name string) []string {
	t.Helper()
	// A process killed before it wrote anything leaves no state file, and
	// status says so with exit 2: no watermark yet.
	if _, err := os.Stat(state); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, s := range status(t, config, state).Sources {
		if s.Name == name {
			return s.Cursor
		}
	}
	t.Fatalf("status has no source %s", name)
	return nil
}

// compareCursor orders two stored cursors column by column: timestamps as
// instants, integers as numbers, anything else as text; nil sorts first.
func compareCursor(t *testing.T, a, b []string) int {
	t.Helper()
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	if len(a) != len(b) {
		t.Fatalf("cursors %q and %q have different lengths", a, b)
	}
	for i := range a {
		var c int
		ta, ok1 := cli.ParsePGTime(a[i])
		tb, ok2 := cli.ParsePGTime(b[i])
		ia, err1 := strconv.ParseInt(a[i], 10, 64)
		ib, err2 := strconv.ParseInt(b[i], 10, 64)
		switch {
		case ok1 && ok2:
			c = ta.Compare(tb)
		case err1 == nil && err2 == nil:
			c = cmp.Compare(ia, ib)
		default:
			c = strings.Compare(a[i], b[i])
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

// diff counts rows of a missing from b and rows of b missing from a,
// comparing every column by value (both tables in db, keyed by id): a
// changed row counts on both sides.
func diff(t *testing.T, db *pgtest.DB, a, b string) (missing, extra int64) {
	t.Helper()
	d := testutil.DiffTables(t, db.Pool, a, db.Pool, b)
	if !d.Equal() {
		t.Logf("%s against %s: %s", b, a, d)
	}
	return int64(d.Missing + d.Changed + d.Duplicates), int64(d.Extra + d.Changed)
}

// count returns the row count of a table, or -1 when it does not exist.
func count(t *testing.T, db *pgtest.DB, table string) int64 {
	t.Helper()
	var exists bool
	if err := db.Pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if !exists {
		return -1
	}
	var n int64
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// column returns the one column of a query's rows.
func column[T any](t *testing.T, db *pgtest.DB, q string, args ...any) []T {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[T])
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return out
}

// lines returns the non-empty lines of s.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// readBytes returns a file's content, or nil when it does not exist.
func readBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return b
}

var execCommand = exec.CommandContext
